package stream

import (
	"context"

	"github.com/riskstream/riskstream/event"
)

// batch is a chunk's records decoded ahead of processing, on the decode
// goroutine, so that JSON scanning runs on one core while the window
// operator runs on the other.
type batch struct {
	c      *chunk
	lines  [][]byte
	lineNo []int64
	events []event.Event
	errs   []error
}

// decodeChunks decodes every line of every chunk from in and sends the
// batches on out, closing it when in is drained. Batches are recycled
// through free.
func decodeChunks(ctx context.Context, dec *event.Decoder, in <-chan *chunk, out chan<- *batch, free chan *batch) {
	defer close(out)
	for c := range in {
		var b *batch
		select {
		case b = <-free:
		default:
			b = &batch{}
		}
		b.c, b.lines, b.lineNo, b.errs = c, b.lines[:0], b.lineNo[:0], b.errs[:0]
		if c.err == nil {
			forEachLine(c, func(line []byte, n int64) error {
				i := len(b.lines)
				if i == len(b.events) {
					b.events = append(b.events, event.Event{})
				}
				err := dec.Decode(line, &b.events[i])
				if err == nil {
					dec.Retain() // the event lives until the engine is done with the batch
				}
				b.lines, b.lineNo, b.errs = append(b.lines, line), append(b.lineNo, n), append(b.errs, err)
				return nil
			})
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return
		}
	}
}

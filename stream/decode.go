package stream

import (
	"context"

	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/windows"
)

// batch is a chunk's records decoded and keyed ahead of processing, on the
// decode goroutine, so that JSON scanning runs on one core while the window
// operator runs on the other.
type batch struct {
	c      *chunk
	lines  [][]byte
	lineNo []int64
	events []event.Event
	errs   []error
	refs   []windows.SlotRef // every event's, in order
	refEnd []int             // events[i]'s refs end at refs[refEnd[i]]
}

// refsOf returns the SlotRefs of events i to j-1.
func (b *batch) refsOf(i, j int) []windows.SlotRef {
	start := 0
	if i > 0 {
		start = b.refEnd[i-1]
	}
	return b.refs[start:b.refEnd[j-1]]
}

// decodeChunks decodes every line of every chunk from in and sends the
// batches on out, closing it when in is drained. Batches are recycled
// through free.
func decodeChunks(ctx context.Context, dec *engine.Decoder, in <-chan *chunk, out chan<- *batch, free chan *batch) {
	defer close(out)
	for c := range in {
		var b *batch
		select {
		case b = <-free:
		default:
			b = &batch{}
		}
		b.c, b.lines, b.lineNo, b.errs, b.refs, b.refEnd = c, b.lines[:0], b.lineNo[:0], b.errs[:0], b.refs[:0], b.refEnd[:0]
		if c.err == nil {
			forEachLine(c, func(line []byte, n int64) error {
				i := len(b.lines)
				if i == len(b.events) {
					b.events = append(b.events, event.Event{})
				}
				var err error
				b.refs, err = dec.Decode(line, &b.events[i], b.refs)
				if err == nil {
					dec.Retain() // the event lives until the engine is done with the batch
				}
				b.lines, b.lineNo, b.errs = append(b.lines, line), append(b.lineNo, n), append(b.errs, err)
				b.refEnd = append(b.refEnd, len(b.refs))
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

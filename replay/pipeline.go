package replay

import (
	"context"
	"sync"

	"github.com/riskstream/riskstream/driver"
	"github.com/riskstream/riskstream/engine"
)

// inFlight is a chunk's records on their way through the sharded engine:
// decoded and keyed on a decode worker, timed in input order, then
// processed by every shard on goroutines of their own, then merged in
// order.
type inFlight struct {
	c       *chunk
	b       *engine.Batch
	decoded sync.WaitGroup // the decode worker, until it is done
	shards  sync.WaitGroup // the shards still processing it
	errs    []error        // per shard
}

// decodeChunks decodes and keys the lines of every chunk from in on
// workers goroutines, several chunks at once, then times each in input
// order, hands it to every shard and sends the loop its merge: a step that
// calls merge with it. It closes steps and the shards' channels when in is
// drained. What is in flight is recycled through free.
//
// Decoding is parallel because it is most of the per-record work outside
// the shards: on one goroutine it would cap replay at what one core
// decodes. Timing stays sequential: the watermark after each record
// depends on every record before it.
func decodeChunks(ctx context.Context, e *engine.Sharded, workers int, in <-chan *chunk, shards []chan *inFlight,
	steps chan<- driver.Mail, merge func(*inFlight) error, free chan *inFlight) {
	defer func() {
		close(steps)
		for _, s := range shards {
			close(s)
		}
	}()
	work, ordered := make(chan *inFlight, workers), make(chan *inFlight, workers+1)
	for range workers {
		go decodeWorker(e.NewDecoder(), work)
	}
	go func() {
		defer close(ordered)
		defer close(work)
		for c := range in {
			var b *inFlight
			select {
			case b = <-free:
				b.b.Reset()
			default:
				b = &inFlight{b: e.NewBatch(), errs: make([]error, len(shards))}
			}
			b.c = c
			b.decoded.Add(1)
			work <- b // a worker is never blocked for long: it only decodes
			select {
			case ordered <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	for b := range ordered {
		b.decoded.Wait()
		if b.c.err == nil {
			b.c.err = e.Time(b.b, 0)
		}
		b.shards.Add(len(shards))
		for _, s := range shards {
			s <- b
		}
		select {
		case steps <- func() error { return merge(b) }:
		case <-ctx.Done():
			return
		}
	}
}

// decodeWorker decodes and keys the lines of the chunk of everything in
// flight from work with dec.
func decodeWorker(dec *engine.Decoder, work <-chan *inFlight) {
	var rec engine.Record
	for b := range work {
		if c := b.c; c.err == nil && len(c.recs) > 0 {
			b.b.Grow(len(c.recs))
			for i := range c.recs {
				b.b.Add(dec, &c.recs[i])
			}
		} else if c.err == nil {
			b.b.Grow(c.lines + 1)
			rec.Prov.File = c.file
			forEachLine(c, func(line []byte, n int64) error {
				rec.Value, rec.Prov.Line = line, n
				b.b.Add(dec, &rec)
				return nil
			})
		}
		b.decoded.Done()
	}
}

// processShard runs one shard over the records of everything in flight
// from in, in order, and marks each done; after an error it only marks
// them.
func processShard(s *engine.Shard, k int, in <-chan *inFlight) {
	var failed error
	for b := range in {
		if failed == nil {
			failed = s.Process(b.b)
		}
		b.errs[k] = failed
		b.shards.Done()
	}
}

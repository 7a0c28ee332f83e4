package stream

import (
	"context"
	"sync"

	"github.com/riskstream/riskstream/engine"
)

// batch is a chunk's records on their way through the sharded engine:
// decoded, keyed and timed on the decode goroutine, then processed by every
// shard on goroutines of their own, then merged in order.
type batch struct {
	c      *chunk
	b      *engine.Batch
	shards sync.WaitGroup // the shards still processing it
	errs   []error        // per shard
}

// decodeChunks decodes, keys and times every line of every chunk from in,
// hands each batch to every shard, and sends it on merge in input order,
// closing merge and the shards' channels when in is drained. Batches are
// recycled through free.
func decodeChunks(ctx context.Context, e *engine.Sharded, in <-chan *chunk, shards []chan *batch, merge chan<- *batch, free chan *batch) {
	defer func() {
		close(merge)
		for _, s := range shards {
			close(s)
		}
	}()
	dec := e.NewDecoder()
	var rec engine.Record
	for c := range in {
		var b *batch
		select {
		case b = <-free:
			b.b.Reset()
		default:
			b = &batch{b: e.NewBatch(), errs: make([]error, len(shards))}
		}
		b.c = c
		if c.err == nil {
			rec.Prov.File = c.file
			forEachLine(c, func(line []byte, n int64) error {
				rec.Value, rec.Prov.Line = line, n
				b.b.Add(dec, &rec)
				return nil
			})
			e.Time(b.b, 0)
		}
		b.shards.Add(len(shards))
		for _, s := range shards {
			s <- b
		}
		select {
		case merge <- b:
		case <-ctx.Done():
			return
		}
	}
}

// processShard runs one shard over every batch from in, in order, and
// marks each done; after an error it only marks them.
func processShard(s *engine.Shard, k int, in <-chan *batch) {
	var failed error
	for b := range in {
		if failed == nil {
			failed = s.Process(b.b)
		}
		b.errs[k] = failed
		b.shards.Done()
	}
}

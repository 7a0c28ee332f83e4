package distributed

import (
	"context"
	"sync"
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/segmentio/kafka-go"
)

// wholeJobLookBack is how far back the whole job's console starts
// reading the outputs: the span of its charts.
const wholeJobLookBack = 5 * time.Minute

// outputFollower feeds the console of the whole job (jobbase.Base.wholeJob)
// from the output topics: each instance of a distributed job holds part
// of the state, but all write their decisions, heatmaps, late and dlq
// records to the same topics. It starts with the first request for the
// page, so that an instance nobody looks at reads nothing back, and reads
// from wholeJobLookBack before then, so that the page shows the last
// minutes of the job at once. It samples every jobbase.ConsoleSampleEvery of the
// records' timestamps, the time they were written, while it catches up,
// and of the clock after.
type outputFollower struct {
	j       *instance
	ctx     context.Context // the job's
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	reading sync.WaitGroup
}

// newOutputFollower returns the follower of j's outputs, which stops with
// ctx or with the job.
func newOutputFollower(ctx context.Context, j *instance) *outputFollower {
	ctx, cancel := context.WithCancel(ctx)
	f := &outputFollower{j: j, ctx: ctx, cancel: cancel}
	j.OnClose(func() {
		// Under the lock: no start after the job ended (wanted).
		f.mu.Lock()
		f.cancel()
		f.mu.Unlock()
		f.reading.Wait()
	})
	return f
}

// wanted starts following, unless it has: a page asked for the whole
// job. Reading starts on a goroutine of its own; the page fills within a
// second.
func (f *outputFollower) wanted() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started || f.ctx.Err() != nil {
		return
	}
	f.started = true
	f.reading.Go(func() {
		if err := f.follow(); err != nil && f.ctx.Err() == nil {
			f.j.Log.Warn("the whole job's console cannot read the output topics; the next request for it tries again", "err", err)
			f.mu.Lock()
			f.started = false
			f.mu.Unlock()
		}
	})
}

// follow reads the output topics into the whole job's console until the
// job ends.
func (f *outputFollower) follow() error {
	j, ctx, reading := f.j, f.ctx, &f.reading
	o := j.Opts.Outputs
	partitions, err := kafkaio.OutputPartitions(ctx, j.client, o.Names())
	if err != nil {
		return err
	}
	from, err := kafkaio.OffsetsAt(ctx, j.client, partitions, j.Opts.Now().Add(-wholeJobLookBack))
	if err != nil {
		return err
	}
	feed := console.NewOutputFeed(j.WholeJob, jobbase.ConsoleKeyLimit)
	// A channel per output: a fetch does not name its topic. A topic
	// named for two outputs is read as the first.
	kinds := []struct {
		topic string
		take  func([]byte) error
	}{
		{o.Decisions, feed.Decision},
		{o.Heatmaps, feed.Heatmap},
		{o.Late, func([]byte) error { feed.Late(); return nil }},
		{o.DLQ, func([]byte) error { feed.DLQ(); return nil }},
	}
	fetched := make([]chan kafkaio.Fetch, len(kinds))
	read := map[string]bool{}
	fetchers := 0
	for i, k := range kinds {
		fetched[i] = make(chan kafkaio.Fetch, 4)
		if read[k.topic] {
			continue
		}
		read[k.topic] = true
		for _, p := range partitions[k.topic] {
			next, ok := from[k.topic][p]
			if !ok {
				next = kafka.LastOffset
			}
			f := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: j.Opts.Brokers, Dialer: j.Sec.Dialer(), Topic: k.topic,
				Partition: p, From: next, Out: fetched[i], Log: j.Log, Now: j.Opts.Now})
			reading.Go(func() { f.Run(ctx) })
			fetchers++
		}
	}
	j.Log.Info("the whole job's console reads the output topics", "from", j.Opts.Now().Add(-wholeJobLookBack).UTC().Format(time.RFC3339))
	reading.Go(func() {
		tick := time.NewTicker(jobbase.ConsoleSampleEvery)
		defer tick.Stop()
		complained := false
		var sampled time.Time
		sample := func(at time.Time) {
			if at.Sub(sampled) >= jobbase.ConsoleSampleEvery {
				feed.Sample(at)
				sampled = at
			}
		}
		// The clock samples once every partition has caught up: before,
		// it would lump what is left to read into one sample.
		caughtUp := map[[2]int]bool{}
		take := func(i int, f kafkaio.Fetch) {
			defer kafkaio.Recycle(f.Msgs)
			if !f.Behind {
				caughtUp[[2]int{i, int(f.Partition)}] = true
			}
			for _, m := range f.Msgs {
				if sampled.IsZero() {
					sampled = m.Time // the first sample counts from the first record
				}
				sample(m.Time)
				if err := kinds[i].take(m.Value); err != nil && !complained {
					complained = true
					j.Log.Warn("an output record the whole job's console cannot read, skipped (and any more, unsaid)",
						"topic", kinds[i].topic, "partition", f.Partition, "offset", m.Offset, "err", err)
				}
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case f := <-fetched[0]:
				take(0, f)
			case f := <-fetched[1]:
				take(1, f)
			case f := <-fetched[2]:
				take(2, f)
			case f := <-fetched[3]:
				take(3, f)
			case <-tick.C:
				if len(caughtUp) == fetchers {
					sample(j.Opts.Now())
				}
			}
		}
	})
	return nil
}

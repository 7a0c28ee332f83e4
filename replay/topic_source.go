package replay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/riskstream/riskstream/driver"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/parallel"
	"github.com/riskstream/riskstream/job"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/ruleslog"
)

// replayTopic runs the engine over the ranges of a topic through the live
// job's loop (job.Loop): the same merge of the partitions and the same
// engine calls in the same order, so that the outputs are the live job's
// record for record. The merge never times out here: a replay waits for
// every partition, so its order depends on the topic alone.
func replayTopic(ctx context.Context, opts Options, e *engine.Sharded, prog *observe.Progress, versions *ruleslog.Log) error {
	sec, err := kafkaconn.New(opts.Security)
	if err != nil {
		return err
	}
	// A wrong password, a TLS mismatch or no broker at all fails here,
	// saying so, as for produce.
	if err := sec.Check(ctx, opts.Brokers); err != nil {
		err = fmt.Errorf("replay of topic %s: brokers %v (%v): %w", opts.Topic, opts.Brokers, sec, err)
		if hint := kafkaconn.RefusedHint(err, ""); hint != "" {
			err = fmt.Errorf("%w\n%s", err, hint)
		}
		return err
	}
	ranges, err := kafkaio.TopicRanges(ctx, opts.Brokers, sec, opts.Topic, opts.From, opts.To)
	if err != nil {
		return err
	}
	loop, err := job.New(job.Options{Engine: e, Topic: opts.Topic, PartitionWait: job.Forever, BehindWait: job.Forever,
		Process: processShards(e)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var reading sync.WaitGroup
	defer reading.Wait()
	defer cancel()
	fetched := make(chan kafkaio.Fetch, 16)
	open, records := 0, int64(0)
	for _, r := range ranges {
		// A partition without records in the range has no say in the
		// watermark: live, it turns idle.
		if r.End <= r.From {
			continue
		}
		loop.AddPartition(r.Partition, 0)
		f := kafkaio.NewFetcher(kafkaio.FetcherOptions{Brokers: opts.Brokers, Dialer: sec.Dialer(), Topic: opts.Topic,
			Partition: int(r.Partition), From: r.From, End: r.End, Out: fetched, Log: opts.Logger})
		reading.Go(func() { f.Run(ctx) })
		open++
		records += r.End - r.From
	}
	opts.Logger.Info("replaying a topic", "topic", opts.Topic, "from", opts.From, "to", opts.To,
		"partitions", len(ranges), "offsets", records)
	reloads := newReloads(versions, loop, ranges)
	err = driver.Run(ctx, driver.Options{
		Sources: []driver.Source{{Fetched: fetched, Take: func(f kafkaio.Fetch) error {
			if f.Done {
				open--
			}
			loop.Push(f, 0)
			for {
				if n, _ := loop.Take(0); n > 0 {
					if err := loop.Run(0, nil); err != nil {
						return err
					}
					prog.Update(e)
				}
				p, offset, stopped := loop.Stopped()
				if !stopped {
					return nil
				}
				if err := reloads.at(p, offset, opts.Logger); err != nil {
					return err
				}
			}
		}}},
		Stop:     ctx.Err,
		Finished: func() bool { return open == 0 },
	})
	if err != nil {
		return err
	}
	if loop.Buffered() > 0 {
		return errors.New("records left in the merge after every partition ended")
	}
	return nil
}

// processShards runs a batch on every shard of e at once.
func processShards(e *engine.Sharded) func(b *engine.Batch) error {
	return func(b *engine.Batch) error {
		shards := e.Shards()
		errs := make([]error, len(shards))
		parallel.Do(len(shards), func(i int) { errs[i] = shards[i].Process(b) })
		return errors.Join(errs...)
	}
}

// reloads are the reloads of a distributed job's rules a replay of its
// input makes (Options.RulesTopic): each version, in turn, before the
// first record in the merge's order where the job's router began to route
// by it (job.Switches), which is where every state of the job took it.
type reloads struct {
	log      *ruleslog.Log
	loop     *job.Loop
	switches *job.Switches
}

// newReloads sets the loop's stops for the versions of log after the
// first (nil: none) on the partitions of ranges.
func newReloads(log *ruleslog.Log, loop *job.Loop, ranges []kafkaio.TopicRange) *reloads {
	r := &reloads{log: log, loop: loop}
	if log != nil {
		var parts []int32
		for _, tr := range ranges {
			parts = append(parts, tr.Partition)
		}
		r.switches = job.NewSwitches(log, loop.Merge, 1, parts)
	}
	return r
}

// at reloads, before the record at offset of partition p, the versions
// the job's router switched to there.
func (r *reloads) at(p int32, offset int64, log *slog.Logger) error {
	for _, v := range r.switches.At(p, offset) {
		diff, err := r.loop.Reload(r.log.Rules(v))
		if err != nil {
			return fmt.Errorf("rules version %d: %w", v, err)
		}
		kept, restarted, removed, added := diff.Groups()
		log.Info("rules reloaded where the job's router began to route by them", "version", v, "partition", p, "offset", offset,
			"kept", len(kept), "restarted", len(restarted), "removed", len(removed), "added", len(added))
	}
	return nil
}

package stream

import (
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/sink"
)

// A checkpointer is a job's part in its checkpoints: jobBase.checkpoint
// takes the steps docs/design.md gives ("Outputs, checkpoint, offsets"),
// in that order, and asks the checkpointer for what the single job
// (liveCheckpointer) and an instance of a distributed one (distCheckpointer)
// do differently: which stores they write, and how.
type checkpointer interface {
	// appliedRecords is how many records the state has applied: the
	// outputs' ends are noted at it (step 2).
	appliedRecords() int64
	// persist puts the state changed since the last checkpoint and the
	// checkpoint itself, with the outputs' ends, into the stores (step
	// 3) and commits them (step 4). Once they are durable it calls
	// durable, on the loop or, for a commit the loop does not wait for,
	// on the store's goroutine, with what commits the input offsets to
	// the consumer group (step 5). A checkpoint it could not write, the
	// previous one staying in force, never calls durable; an error ends
	// the job.
	persist(ends []kafkaio.OutputEnd, durable func(commitOffsets func())) error
	// publishGauges sets the gauges of the state and the input.
	publishGauges()
	// sample is what the console shows of the job at now (ms).
	sample(now int64) console.Sample
}

// checkpoint checkpoints the job, on the loop: the outputs made so far
// are acknowledged by the brokers first (drain, in order), and the
// checkpoint holds the loop until c has written it.
func (j *jobBase) checkpoint(c checkpointer, drain ...*sink.Writer) error {
	start := j.opts.Now()
	defer j.paused(start)
	for _, w := range drain {
		if err := w.Drain(); err != nil {
			return err
		}
	}
	ends := j.ends.AtCheckpoint(c.appliedRecords())
	err := c.persist(ends, func(commitOffsets func()) {
		// Only once the checkpoint is durable may the group see its
		// offsets: never ahead of it.
		commitOffsets()
		j.checkpointed(start)
	})
	if err != nil {
		return err
	}
	c.publishGauges()
	if now := j.opts.Now(); j.console != nil && now.Sub(j.lastSample) >= consoleSampleEvery {
		j.lastSample = now
		j.console.Add(c.sample(now.UnixMilli()))
	}
	return nil
}

// paused notes how long the checkpoint begun at start held the loop.
func (j *jobBase) paused(start time.Time) {
	end := j.opts.Now()
	j.m.CheckpointPause.Observe(end.Sub(start).Seconds())
	if j.opts.checkpointPaused != nil {
		j.opts.checkpointPaused(start.UnixNano(), end.UnixNano())
	}
}

// checkpointed notes that the checkpoint begun at start is durable: its
// duration, its time, and the console's mark of it.
func (j *jobBase) checkpointed(start time.Time) {
	j.m.Checkpoint.Observe(j.opts.Now().Sub(start).Seconds())
	j.m.LastCheckpoint.Set(float64(j.opts.Now().UnixMilli()) / 1000)
	if j.console != nil {
		j.console.Checkpointed(j.opts.Now())
	}
}

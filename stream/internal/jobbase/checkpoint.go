package jobbase

import (
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/sink"
)

// A Checkpointer is a job's part in its checkpoints: Base.Checkpoint
// takes the steps docs/design.md gives ("Outputs, checkpoint, offsets"),
// in that order, and asks the Checkpointer for what the single job
// (stream's liveCheckpointer) and an instance of a distributed one
// (package distributed's instanceCheckpointer) do differently: which
// stores they write, and how.
type Checkpointer interface {
	// AppliedRecords is how many records the state has applied: the
	// outputs' ends are noted at it (step 2).
	AppliedRecords() int64
	// Persist puts the state changed since the last checkpoint and the
	// checkpoint itself, with the outputs' ends, into the stores (step
	// 3) and commits them (step 4). Once they are durable it calls
	// durable, on the loop or, for a commit the loop does not wait for,
	// on the store's goroutine, with what commits the input offsets to
	// the consumer group (step 5). A checkpoint it could not write, the
	// previous one staying in force, never calls durable; an error ends
	// the job.
	Persist(ends []kafkaio.OutputEnd, durable func(commitOffsets func())) error
	// PublishGauges sets the gauges of the state and the input.
	PublishGauges()
	// Sample is what the console shows of the job at now (ms).
	Sample(now int64) console.Sample
}

// Checkpoint checkpoints the job, on the loop: the outputs made so far
// are acknowledged by the brokers first (drain, in order), and the
// checkpoint holds the loop until c has written it.
func (j *Base) Checkpoint(c Checkpointer, drain ...*sink.Writer) error {
	start := j.Opts.Now()
	defer j.paused(start)
	for _, w := range drain {
		if err := w.Drain(); err != nil {
			return err
		}
	}
	ends := j.Ends.AtCheckpoint(c.AppliedRecords())
	err := c.Persist(ends, func(commitOffsets func()) {
		// Only once the checkpoint is durable may the group see its
		// offsets: never ahead of it.
		commitOffsets()
		j.checkpointed(start)
	})
	if err != nil {
		return err
	}
	c.PublishGauges()
	if now := j.Opts.Now(); j.Console != nil && now.Sub(j.lastSample) >= ConsoleSampleEvery {
		j.lastSample = now
		j.Console.Add(c.Sample(now.UnixMilli()))
	}
	return nil
}

// paused notes how long the checkpoint begun at start held the loop.
func (j *Base) paused(start time.Time) {
	end := j.Opts.Now()
	j.M.CheckpointPause.Observe(end.Sub(start).Seconds())
	if j.Opts.Testing.CheckpointPaused != nil {
		j.Opts.Testing.CheckpointPaused(start.UnixNano(), end.UnixNano())
	}
}

// checkpointed notes that the checkpoint begun at start is durable: its
// duration, its time, and the console's mark of it.
func (j *Base) checkpointed(start time.Time) {
	j.M.Checkpoint.Observe(j.Opts.Now().Sub(start).Seconds())
	j.M.LastCheckpoint.Set(float64(j.Opts.Now().UnixMilli()) / 1000)
	if j.Console != nil {
		j.Console.Checkpointed(j.Opts.Now())
	}
}

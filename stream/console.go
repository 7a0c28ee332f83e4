package stream

import (
	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/riskstream/riskstream/watermark"
)

// sample is the job's state now (epoch ms) for the console; it runs on
// the loop, at a checkpoint.
func (j *liveJob) Sample(now int64) console.Sample {
	st := j.e.Stats()
	s := console.Sample{At: now, Records: st.Records, Late: st.Late, DLQ: st.Invalid,
		StateBytes: int64(j.db.DiskBytes()), TopKeys: j.DecisionKeys.Take(jobbase.ConsoleTopKeys)}
	for i, r := range j.Opts.Config.Rules {
		s.Decisions = append(s.Decisions, console.RuleCount{Rule: r.Name, Action: r.Action, Count: st.Decisions[i]})
	}
	if wm := j.e.Watermark(); wm > watermark.Min && wm < watermark.Max {
		s.Watermark = wm
	}
	s.Partitions = jobbase.PartitionSamples(j.Opts.Topic, j.Fetchers, j.e.PartitionWatermark, now)
	s.Sources = jobbase.SourceSamples(j.e.Sources())
	return s
}

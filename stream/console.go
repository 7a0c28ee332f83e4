package stream

import (
	"slices"
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
)

const (
	// consoleSampleEvery is how often, at most, a checkpoint gives the
	// console a sample: checkpoints may be more frequent, and the charts
	// need no more.
	consoleSampleEvery = time.Second
	// consoleKeyLimit bounds the keys counted between two samples for the
	// console's top keys.
	consoleKeyLimit = 4096
	// consoleTopKeys is how many keys each sample keeps.
	consoleTopKeys = 20
	// consoleSources is how many sources each sample keeps: the degraded
	// ones, then those furthest from zero.
	consoleSources = 16
)

// watchedOutput feeds the console beside the metrics: each fired heatmap
// window to its rings, each decision to the count of decisions per key,
// which the loop owns. Both are called on the loop, per output, never per
// event.
type watchedOutput struct {
	heatmapMetrics
	live *console.Live
	keys *console.DecisionKeys
}

func (o watchedOutput) Heatmap(w *windows.HeatmapWindow) {
	o.live.Heatmap(w)
	o.heatmapMetrics.Heatmap(w)
}

func (o watchedOutput) Decision(d *windows.Decision) {
	o.keys.Add(d)
	o.heatmapMetrics.Decision(d)
}

// sample is the job's state now (epoch ms) for the console; it runs on
// the loop, at a checkpoint.
func (j *liveJob) sample(now int64) console.Sample {
	st := j.e.Stats()
	s := console.Sample{At: now, Records: st.Records, Late: st.Late, DLQ: st.Invalid,
		StateBytes: int64(j.db.DiskBytes()), TopKeys: j.decisionKeys.Take(consoleTopKeys)}
	for i, r := range j.opts.Config.Rules {
		s.Decisions = append(s.Decisions, console.RuleCount{Rule: r.Name, Action: r.Action, Count: st.Decisions[i]})
	}
	if wm := j.e.Watermark(); wm > watermark.Min && wm < watermark.Max {
		s.Watermark = wm
	}
	for _, f := range j.fetchers {
		p := console.PartitionSample{Partition: int32(f.partition), ConsumerLag: f.lag.Load()}
		if wm := j.e.PartitionWatermark(int32(f.partition)); wm > watermark.Min && wm < watermark.Max {
			p.WatermarkLag, p.Known = now-wm, true
		}
		s.Partitions = append(s.Partitions, p)
	}
	for _, src := range j.e.Sources() {
		s.Sources = append(s.Sources, console.SourceSample{Source: src.Source,
			Skew: float64(src.Skew.Microseconds()) / 1000, Known: src.Known, Degraded: src.Degraded})
	}
	slices.SortStableFunc(s.Sources, console.CompareSources)
	// A copy: the samples are kept for minutes, and the array of every
	// source (up to the skew tracker's limit) would be kept with them.
	s.Sources = slices.Clone(s.Sources[:min(len(s.Sources), consoleSources)])
	return s
}

package stream

import (
	"slices"
	"time"

	"github.com/riskstream/riskstream/console"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/sink"
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

// jobOutput is where the engine's outputs go: the sink, and on their way
// the heatmap metrics and, when the job serves a console, its rings of
// fired heatmap windows and its count of decisions per key, which the loop
// owns. Its methods run on the loop, per output, never per event.
type jobOutput struct {
	*sink.Kafka
	m *observe.Metrics
	// live and keys are the console's; nil without one.
	live *console.Live
	keys *console.DecisionKeys
	// times, if set, are those of the record whose outputs are being
	// made, which its decisions keep (sink.Kafka.DecisionAt).
	times *sink.DecisionTimes
}

func (o jobOutput) Heatmap(w *windows.HeatmapWindow) {
	if o.live != nil {
		o.live.Heatmap(w)
	}
	o.m.ObserveHeatmap(w)
	o.Kafka.Heatmap(w)
}

func (o jobOutput) Decision(d *windows.Decision) {
	if o.keys != nil {
		o.keys.Add(d)
	}
	var t sink.DecisionTimes
	if o.times != nil {
		t = *o.times
	}
	o.Kafka.DecisionAt(d, t)
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
	s.Partitions = partitionSamples(j.opts.Topic, j.fetchers, j.e.PartitionWatermark, now)
	s.Sources = sourceSamples(j.e.Sources())
	return s
}

// partitionSamples are, at now, the lags of the input partitions fetched
// (those of topic), their watermarks given by watermarkOf.
func partitionSamples(topic string, fetchers []*kafkaio.Fetcher, watermarkOf func(partition int32) int64, now int64) []console.PartitionSample {
	var out []console.PartitionSample
	for _, f := range fetchers {
		if f.Topic() != topic {
			continue
		}
		p := console.PartitionSample{Partition: int32(f.Partition()), ConsumerLag: f.Lag()}
		if wm := watermarkOf(int32(f.Partition())); wm > watermark.Min && wm < watermark.Max {
			p.WatermarkLag, p.Known = now-wm, true
		}
		out = append(out, p)
	}
	return out
}

// sourceSamples are the sources the console keeps of srcs: the degraded
// ones, then those furthest from zero, consoleSources at most.
func sourceSamples(srcs []watermark.SourceSkew) []console.SourceSample {
	var out []console.SourceSample
	for _, src := range srcs {
		out = append(out, console.SourceSample{Source: src.Source,
			Skew: float64(src.Skew.Microseconds()) / 1000, Known: src.Known, Degraded: src.Degraded})
	}
	slices.SortStableFunc(out, console.CompareSources)
	// A copy: the samples are kept for minutes, and the array of every
	// source (up to the skew tracker's limit) would be kept with them.
	return slices.Clone(out[:min(len(out), consoleSources)])
}

// sample is, for the console, what this instance of a distributed job
// holds now (epoch ms): the input partitions it routes, the state of the
// repartition partitions it holds, their decisions since it took them.
func (j *distJob) sample(now int64) console.Sample {
	rs := j.router.Stats()
	s := console.Sample{At: now, Records: rs.Records, Late: rs.Late, DLQ: rs.Invalid,
		TopKeys: j.decisionKeys.Take(consoleTopKeys), Sources: sourceSamples(j.router.Sources())}
	// By rule name: during a reload the states may apply different
	// versions of the rules.
	counts := map[string]int64{}
	least := watermark.Max
	for _, t := range j.tasks {
		ts := t.task.Stats()
		for i, r := range t.task.Rules().Rules {
			counts[r.Name] += ts.Decisions[i]
		}
		s.Late += ts.Late
		s.StateBytes += int64(t.db.DiskBytes())
		least = min(least, t.task.Watermark())
	}
	for _, r := range j.opts.Config.Rules {
		s.Decisions = append(s.Decisions, console.RuleCount{Rule: r.Name, Action: r.Action, Count: counts[r.Name]})
	}
	if least > watermark.Min && least < watermark.Max {
		s.Watermark = least
	}
	s.Partitions = partitionSamples(j.opts.Topic, j.fetchers, j.router.Partition, now)
	return s
}

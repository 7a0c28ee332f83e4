package jobbase

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
	// ConsoleSampleEvery is how often, at most, a checkpoint gives the
	// console a sample: checkpoints may be more frequent, and the charts
	// need no more.
	ConsoleSampleEvery = time.Second
	// ConsoleKeyLimit bounds the keys counted between two samples for the
	// console's top keys.
	ConsoleKeyLimit = 4096
	// ConsoleTopKeys is how many keys each sample keeps.
	ConsoleTopKeys = 20
	// ConsoleSources is how many sources each sample keeps: the degraded
	// ones, then those furthest from zero.
	ConsoleSources = 16
)

// Output is where the engine's outputs go: the sink, and on their way
// the heatmap metrics and, when the job serves a console, its rings of
// fired heatmap windows and its count of decisions per key, which the loop
// owns. Its methods run on the loop, per output, never per event.
type Output struct {
	*sink.Kafka
	M *observe.Metrics
	// Live and Keys are the console's; nil without one.
	Live *console.Live
	Keys *console.DecisionKeys
	// Times, if set, are those of the record whose outputs are being
	// made, which its decisions keep (sink.Kafka.DecisionAt).
	Times *sink.DecisionTimes
}

// Heatmap feeds w to the console and the heatmap metrics, then the sink.
func (o Output) Heatmap(w *windows.HeatmapWindow) {
	if o.Live != nil {
		o.Live.Heatmap(w)
	}
	o.M.ObserveHeatmap(w)
	o.Kafka.Heatmap(w)
}

// Decision counts d's key for the console, then hands d to the sink with
// the times of the record that made it.
func (o Output) Decision(d *windows.Decision) {
	if o.Keys != nil {
		o.Keys.Add(d)
	}
	var t sink.DecisionTimes
	if o.Times != nil {
		t = *o.Times
	}
	o.Kafka.DecisionAt(d, t)
}

// PartitionSamples are, at now, the lags of the input partitions fetched
// (those of topic), their watermarks given by watermarkOf.
func PartitionSamples(topic string, fetchers []*kafkaio.Fetcher, watermarkOf func(partition int32) int64, now int64) []console.PartitionSample {
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

// SourceSamples are the sources the console keeps of srcs: the degraded
// ones, then those furthest from zero, ConsoleSources at most.
func SourceSamples(srcs []watermark.SourceSkew) []console.SourceSample {
	var out []console.SourceSample
	for _, src := range srcs {
		out = append(out, console.SourceSample{Source: src.Source,
			Skew: float64(src.Skew.Microseconds()) / 1000, Known: src.Known, Degraded: src.Degraded})
	}
	slices.SortStableFunc(out, console.CompareSources)
	// A copy: the samples are kept for minutes, and the array of every
	// source (up to the skew tracker's limit) would be kept with them.
	return slices.Clone(out[:min(len(out), ConsoleSources)])
}

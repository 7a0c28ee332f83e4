package console

import (
	"encoding/json"
	"fmt"
	"time"
)

// OutputFeed makes a console of a job's outputs, as read back from their
// topics (LiveOptions.FromOutputs): the decisions of every rule and
// action and the keys with the most, the late and dlq records counted,
// and the fired heatmap windows. The instances of a distributed job each
// hold part of its state, but all write to the same topics: read from
// there, any instance shows the whole job. An OutputFeed is for one
// goroutine; the Live it feeds is safe to draw meanwhile.
type OutputFeed struct {
	live *Live
	// decisions count per rule and action since the feed started, in the
	// order first seen: a sample's counts keep their places.
	decisions []RuleCount
	index     map[[2]string]int
	// keys count decisions per rule and key text (JSON) since the last
	// sample, at most keyLimit of them.
	keys      map[[2]string]int64
	keyLimit  int
	late, dlq int64
	// decision is decoded into, its space kept.
	decision struct {
		Rule   string          `json:"rule"`
		Action string          `json:"action"`
		Key    json.RawMessage `json:"key"`
	}
}

// NewOutputFeed returns a feed of live that counts at most keyLimit keys
// between two samples (DecisionKeys).
func NewOutputFeed(live *Live, keyLimit int) *OutputFeed {
	return &OutputFeed{live: live, index: map[[2]string]int{}, keys: map[[2]string]int64{}, keyLimit: keyLimit}
}

// Decision counts a record of the decisions output.
func (f *OutputFeed) Decision(rec []byte) error {
	d := &f.decision
	d.Key = d.Key[:0]
	if err := json.Unmarshal(rec, d); err != nil {
		return fmt.Errorf("console: decision record: %w", err)
	}
	id := [2]string{d.Rule, d.Action}
	i, ok := f.index[id]
	if !ok {
		i = len(f.decisions)
		f.index[id] = i
		f.decisions = append(f.decisions, RuleCount{Rule: d.Rule, Action: d.Action})
	}
	f.decisions[i].Count++
	key := [2]string{d.Rule, string(d.Key)}
	if n, ok := f.keys[key]; ok || len(f.keys) < f.keyLimit {
		f.keys[key] = n + 1
	}
	return nil
}

// Heatmap keeps a record of the heatmaps output: a fired window, or a
// later revision of one.
func (f *OutputFeed) Heatmap(rec []byte) error {
	h, err := decodeHeatmapRecord(rec)
	if err != nil {
		return fmt.Errorf("console: heatmap record: %w", err)
	}
	if len(h.Window.Buckets) != len(h.Bounds)+1 {
		return fmt.Errorf("console: heatmap record: %d buckets for %d bounds", len(h.Window.Buckets), len(h.Bounds))
	}
	f.live.keep(h.Heatmap+"\x00"+h.Key, func() HeatmapSeries {
		return HeatmapSeries{Heatmap: h.Heatmap, Key: h.Key, Bounds: h.Bounds}
	}, func() HeatmapWindow { return h.Window })
	return nil
}

// Late counts a record of the late output, DLQ one of the dlq output.
func (f *OutputFeed) Late() { f.late++ }

// DLQ counts a record of the dlq output.
func (f *OutputFeed) DLQ() { f.dlq++ }

// Sample adds what the records fed so far say, at wall time at, to the
// console's samples, and starts counting keys afresh.
func (f *OutputFeed) Sample(at time.Time) {
	s := Sample{At: at.UnixMilli(), Decisions: append([]RuleCount(nil), f.decisions...), Late: f.late, DLQ: f.dlq}
	s.TopKeys = topKeys(f.keys, topKeyCount)
	clear(f.keys)
	for i := range s.TopKeys {
		if label, err := keyLabel(json.RawMessage(s.TopKeys[i].Key)); err == nil {
			s.TopKeys[i].Key = label
		}
	}
	f.live.Add(s)
}

package console

import (
	"bytes"
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
	// order first seen: a sample's counts keep their places; index finds
	// them by the text of a decision record from its rule's name to its
	// action's (decisionSpan).
	decisions []RuleCount
	index     map[string]int
	// keys index, by the text from the rule's name to the end of the key,
	// keyCounts, the decisions of at most keyLimit rules' keys since the
	// last sample.
	keys      map[string]int
	keyCounts []int64
	keyLimit  int
	late, dlq int64
	// span is decodedSpan's scratch space.
	span []byte
}

// NewOutputFeed returns a feed of live that counts at most keyLimit keys
// between two samples (DecisionKeys).
func NewOutputFeed(live *Live, keyLimit int) *OutputFeed {
	return &OutputFeed{live: live, index: map[string]int{}, keys: map[string]int{}, keyLimit: keyLimit}
}

// Decision counts a record of the decisions output. A record as the job
// writes it is not decoded: the text from its rule's name to the end of
// its key (decisionSpan) tells the rule, action and key apart, and finds
// their counts without an allocation; only another writer's is.
func (f *OutputFeed) Decision(rec []byte) error {
	span, keyAt, ok := decisionSpan(rec)
	if !ok {
		var err error
		if span, keyAt, err = f.decodedSpan(rec); err != nil {
			return err
		}
	}
	i, ok := f.index[string(span[:keyAt])]
	if !ok {
		d, err := decodeSpan(span)
		if err != nil {
			return err
		}
		i = len(f.decisions)
		f.index[string(span[:keyAt])] = i
		f.decisions = append(f.decisions, RuleCount{Rule: d.Rule, Action: d.Action})
	}
	f.decisions[i].Count++
	if k, ok := f.keys[string(span)]; ok {
		f.keyCounts[k]++
	} else if len(f.keys) < f.keyLimit {
		f.keys[string(span)] = len(f.keyCounts)
		f.keyCounts = append(f.keyCounts, 1)
	}
	return nil
}

// The fields of a decision record from its rule's name to its key's end,
// in the order the job's encoder writes them (sink.Encoder).
var (
	ruleField   = []byte(`,"rule":"`)
	actionField = []byte(`","action":"`)
	keyField    = []byte(`","key":`)
	windowField = []byte(`,"window":`)
)

// decisionSpan returns the text of a decision record rec from its rule's
// name to the end of its key, and where in it the key field begins
// (`rule","action":"action","key":{...}`), when rec is as the job's
// encoder writes it and none of those values has an escape (so that
// none can hold the text of a field name); ok is false otherwise.
func decisionSpan(rec []byte) (span []byte, keyAt int, ok bool) {
	i := bytes.Index(rec, ruleField)
	if i < 0 {
		return nil, 0, false
	}
	rest := rec[i+len(ruleField):]
	a := bytes.Index(rest, actionField)
	k := bytes.Index(rest, keyField)
	w := bytes.Index(rest, windowField)
	if a < 0 || k < a || w < k || bytes.IndexByte(rest[:w], '\\') >= 0 {
		return nil, 0, false
	}
	return rest[:w], k, true
}

// decodedSpan is decisionSpan of a record that is not as the job's
// encoder writes it, decoded.
func (f *OutputFeed) decodedSpan(rec []byte) ([]byte, int, error) {
	var d struct {
		Rule   string          `json:"rule"`
		Action string          `json:"action"`
		Key    json.RawMessage `json:"key"`
	}
	if err := json.Unmarshal(rec, &d); err != nil {
		return nil, 0, fmt.Errorf("console: decision record: %w", err)
	}
	rule, _ := json.Marshal(d.Rule)
	action, _ := json.Marshal(d.Action)
	f.span = append(append(append(f.span[:0], rule[1:len(rule)-1]...), `","action":`...), action...)
	keyAt := len(f.span) - 1
	f.span = append(append(f.span, `,"key":`...), d.Key...)
	return f.span, keyAt, nil
}

// decodeSpan decodes a decision's text from its rule's name to the end
// of its key.
func decodeSpan(span []byte) (d struct {
	Rule   string          `json:"rule"`
	Action string          `json:"action"`
	Key    json.RawMessage `json:"key"`
}, err error) {
	obj := append(append([]byte(`{"rule":"`), span...), '}')
	if err := json.Unmarshal(obj, &d); err != nil {
		return d, fmt.Errorf("console: decision record: %w", err)
	}
	return d, nil
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
	counts := make(map[[2]string]int64, len(f.keys))
	for span, k := range f.keys {
		if d, err := decodeSpan([]byte(span)); err == nil {
			counts[[2]string{d.Rule, string(d.Key)}] += f.keyCounts[k]
		}
	}
	clear(f.keys)
	f.keyCounts = f.keyCounts[:0]
	s.TopKeys = topKeys(counts, topKeyCount)
	for i := range s.TopKeys {
		if label, err := keyLabel(json.RawMessage(s.TopKeys[i].Key)); err == nil {
			s.TopKeys[i].Key = label
		}
	}
	f.live.Add(s)
}

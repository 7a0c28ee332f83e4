package windows

import (
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// Output receives what the operator emits, as Flink's Collector does. The
// values passed are reused by the operator and valid only during the call.
type Output interface {
	// Decision is called when an event brings a window of a rule above its
	// threshold.
	Decision(*Decision)
	// Heatmap is called when a heatmap window fires, or fires again with a
	// higher revision after a late event.
	Heatmap(*HeatmapWindow)
}

// Decision is a rule's verdict on one event.
type Decision struct {
	Rule *rules.Rule
	// RuleIndex is the rule's position in the rules file.
	RuleIndex int
	// EventID is the event's id as canonical JSON string text, and EventTS
	// its ts. The operator leaves both unset: it is given the event's refs,
	// not the event (see Operator.ProcessElement), and its caller sets them
	// on the way out, as it does Source. A pipeline decodes events on other
	// cores than the operator's, which then never reads them.
	EventID []byte
	EventTS int64
	// Key holds the texts of the rule's key attributes, each followed by a 0
	// byte; KeyParts splits it.
	Key        string
	Start, End int64
	Value      float64
	// Processing is set when the event was windowed by its reference time
	// because its source's clock is skewed.
	Processing bool
	// Source is where the event's record came from, set by the engine
	// (nil when unknown).
	Source *event.Provenance
}

// HeatmapWindow is the latency distribution of one fired window.
type HeatmapWindow struct {
	Heatmap *rules.Heatmap
	// HeatmapIndex is the heatmap's position in the rules file.
	HeatmapIndex int
	// Key is encoded as in Decision.
	Key        string
	Start, End int64
	Revision   int32
	Acc        *heatmap.Acc
}

// Result says what became of an event.
type Result uint8

const (
	// Accepted means the event updated at least one window.
	Accepted Result = iota
	// Unmatched means no rule or heatmap applies to the event.
	Unmatched
	// Late means every window the event belongs to is already purged.
	Late
)

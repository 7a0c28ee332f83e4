// Package rules defines the rules file: the watermark and skew settings, the
// decision rules and the latency heatmaps a job evaluates. Load and Parse read
// the YAML form and report every problem at once, each with its file and line,
// so that a bad file is refused before the job starts.
package rules

import (
	"strconv"
	"time"
)

// Config is a validated rules file. Durations are whole milliseconds, the
// resolution of event time.
type Config struct {
	// File is the path the config was read from ("" when parsed from memory).
	File string
	// Source is the text it was parsed from: what a job that watches File
	// compares the file with, so that an edit made after the parse is not
	// taken for what the job runs.
	Source    []byte
	Watermark WatermarkConfig
	Skew      SkewConfig
	Dedupe    DedupeConfig
	Rules     []Rule
	Heatmaps  []Heatmap
	// Warnings are settings that are valid but probably not what was meant,
	// such as a sliding window whose slide is larger than its size. check
	// prints them and the jobs log them at start; they refuse nothing.
	Warnings []Problem
}

// WatermarkConfig controls event-time progress.
type WatermarkConfig struct {
	// OutOfOrderness bounds how far behind the largest timestamp seen an
	// event may arrive and still be on time. The default value is 2s.
	OutOfOrderness time.Duration
	// IdleTimeout is how long a partition may stay silent before it stops
	// holding the job's watermark back. The default value is 10s.
	IdleTimeout time.Duration
	// AllowedLateness keeps a window's state after it fired, so that late
	// events still update it. The default value is 0s.
	AllowedLateness time.Duration
	// MaxAhead bounds how far an event's ts may be ahead of its record's
	// reference time (the Kafka record timestamp live, ingest_ts in files)
	// or, for a record without one, ahead of the largest event time the job
	// has taken so far. An event beyond it goes to the dlq and never moves
	// the watermark: one clock set years ahead would otherwise make every
	// later event late. The default value is 1h, as Kafka's
	// log.message.timestamp.after.max.ms.
	MaxAhead time.Duration
}

// Scope says which sources are re-timed when one source's clock is skewed.
type Scope uint8

const (
	// ScopeSource re-times only the skewed source.
	ScopeSource Scope = iota
	// ScopeJob re-times every source while any source is skewed.
	ScopeJob
)

// String returns the scope as the rules file spells it.
func (s Scope) String() string {
	if s == ScopeJob {
		return "job"
	}
	return "source"
}

// DedupeConfig controls how the job takes a record sent again (a
// producer's retry) once.
type DedupeConfig struct {
	// Horizon is how far the watermark advances after an event is taken
	// before its id is forgotten: an event whose id was taken within it is
	// a duplicate, dropped. 0 turns deduplication off. The default value
	// is 10s.
	Horizon time.Duration
}

// SkewConfig controls clock-skew detection.
type SkewConfig struct {
	// Threshold is the |skew| above which a source is degraded. The default
	// value is 15ms.
	Threshold time.Duration
	// RecoverAfter is how long (in reference time) the skew must stay under
	// the threshold before a degraded source recovers. The default value is 5s.
	RecoverAfter time.Duration
	// Scope is source or job. The default value is source.
	Scope Scope
	// MaxSources bounds the sources whose clocks are tracked: past it, the
	// ones seen least recently are forgotten (and warm up again if they
	// come back). The default value is 10000.
	MaxSources int
}

// WindowType is the kind of event-time window.
type WindowType uint8

const (
	// Tumbling windows are fixed, non-overlapping and aligned to the epoch.
	Tumbling WindowType = iota
	// Sliding windows have a fixed size and start every slide.
	Sliding
	// Session windows grow while events of a key keep arriving within gap.
	Session
)

// String returns the window type as the rules file spells it.
func (t WindowType) String() string {
	switch t {
	case Sliding:
		return "sliding"
	case Session:
		return "session"
	default:
		return "tumbling"
	}
}

// Window describes a window assigner. Size is set for tumbling and sliding,
// Slide for sliding, Gap for session windows; all are positive.
type Window struct {
	Type  WindowType
	Size  time.Duration
	Slide time.Duration
	Gap   time.Duration
}

// AggregateKind is the function a rule computes over its window.
type AggregateKind uint8

const (
	// Count counts the events in the window.
	Count AggregateKind = iota
	// Sum adds up a numeric field.
	Sum
	// Distinct counts the distinct values of a field.
	Distinct
	// Avg is the mean of a numeric field.
	Avg
	// Min is the smallest value of a numeric field.
	Min
	// Max is the largest value of a numeric field.
	Max
	// Ratio is the share of the window's events that pass the rule's
	// Match filters: a failure rate, say.
	Ratio
	// Quantile is a quantile of a numeric field, from the mergeable sketch
	// heatmaps use (1% relative error).
	Quantile
)

// aggregateNames spells each AggregateKind as the rules file does.
var aggregateNames = [...]string{Count: "count", Sum: "sum", Distinct: "distinct", Avg: "avg",
	Min: "min", Max: "max", Ratio: "ratio", Quantile: "quantile"}

// String returns the aggregate's function name as the rules file spells it.
func (k AggregateKind) String() string {
	if int(k) < len(aggregateNames) {
		return aggregateNames[k]
	}
	return "count"
}

// Numeric reports whether the aggregate reads a numeric field: an event
// whose field is not a number does not match the rule.
func (k AggregateKind) Numeric() bool {
	switch k {
	case Sum, Avg, Min, Max, Quantile:
		return true
	}
	return false
}

// Aggregate is a rule's aggregate function; Field is empty for Count and
// Ratio.
type Aggregate struct {
	Kind  AggregateKind
	Field string
	// Q is the quantile, in (0, 1], of a Quantile aggregate.
	Q float64
}

// String returns the aggregate as the rules file spells it
// (`quantile:latency_ms:0.99`).
func (a Aggregate) String() string {
	s := a.Kind.String()
	if a.Field != "" {
		s += ":" + a.Field
	}
	if a.Kind == Quantile {
		s += ":" + strconv.FormatFloat(a.Q, 'g', -1, 64)
	}
	return s
}

// Mode says what a rule's decisions do.
type Mode uint8

const (
	// Enforce rules' decisions act: the default.
	Enforce Mode = iota
	// Shadow rules are evaluated and their decisions written, marked
	// "mode": "shadow" (or to a topic of their own), so that a new rule can
	// be watched on live traffic before it acts.
	Shadow
)

// String returns the mode as the rules file spells it.
func (m Mode) String() string {
	if m == Shadow {
		return "shadow"
	}
	return "enforce"
}

// ScalarKind is the JSON type of a filter value.
type ScalarKind uint8

const (
	// String is a JSON string.
	String ScalarKind = iota
	// Number is a JSON number.
	Number
	// Bool is true or false.
	Bool
)

// Scalar is one value a filter accepts.
type Scalar struct {
	Kind ScalarKind
	// Text is the value's canonical JSON text: a quoted, escaped string for
	// String (`"/pay"`), `true` or `false` for Bool, the number's text for
	// Number. Events are compared against it byte for byte, except numbers,
	// which compare by value (Num).
	Text string
	Num  float64
}

// Filter accepts an event whose attribute Field equals any of Values.
type Filter struct {
	Field  string
	Values []Scalar
}

// Rule turns a windowed aggregate into decisions: every event that brings a
// window of its key above Threshold is given Action.
type Rule struct {
	Name string
	// Line is where the rule starts in the file, for messages.
	Line      int
	Where     []Filter
	Key       []string
	Window    Window
	Aggregate Aggregate
	// Match are the filters a Ratio aggregate counts the share of; nil for
	// every other aggregate.
	Match     []Filter
	Threshold float64
	// MinEvents is how many events a window needs before it can make a
	// decision, so that a ratio or quantile over a handful of events does
	// not fire; 0 sets no minimum.
	MinEvents int64
	Action    string
	Mode      Mode
}

// Heatmap measures the distribution of a numeric field per window and key.
type Heatmap struct {
	Name string
	// Line is where the heatmap starts in the file, for messages.
	Line   int
	Where  []Filter
	Key    []string
	Field  string
	Window Window
	// Buckets are the strictly increasing upper bounds of the histogram;
	// +Inf is implied after the last one.
	Buckets []float64
}

// Reserved are the event fields that cannot be rule attributes.
var Reserved = []string{"id", "ts", "ingest_ts"}

package slot

import (
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
)

// Bounds of Spec.PurgeGrain, ms.
const (
	minPurgeGrain = 1000
	maxPurgeGrain = 10_000
)

// Spec is a rule or heatmap compiled against the event schema: attribute
// indexes instead of names, window parameters in milliseconds.
type Spec struct {
	// Index is the spec's state id: its slot keys start with it, and the
	// operator's tables of specs, timers and state are by it. It is the
	// spec's place in the rules file until a Reload says otherwise, and a
	// rule keeps it across reloads while its definition is unchanged.
	Index int
	// Pos is the spec's place among the rules, or among the heatmaps, of
	// the file.
	Pos     int
	Rule    *rules.Rule    // set for decision rules
	Heatmap *rules.Heatmap // set for heatmaps

	WindowType rules.WindowType
	Size       int64 // tumbling and sliding
	Slide      int64 // sliding; equals size for tumbling
	Pane       int64 // gcd(size, slide)
	// PaneDiv and SlideDiv round times to panes and slides.
	PaneDiv, SlideDiv divisor
	// PurgeGrain coarsens a rule's timers, which only purge: nobody sees
	// when a rule's state goes (a decision considers only windows the
	// watermark has not passed, and every access purges first), so a purge
	// may come late, and the timers of many keys then share a time. It is
	// the window's size or gap, between 1 and 10 s: a sliding minute's
	// timers fired once a second, each at a slot out of the CPU cache; a
	// short window's state is kept at most twice as long.
	PurgeGrain int64
	Gap        int64 // session
	Lateness   int64

	filters  []filter
	keyAttrs []int
	Agg      rules.AggregateKind
	aggAttr  int // -1 for count and ratio
	Bounds   []float64
	// match are a ratio rule's filters, whose share of events it computes.
	match []filter
	// Q is a quantile rule's quantile, and screen rules out the windows
	// whose quantile cannot exceed its threshold from counts its panes
	// keep: in sum, the number of values Below reports for, valid while
	// the pane's (or session's) rev is ScreenGen (see screenPane).
	Q         float64
	Screen    heatmap.Screen
	ScreenGen int32
	// MinEvents is the rule's min_events: a window with fewer events makes
	// no decision.
	MinEvents int64
	// Running is set for a count rule over panes, whose panes keep running
	// counts (see win).
	Running bool
}

type filter struct {
	attr   int
	values []rules.Scalar
}

// Compile returns the specs of cfg, rules then heatmaps in file order, with
// state ids ids (nil: their places).
func Compile(cfg *rules.Config, schema *event.Schema, ids []int) ([]*Spec, error) {
	if n := len(cfg.Rules) + len(cfg.Heatmaps); ids != nil && len(ids) != n {
		return nil, fmt.Errorf("windows: %d state ids for %d rules and heatmaps", len(ids), n)
	}
	attr := func(name string) (int, error) {
		i, ok := schema.Index(name)
		if !ok {
			return 0, fmt.Errorf("windows: attribute %q is not in the event schema", name)
		}
		return i, nil
	}
	lateness := cfg.Watermark.AllowedLateness.Milliseconds()
	filters := func(fs []rules.Filter) ([]filter, error) {
		var out []filter
		for _, f := range fs {
			i, err := attr(f.Field)
			if err != nil {
				return nil, err
			}
			out = append(out, filter{attr: i, values: f.Values})
		}
		return out, nil
	}
	var specs []*Spec
	build := func(where []rules.Filter, key []string, w rules.Window) (sp *Spec, err error) {
		sp = &Spec{Index: len(specs), WindowType: w.Type, Lateness: lateness, aggAttr: -1}
		switch w.Type {
		case rules.Tumbling:
			sp.Size, sp.Slide = w.Size.Milliseconds(), w.Size.Milliseconds()
		case rules.Sliding:
			sp.Size, sp.Slide = w.Size.Milliseconds(), w.Slide.Milliseconds()
		case rules.Session:
			sp.Gap = w.Gap.Milliseconds()
		}
		if w.Type != rules.Session {
			if sp.Size <= 0 || sp.Slide <= 0 {
				return nil, fmt.Errorf("windows: window %v has no size", w)
			}
			sp.Pane = GCD(sp.Size, sp.Slide)
			sp.PaneDiv, sp.SlideDiv = NewDivisor(sp.Pane), NewDivisor(sp.Slide)
		} else if sp.Gap <= 0 {
			return nil, fmt.Errorf("windows: session window without gap")
		}
		sp.PurgeGrain = min(max(sp.Size, sp.Gap, minPurgeGrain), maxPurgeGrain)
		if sp.filters, err = filters(where); err != nil {
			return nil, err
		}
		for _, k := range key {
			i, err := attr(k)
			if err != nil {
				return nil, err
			}
			sp.keyAttrs = append(sp.keyAttrs, i)
		}
		return sp, nil
	}
	for i := range cfg.Rules {
		r := &cfg.Rules[i]
		sp, err := build(r.Where, r.Key, r.Window)
		if err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		sp.Rule, sp.Pos, sp.Agg, sp.Q, sp.MinEvents = r, i, r.Aggregate.Kind, r.Aggregate.Q, r.MinEvents
		if sp.Agg == rules.Quantile {
			sp.Screen = heatmap.NewScreen(r.Threshold)
		}
		sp.Running = sp.Agg == rules.Count && sp.WindowType != rules.Session
		if r.Aggregate.Field != "" {
			if sp.aggAttr, err = attr(r.Aggregate.Field); err != nil {
				return nil, fmt.Errorf("rule %q: %w", r.Name, err)
			}
		}
		if sp.match, err = filters(r.Match); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		specs = append(specs, sp)
	}
	for i := range cfg.Heatmaps {
		h := &cfg.Heatmaps[i]
		sp, err := build(h.Where, h.Key, h.Window)
		if err != nil {
			return nil, fmt.Errorf("heatmap %q: %w", h.Name, err)
		}
		sp.Heatmap, sp.Pos, sp.Bounds = h, i, h.Buckets
		if sp.aggAttr, err = attr(h.Field); err != nil {
			return nil, fmt.Errorf("heatmap %q: %w", h.Name, err)
		}
		specs = append(specs, sp)
	}
	if len(specs) > StateIDs {
		return nil, fmt.Errorf("windows: %d rules and heatmaps, at most %d", len(specs), StateIDs)
	}
	if ids != nil {
		seen := make(map[int]bool, len(ids))
		for i, sp := range specs {
			if id := ids[i]; id < 0 || id >= StateIDs || seen[id] {
				return nil, fmt.Errorf("windows: state id %d of %s out of range or given twice", id, sp.Name())
			}
			sp.Index = ids[i]
			seen[ids[i]] = true
		}
	}
	return specs, nil
}

// Matches reports whether ev passes the filters and has every attribute the
// spec needs; an event lacking one simply does not match.
func (sp *Spec) Matches(ev *event.Event) bool {
	if !passes(sp.filters, ev) {
		return false
	}
	for _, a := range sp.keyAttrs {
		if ev.Attrs[a].Kind == event.Missing {
			return false
		}
	}
	if sp.aggAttr >= 0 {
		v := &ev.Attrs[sp.aggAttr]
		if v.Kind == event.Missing || (sp.Agg != rules.Distinct && v.Kind != event.Number) {
			return false
		}
	}
	return true
}

// passes reports whether ev has every attribute of filters, each with a
// value its filter accepts.
func passes(filters []filter, ev *event.Event) bool {
	for i := range filters {
		f := &filters[i]
		v := &ev.Attrs[f.attr]
		if v.Kind == event.Missing || !f.accepts(v) {
			return false
		}
	}
	return true
}

func (f *filter) accepts(v *event.Value) bool {
	for i := range f.values {
		s := &f.values[i]
		switch s.Kind {
		case rules.Number:
			if v.Kind == event.Number && v.Num == s.Num {
				return true
			}
		case rules.String:
			if v.Kind == event.String && string(v.Text) == s.Text {
				return true
			}
		case rules.Bool:
			if v.Kind == event.Bool && string(v.Text) == s.Text {
				return true
			}
		}
	}
	return false
}

// Value is what ev, which matches, adds to the spec's aggregate; see
// SlotRef.val.
func (sp *Spec) Value(ev *event.Event) uint64 {
	switch {
	case sp.match != nil:
		if passes(sp.match, ev) {
			return math.Float64bits(1)
		}
		return math.Float64bits(0)
	case sp.aggAttr < 0:
		return 0
	case sp.Agg == rules.Distinct:
		return xxhash.Sum64(ev.Attrs[sp.aggAttr].Text)
	default:
		return math.Float64bits(ev.Attrs[sp.aggAttr].Num)
	}
}

// AppendSlotKey appends the state key of ev's group for this spec: the spec
// index, then each key attribute's canonical text followed by a 0 byte, which
// canonical JSON text never contains.
func (sp *Spec) AppendSlotKey(dst []byte, ev *event.Event) []byte {
	dst = append(dst, byte(sp.Index>>8), byte(sp.Index))
	for _, a := range sp.keyAttrs {
		dst = append(dst, ev.Attrs[a].Text...)
		dst = append(dst, 0)
	}
	return dst
}

// Name is the rule or heatmap name, for messages.
func (sp *Spec) Name() string {
	if sp.Rule != nil {
		return sp.Rule.Name
	}
	return sp.Heatmap.Name
}

// Cleanup is when the state of a window ending at end is purged.
func (sp *Spec) Cleanup(end int64) int64 { return end - 1 + sp.Lateness }

// LastStart is the start of the latest window containing t.
func (sp *Spec) LastStart(t int64) int64 { return sp.SlideDiv.Floor(t) }

// FirstStart is the start of the earliest window containing t.
func (sp *Spec) FirstStart(t int64) int64 { return sp.SlideDiv.Floor(t-sp.Size) + sp.Slide }

// WindowsOf returns the pane containing t and the starts of the earliest
// and the latest window containing it, of a pane-based spec. Divisions are
// a good part of the cost of adding an event: when the slide divides the
// size (pane == slide: tumbling windows, and most sliding ones) one is
// enough, the pane starting the latest window and the earliest starting
// size-slide before it.
func (sp *Spec) WindowsOf(t int64) (pane, first, last int64) {
	pane = sp.PaneDiv.Floor(t)
	if sp.Pane != sp.Slide {
		return pane, sp.FirstStart(t), sp.SlideDiv.Floor(pane)
	}
	return pane, pane - sp.Size + sp.Slide, pane
}

// SessionOnTime reports whether the session an event at t opens is not
// yet purged at watermark wm.
func (sp *Spec) SessionOnTime(t, wm int64) bool { return sp.Cleanup(t+sp.Gap) > wm }

// FirstLiveStart is the start of the earliest window whose state is not yet
// purged at watermark wm: s + size - 1 + lateness > wm.
func (sp *Spec) FirstLiveStart(wm int64) int64 {
	return sp.SlideDiv.Floor(ClampWM(wm)-sp.Size+1-sp.Lateness) + sp.Slide
}

// InGap reports whether t falls between the windows of a sliding spec whose
// slide exceeds its size. Such an event belongs to no window of the rule: as
// in Flink, the rule ignores it (it is not late: no watermark made it so).
func (sp *Spec) InGap(t int64) bool {
	return sp.Slide > sp.Size && sp.WindowType != rules.Session && t-sp.SlideDiv.Floor(t) >= sp.Size
}

// PaneCleanup is when a pane starting at p can be purged: the cleanup time of
// the latest window that contains it.
func (sp *Spec) PaneCleanup(p int64) int64 {
	if sp.Pane == sp.Slide {
		return sp.Cleanup(p + sp.Size) // p starts a window: no division
	}
	return sp.Cleanup(sp.LastStart(p) + sp.Size)
}

// What a rule's purge timer does with a state stored encoded.
const (
	PurgeNone   = iota // nothing: gone, or another timer is pending
	PurgeDelete        // delete it without decoding: all of it expired
	PurgeLoad          // load it, to purge what expired and keep the rest
)

// PurgeAction decides what the purge timer due at at, with the watermark
// at wm, does with a rule's state stored as val, reading only what
// ruleSlotSpan reads.
func (sp *Spec) PurgeAction(val []byte, at, wm int64) (int, error) {
	timerAt, last, err := ruleSlotSpan(sp, val)
	switch {
	case err != nil:
		return PurgeNone, fmt.Errorf("windows: stored state of %s: %w", sp.Name(), err)
	case timerAt != at:
		return PurgeNone, nil // superseded by an earlier timer
	case last == watermark.Min || sp.lastCleanup(last) <= wm:
		return PurgeDelete, nil
	}
	return PurgeLoad, nil
}

// lastCleanup is when a rule's slot whose last pane starts, or last
// session ends, at last can go.
func (sp *Spec) lastCleanup(last int64) int64 {
	if sp.WindowType == rules.Session {
		return sp.Cleanup(last)
	}
	return sp.PaneCleanup(last)
}

package windows

import (
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
)

// spec is a rule or heatmap compiled against the event schema: attribute
// indexes instead of names, window parameters in milliseconds.
// Bounds of spec.purgeGrain, ms.
const (
	minPurgeGrain = 1000
	maxPurgeGrain = 10_000
)

type spec struct {
	// index is the spec's state id: its slot keys start with it, and the
	// operator's tables of specs, timers and state are by it. It is the
	// spec's place in the rules file until a Reload says otherwise, and a
	// rule keeps it across reloads while its definition is unchanged.
	index int
	// pos is the spec's place among the rules, or among the heatmaps, of
	// the file.
	pos  int
	rule *rules.Rule    // set for decision rules
	hm   *rules.Heatmap // set for heatmaps

	wtype rules.WindowType
	size  int64 // tumbling and sliding
	slide int64 // sliding; equals size for tumbling
	pane  int64 // gcd(size, slide)
	// paneDiv and slideDiv round times to panes and slides.
	paneDiv, slideDiv divisor
	// purgeGrain coarsens a rule's timers, which only purge: nobody sees
	// when a rule's state goes (a decision considers only windows the
	// watermark has not passed, and every access purges first), so a purge
	// may come late, and the timers of many keys then share a time. It is
	// the window's size or gap, between 1 and 10 s: a sliding minute's
	// timers fired once a second, each at a slot out of the CPU cache; a
	// short window's state is kept at most twice as long.
	purgeGrain int64
	gap        int64 // session
	lateness   int64

	filters  []filter
	keyAttrs []int
	agg      rules.AggregateKind
	aggAttr  int // -1 for count and ratio
	bounds   []float64
	// match are a ratio rule's filters, whose share of events it computes.
	match []filter
	// q is a quantile rule's quantile, and screen rules out the windows
	// whose quantile cannot exceed its threshold from counts its panes
	// keep: in sum, the number of values Below reports for, valid while
	// the pane's (or session's) rev is screenGen (see screenPane).
	q         float64
	screen    heatmap.Screen
	screenGen int32
	// minEvents is the rule's min_events: a window with fewer events makes
	// no decision.
	minEvents int64
	// running is set for a count rule over panes, whose panes keep running
	// counts (see win).
	running bool
}

type filter struct {
	attr   int
	values []rules.Scalar
}

// compile returns the specs of cfg, rules then heatmaps in file order, with
// state ids ids (nil: their places).
func compile(cfg *rules.Config, schema *event.Schema, ids []int) ([]*spec, error) {
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
	var specs []*spec
	build := func(where []rules.Filter, key []string, w rules.Window) (sp *spec, err error) {
		sp = &spec{index: len(specs), wtype: w.Type, lateness: lateness, aggAttr: -1}
		switch w.Type {
		case rules.Tumbling:
			sp.size, sp.slide = w.Size.Milliseconds(), w.Size.Milliseconds()
		case rules.Sliding:
			sp.size, sp.slide = w.Size.Milliseconds(), w.Slide.Milliseconds()
		case rules.Session:
			sp.gap = w.Gap.Milliseconds()
		}
		if w.Type != rules.Session {
			if sp.size <= 0 || sp.slide <= 0 {
				return nil, fmt.Errorf("windows: window %v has no size", w)
			}
			sp.pane = gcd(sp.size, sp.slide)
			sp.paneDiv, sp.slideDiv = newDivisor(sp.pane), newDivisor(sp.slide)
		} else if sp.gap <= 0 {
			return nil, fmt.Errorf("windows: session window without gap")
		}
		sp.purgeGrain = min(max(sp.size, sp.gap, minPurgeGrain), maxPurgeGrain)
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
		sp.rule, sp.pos, sp.agg, sp.q, sp.minEvents = r, i, r.Aggregate.Kind, r.Aggregate.Q, r.MinEvents
		if sp.agg == rules.Quantile {
			sp.screen = heatmap.NewScreen(r.Threshold)
		}
		sp.running = sp.agg == rules.Count && sp.wtype != rules.Session
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
		sp.hm, sp.pos, sp.bounds = h, i, h.Buckets
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
				return nil, fmt.Errorf("windows: state id %d of %s out of range or given twice", id, sp.name())
			}
			sp.index = ids[i]
			seen[ids[i]] = true
		}
	}
	return specs, nil
}

// matches reports whether ev passes the filters and has every attribute the
// spec needs; an event lacking one simply does not match.
func (sp *spec) matches(ev *event.Event) bool {
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
		if v.Kind == event.Missing || (sp.agg != rules.Distinct && v.Kind != event.Number) {
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

// value is what ev, which matches, adds to the spec's aggregate; see
// SlotRef.val.
func (sp *spec) value(ev *event.Event) uint64 {
	switch {
	case sp.match != nil:
		if passes(sp.match, ev) {
			return math.Float64bits(1)
		}
		return math.Float64bits(0)
	case sp.aggAttr < 0:
		return 0
	case sp.agg == rules.Distinct:
		return xxhash.Sum64(ev.Attrs[sp.aggAttr].Text)
	default:
		return math.Float64bits(ev.Attrs[sp.aggAttr].Num)
	}
}

// appendSlotKey appends the state key of ev's group for this spec: the spec
// index, then each key attribute's canonical text followed by a 0 byte, which
// canonical JSON text never contains.
func (sp *spec) appendSlotKey(dst []byte, ev *event.Event) []byte {
	dst = append(dst, byte(sp.index>>8), byte(sp.index))
	for _, a := range sp.keyAttrs {
		dst = append(dst, ev.Attrs[a].Text...)
		dst = append(dst, 0)
	}
	return dst
}

// name is the rule or heatmap name, for messages.
func (sp *spec) name() string {
	if sp.rule != nil {
		return sp.rule.Name
	}
	return sp.hm.Name
}

// cleanup is when the state of a window ending at end is purged.
func (sp *spec) cleanup(end int64) int64 { return end - 1 + sp.lateness }

// lastStart is the start of the latest window containing t.
func (sp *spec) lastStart(t int64) int64 { return sp.slideDiv.floor(t) }

// firstStart is the start of the earliest window containing t.
func (sp *spec) firstStart(t int64) int64 { return sp.slideDiv.floor(t-sp.size) + sp.slide }

// windowsOf returns the pane containing t and the starts of the earliest
// and the latest window containing it, of a pane-based spec. Divisions are
// a good part of the cost of adding an event: when the slide divides the
// size (pane == slide: tumbling windows, and most sliding ones) one is
// enough, the pane starting the latest window and the earliest starting
// size-slide before it.
func (sp *spec) windowsOf(t int64) (pane, first, last int64) {
	pane = sp.paneDiv.floor(t)
	if sp.pane != sp.slide {
		return pane, sp.firstStart(t), sp.slideDiv.floor(pane)
	}
	return pane, pane - sp.size + sp.slide, pane
}

// sessionOnTime reports whether the session an event at t opens is not
// yet purged at watermark wm.
func (sp *spec) sessionOnTime(t, wm int64) bool { return sp.cleanup(t+sp.gap) > wm }

// firstLiveStart is the start of the earliest window whose state is not yet
// purged at watermark wm: s + size - 1 + lateness > wm.
func (sp *spec) firstLiveStart(wm int64) int64 {
	return sp.slideDiv.floor(clampWM(wm)-sp.size+1-sp.lateness) + sp.slide
}

// inGap reports whether t falls between the windows of a sliding spec whose
// slide exceeds its size. Such an event belongs to no window of the rule: as
// in Flink, the rule ignores it (it is not late: no watermark made it so).
func (sp *spec) inGap(t int64) bool {
	return sp.slide > sp.size && sp.wtype != rules.Session && t-sp.slideDiv.floor(t) >= sp.size
}

// paneCleanup is when a pane starting at p can be purged: the cleanup time of
// the latest window that contains it.
func (sp *spec) paneCleanup(p int64) int64 {
	if sp.pane == sp.slide {
		return sp.cleanup(p + sp.size) // p starts a window: no division
	}
	return sp.cleanup(sp.lastStart(p) + sp.size)
}

// What a rule's purge timer does with a state stored encoded.
const (
	purgeNone   = iota // nothing: gone, or another timer is pending
	purgeDelete        // delete it without decoding: all of it expired
	purgeLoad          // load it, to purge what expired and keep the rest
)

// purgeAction decides what the purge timer due at at, with the watermark
// at wm, does with a rule's state stored as val, reading only what
// ruleSlotSpan reads.
func (sp *spec) purgeAction(val []byte, at, wm int64) (int, error) {
	timerAt, last, err := ruleSlotSpan(sp, val)
	switch {
	case err != nil:
		return purgeNone, fmt.Errorf("windows: stored state of %s: %w", sp.name(), err)
	case timerAt != at:
		return purgeNone, nil // superseded by an earlier timer
	case last == watermark.Min || sp.lastCleanup(last) <= wm:
		return purgeDelete, nil
	}
	return purgeLoad, nil
}

// lastCleanup is when a rule's slot whose last pane starts, or last
// session ends, at last can go.
func (sp *spec) lastCleanup(last int64) int64 {
	if sp.wtype == rules.Session {
		return sp.cleanup(last)
	}
	return sp.paneCleanup(last)
}

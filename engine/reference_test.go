package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/riskstream/riskstream/heatmap"
)

// This file is a brute-force model of docs/time.md, written from
// the contract and not from the engine: it keeps every accepted event and
// recomputes each window's content by scanning them. It shares no code with
// windows/ (no panes, no accumulators, no timers), so the two can only
// agree by both following the contract.

// refWindow is a rule's or heatmap's window as the generator drew it.
type refWindow struct {
	kind        string // tumbling, sliding or session
	size, slide int64  // ms; slide == size for tumbling
	gap         int64  // ms; session
}

// refSpec is one rule or heatmap of a generated rules file.
type refSpec struct {
	name      string
	heatmap   bool
	where     []string // allowed api values; nil: no filter
	key       []string
	win       refWindow
	agg       string   // count, sum, distinct, avg, min, max, ratio or quantile (rules)
	field     string   // amount, device, latency_ms (rules) or latency_ms (heatmaps)
	q         float64  // quantile
	match     []string // ratio: the device values whose share it computes
	minEvents int
	threshold float64
	buckets   []float64
}

// genEvent is one generated input event; empty strings and has* flags mark
// missing attributes.
type genEvent struct {
	id                    string
	ts                    int64
	rfc3339               bool
	user, api, device     string
	amount                int64
	latency               float64
	hasAmount, hasLatency bool
}

// text returns the canonical JSON text of an attribute, as the engine keys
// and counts it.
func (e *genEvent) text(attr string) (string, bool) {
	switch attr {
	case "user":
		return strconv.Quote(e.user), e.user != ""
	case "api":
		return strconv.Quote(e.api), e.api != ""
	case "device":
		return strconv.Quote(e.device), e.device != ""
	case "amount":
		return strconv.FormatInt(e.amount, 10), e.hasAmount
	case "latency_ms":
		return strconv.FormatFloat(e.latency, 'f', -1, 64), e.hasLatency
	}
	panic("unknown attribute " + attr)
}

// matches is docs/events.md "Attributes": an event that lacks an attribute a
// rule needs (key, filter, aggregated field) does not match it.
func (sp *refSpec) matches(e *genEvent) bool {
	if sp.where != nil && (e.api == "" || !slices.Contains(sp.where, e.api)) {
		return false
	}
	for _, k := range sp.key {
		if _, ok := e.text(k); !ok {
			return false
		}
	}
	if sp.field != "" {
		if _, ok := e.text(sp.field); !ok {
			return false
		}
	}
	return true
}

// keyOf renders the group key as windows.Decision.Key does: each key
// attribute's JSON text followed by a 0 byte.
func (sp *refSpec) keyOf(e *genEvent) string {
	var b strings.Builder
	for _, k := range sp.key {
		t, _ := e.text(k)
		b.WriteString(t)
		b.WriteByte(0)
	}
	return b.String()
}

// starts lists, ascending, the start of every window [s, s+size) with s a
// multiple of slide that contains ts. Found by walking back from the
// latest, so no closed formula is shared with the engine.
func (sp *refSpec) starts(ts int64) []int64 {
	r := ts % sp.win.slide
	if r < 0 {
		r += sp.win.slide // Go's % truncates toward zero
	}
	s := ts - r
	var out []int64
	for ; s+sp.win.size > ts; s -= sp.win.slide {
		out = append(out, s)
	}
	slices.Reverse(out)
	return out
}

// decRec, hmRec and lateRec are outputs in a comparable form, filled by the
// model and by the capturing Output alike.
type decRec struct {
	eventID    string
	eventTS    int64
	rule, key  string
	start, end int64
	value      float64
}

func (d decRec) String() string {
	return fmt.Sprintf("decision %s ts=%d rule=%s key=%q window=[%d,%d) value=%v", d.eventID, d.eventTS, d.rule, d.key, d.start, d.end, d.value)
}

// hmCore is what must match exactly between a heatmap record of the engine
// and of the model.
type hmCore struct {
	name, key  string
	start, end int64
	rev        int32
	count      int64
	min, max   float64
	buckets    string
	degraded   int64
}

type hmRec struct {
	hmCore
	quantiles [3]float64 // engine only: p50, p95, p99
	sorted    []float64  // model only: the window's values, ascending
}

// identity is what consumers dedupe heatmap records on (docs/outputs.md
// "Delivery and identity").
func (h hmCore) identity() string {
	return fmt.Sprintf("%s key=%q window=[%d,%d) rev=%d", h.name, h.key, h.start, h.end, h.rev)
}

func (h hmCore) String() string {
	return fmt.Sprintf("heatmap %s count=%d min=%v max=%v buckets=%s degraded=%d", h.identity(), h.count, h.min, h.max, h.buckets, h.degraded)
}

func compareIdentity(a, b hmRec) int {
	return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.key, b.key), cmp.Compare(a.start, b.start),
		cmp.Compare(a.end, b.end), cmp.Compare(a.rev, b.rev))
}

type lateRec struct {
	id string
	wm int64
}

func (l lateRec) String() string { return fmt.Sprintf("late %s wm=%d", l.id, l.wm) }

// accepted is an event a tumbling or sliding spec took in, with the watermark at its
// arrival: it belongs to exactly the windows containing ts that were not yet
// purged then.
type accepted struct {
	ev   *genEvent
	key  string
	wmAt int64
}

// refSession is a session window of one key. Its identity follows Flink's
// MergingWindowSet: an event inside it keeps it, any other merge replaces
// the sessions it touches by a new window (not fired, revision 0). Purged
// sessions are dropped, so later events cannot merge into them; that is
// why sessions are modelled statefully and not recomputed from all events.
type refSession struct {
	start, end int64
	members    []*genEvent
	fired      bool
	rev        int32
}

type winID struct {
	key   string
	start int64
}

type refModel struct {
	specs    []refSpec
	ooo      int64
	lateness int64
	ahead    int64

	wm    int64
	maxTS int64
	seen  bool

	acc      []map[string][]accepted    // per tumbling or sliding spec, per key
	fires    []map[winID]int32          // per tumbling or sliding heatmap: times fired
	sessions []map[string][]*refSession // per spec (session)

	decisions []decRec
	heatmaps  []hmRec
	late      []lateRec
	dlq       []string // quoted ids
}

func newRefModel(c *propCase) *refModel {
	n := len(c.specs)
	m := &refModel{specs: c.specs, ooo: c.ooo, lateness: c.lateness, ahead: c.ahead, wm: math.MinInt64,
		acc: make([]map[string][]accepted, n), fires: make([]map[winID]int32, n), sessions: make([]map[string][]*refSession, n)}
	for i := range n {
		m.acc[i] = map[string][]accepted{}
		m.fires[i] = map[winID]int32{}
		m.sessions[i] = map[string][]*refSession{}
	}
	return m
}

// purged is docs/time.md "Firing and purging": the state is kept until the
// watermark reaches end - 1 + allowed_lateness.
func (m *refModel) purged(end, wm int64) bool { return end-1+m.lateness <= wm }

// process runs one event against the watermark before it, then moves the
// watermark (it is updated after every record).
func (m *refModel) process(e *genEvent) {
	// Without a reference time, an event more than max_ahead past the
	// largest ts seen goes to dlq and moves nothing.
	if m.seen && e.ts > m.maxTS+m.ahead {
		m.dlq = append(m.dlq, strconv.Quote(e.id))
		return
	}
	matched, took := false, false
	for i := range m.specs {
		sp := &m.specs[i]
		if !sp.matches(e) {
			continue
		}
		matched = true
		if sp.win.kind == "session" {
			took = m.addSession(i, e) || took
		} else {
			took = m.addToWindows(i, e) || took
		}
	}
	if matched && !took {
		m.late = append(m.late, lateRec{strconv.Quote(e.id), m.wm})
	}
	if !m.seen || e.ts > m.maxTS {
		m.maxTS, m.seen = e.ts, true
	}
	if wm := m.maxTS - m.ooo - 1; wm > m.wm {
		m.advance(wm)
	}
}

// finish is end of input: the watermark goes to +inf.
func (m *refModel) finish() { m.advance(math.MaxInt64) }

func (m *refModel) addToWindows(i int, e *genEvent) bool {
	sp := &m.specs[i]
	var live []int64
	for _, s := range sp.starts(e.ts) {
		if !m.purged(s+sp.win.size, m.wm) {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return false
	}
	key := sp.keyOf(e)
	m.acc[i][key] = append(m.acc[i][key], accepted{e, key, m.wm})
	if sp.heatmap {
		// Flink's EventTimeTrigger fires a window the watermark already
		// passed as soon as an element lands in it.
		for _, s := range live {
			if s+sp.win.size-1 <= m.wm {
				m.fireWindow(i, key, s)
			}
		}
		return true
	}
	best, bestV := int64(0), math.Inf(-1)
	for _, s := range live { // ascending: ties keep the earliest start
		if v, enough := m.aggregate(sp, m.windowMembers(i, key, s)); enough && v > bestV {
			best, bestV = s, v
		}
	}
	m.decide(sp, e, key, best, best+sp.win.size, bestV)
	return true
}

// windowMembers scans every accepted event of the spec for those in window
// [s, s+size) of key.
func (m *refModel) windowMembers(i int, key string, s int64) []*genEvent {
	sp := &m.specs[i]
	var out []*genEvent
	for _, a := range m.acc[i][key] {
		if m.inWindow(sp, a, s) {
			out = append(out, a.ev)
		}
	}
	return out
}

func (m *refModel) inWindow(sp *refSpec, a accepted, s int64) bool {
	return s <= a.ev.ts && a.ev.ts < s+sp.win.size && !m.purged(s+sp.win.size, a.wmAt)
}

func (m *refModel) fireWindow(i int, key string, s int64) {
	sp := &m.specs[i]
	id := winID{key, s}
	rev := m.fires[i][id]
	m.fires[i][id]++
	m.emitHeatmap(sp, key, s, s+sp.win.size, rev, m.windowMembers(i, key, s))
}

func (m *refModel) addSession(i int, e *genEvent) bool {
	sp := &m.specs[i]
	key := sp.keyOf(e)
	ss := m.livesSessions(i, key)
	start, end := e.ts, e.ts+sp.win.gap
	var se *refSession
	if in := touching(ss, start, end); len(in) == 1 && in[0].start <= start && end <= in[0].end {
		se = in[0] // inside an existing session: the same window
	} else {
		var members []*genEvent
		// Merge to a fixed point rather than trusting that one pass is enough.
		for in := touching(ss, start, end); len(in) > 0; in = touching(ss, start, end) {
			for _, t := range in {
				start, end = min(start, t.start), max(end, t.end)
				members = append(members, t.members...)
			}
			ss = slices.DeleteFunc(ss, func(x *refSession) bool { return slices.Contains(in, x) })
		}
		if m.purged(end, m.wm) {
			return false // late: the merged session is already purged
		}
		se = &refSession{start: start, end: end, members: members}
		ss = append(ss, se)
		m.sessions[i][key] = ss
	}
	se.members = append(se.members, e)
	if sp.heatmap {
		switch {
		case se.fired:
			se.rev++
			m.emitSession(sp, key, se)
		case se.end-1 <= m.wm:
			se.fired = true
			m.emitSession(sp, key, se)
		}
		return true
	}
	if v, enough := m.aggregate(sp, se.members); enough {
		m.decide(sp, e, key, se.start, se.end, v)
	}
	return true
}

// livesSessions drops the key's purged sessions and returns the others.
func (m *refModel) livesSessions(i int, key string) []*refSession {
	ss := slices.DeleteFunc(m.sessions[i][key], func(se *refSession) bool { return m.purged(se.end, m.wm) })
	m.sessions[i][key] = ss
	return ss
}

// touching is Flink's TimeWindow.intersects against [start, end).
func touching(ss []*refSession, start, end int64) []*refSession {
	var out []*refSession
	for _, se := range ss {
		if se.start <= end && start <= se.end {
			out = append(out, se)
		}
	}
	return out
}

func (m *refModel) emitSession(sp *refSpec, key string, se *refSession) {
	m.emitHeatmap(sp, key, se.start, se.end, se.rev, se.members)
}

// advance moves the watermark: every window with content whose end - 1 it
// reaches fires once, then windows it purges are dropped.
func (m *refModel) advance(wm int64) {
	old := m.wm
	m.wm = wm
	for i := range m.specs {
		sp := &m.specs[i]
		switch {
		case sp.win.kind == "session":
			keys := sortedKeys(m.sessions[i])
			for _, k := range keys {
				for _, se := range m.sessions[i][k] {
					if sp.heatmap && !se.fired && se.end-1 <= wm {
						se.fired = true
						m.emitSession(sp, k, se)
					}
				}
				m.livesSessions(i, k)
			}
		case sp.heatmap:
			var due []winID
			for _, as := range m.acc[i] {
				for _, a := range as {
					if a.ev.ts+sp.win.size-1 <= old {
						continue // only saves time: its windows were due already
					}
					for _, s := range sp.starts(a.ev.ts) {
						id := winID{a.key, s}
						if s+sp.win.size-1 <= wm && m.inWindow(sp, a, s) && m.fires[i][id] == 0 && !slices.Contains(due, id) {
							due = append(due, id)
						}
					}
				}
			}
			slices.SortFunc(due, func(a, b winID) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.key, b.key)) })
			for _, id := range due {
				m.fireWindow(i, id.key, id.start)
			}
		}
	}
}

func sortedKeys[V any](mp map[string]V) []string {
	keys := make([]string, 0, len(mp))
	for k := range mp {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// aggregate is the rule's aggregate over a window's events, and whether
// there are enough of them (min_events) to decide on it.
func (m *refModel) aggregate(sp *refSpec, members []*genEvent) (float64, bool) {
	return aggregateOf(sp, members), len(members) >= sp.minEvents
}

func aggregateOf(sp *refSpec, members []*genEvent) float64 {
	values := func() []float64 {
		vs := make([]float64, len(members))
		for i, e := range members {
			if sp.field == "amount" {
				vs[i] = float64(e.amount)
			} else {
				vs[i] = e.latency
			}
		}
		return vs
	}
	switch sp.agg {
	case "sum":
		var s int64
		for _, e := range members {
			s += e.amount
		}
		return float64(s)
	case "distinct":
		seen := map[string]bool{}
		for _, e := range members {
			t, _ := e.text(sp.field)
			seen[t] = true
		}
		return float64(len(seen))
	case "avg":
		var s float64
		for _, v := range values() {
			s += v
		}
		return s / float64(len(members))
	case "min":
		return slices.Min(values())
	case "max":
		return slices.Max(values())
	case "ratio":
		in := 0
		for _, e := range members {
			if e.device != "" && slices.Contains(sp.match, e.device) {
				in++
			}
		}
		return float64(in) / float64(len(members))
	case "quantile":
		// The contract's quantiles are the sketch's: one built from the
		// window's values at once, not merged from parts as the engine's.
		a := heatmap.New(0)
		for _, v := range values() {
			a.Add(v, false, nil, nil)
		}
		return a.Quantile(sp.q)
	}
	return float64(len(members))
}

func (m *refModel) decide(sp *refSpec, e *genEvent, key string, start, end int64, v float64) {
	if v > sp.threshold {
		m.decisions = append(m.decisions, decRec{strconv.Quote(e.id), e.ts, sp.name, key, start, end, v})
	}
}

func (m *refModel) emitHeatmap(sp *refSpec, key string, start, end int64, rev int32, members []*genEvent) {
	vals := make([]float64, len(members))
	for j, e := range members {
		vals[j] = e.latency
	}
	slices.Sort(vals)
	// Buckets are per bucket, not cumulative: previous le < v <= le.
	counts := make([]int64, len(sp.buckets)+1)
	for _, v := range vals {
		b := len(sp.buckets)
		for j := len(sp.buckets) - 1; j >= 0 && v <= sp.buckets[j]; j-- {
			b = j
		}
		counts[b]++
	}
	m.heatmaps = append(m.heatmaps, hmRec{hmCore: hmCore{name: sp.name, key: key, start: start, end: end, rev: rev,
		count: int64(len(vals)), min: vals[0], max: vals[len(vals)-1], buckets: bucketText(counts)}, sorted: vals})
}

// bucketText renders bucket counts for comparison and messages.
func bucketText(counts []int64) string {
	b := []byte{'['}
	for i, n := range counts {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, n, 10)
	}
	return string(append(b, ']'))
}

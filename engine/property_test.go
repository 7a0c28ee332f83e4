package engine

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/windows"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// The properties run the engine on random rules and event streams and
// compare it with the brute-force model of reference_test.go. Seeds are
// fixed, so a failure reproduces; the report prints the seed, the rules
// file and the (shrunk) event stream.

// Iteration counts keep the file under 10 s with -race; set
// RISKSTREAM_PROPERTY_SCALE=N to run N times as many seeds.
const (
	// propIterations cases are checked against the model.
	propIterations = 300
	// propCacheIterations cases run with a one-slot cache, every
	// propPebbleEvery-th of them over Pebble.
	propCacheIterations = 80
	propPebbleEvery     = 4
)

func scaled(n int) int {
	if k, err := strconv.Atoi(os.Getenv("RISKSTREAM_PROPERTY_SCALE")); err == nil && k > 1 {
		return n * k
	}
	return n
}

// propCase is one generated run: a rules file and an event stream.
type propCase struct {
	seed     uint64
	ooo      int64
	lateness int64
	// ahead is watermark.max_ahead in ms.
	ahead  int64
	specs  []refSpec // rules first, then heatmaps, as in the file
	events []genEvent
}

var (
	propSizes   = []int64{1000, 1500, 2000, 3000, 5000, 7000, 10000}
	propSlides  = []int64{250, 500, 1000, 2000, 3000, 4000}
	propGaps    = []int64{300, 1000, 2000, 5000}
	propAPIs    = []string{"/pay", "/login", "/search"}
	propBuckets = []float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
)

func genCase(seed uint64) *propCase {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	c := &propCase{seed: seed, ooo: int64(r.IntN(13)) * 250, lateness: int64(r.IntN(21)) * 250}
	if r.IntN(4) == 0 {
		// Odd values put watermarks and window bounds off the grid.
		c.ooo, c.lateness = int64(r.IntN(3001)), int64(r.IntN(5001))
	}
	nRules, nHeatmaps := r.IntN(4), r.IntN(3)
	if nRules+nHeatmaps == 0 {
		nRules = 1
	}
	for i := range nRules {
		c.specs = append(c.specs, genRule(r, i))
	}
	for i := range nHeatmaps {
		c.specs = append(c.specs, genHeatmap(r, i))
	}
	c.ahead = pick(r, []int64{3600000, 5000, 20000})
	c.events = genEvents(r, c.ahead)
	return c
}

func genWindow(r *rand.Rand) refWindow {
	switch r.IntN(3) {
	case 0:
		s := pick(r, propSizes)
		if r.IntN(4) == 0 {
			s = 100 + r.Int64N(9900)
		}
		return refWindow{kind: "tumbling", size: s, slide: s}
	case 1:
		// slide < size, mostly not dividing it (7s/3s, 1.5s/1s, ...).
		size := pick(r, propSizes)
		slide := pick(r, propSlides)
		for slide >= size {
			slide = pick(r, propSlides)
		}
		if r.IntN(4) == 0 {
			size = 200 + r.Int64N(9800)
			slide = max(size/20, 1) + r.Int64N(size-max(size/20, 1))
		}
		return refWindow{kind: "sliding", size: size, slide: slide}
	}
	g := pick(r, propGaps)
	if r.IntN(4) == 0 {
		g = 1 + r.Int64N(5000)
	}
	return refWindow{kind: "session", gap: g}
}

func genWhere(r *rand.Rand) []string {
	switch r.IntN(5) {
	case 0:
		return []string{"/pay"}
	case 1:
		return []string{"/pay", "/login"}
	}
	return nil
}

func genRule(r *rand.Rand, i int) refSpec {
	sp := refSpec{name: fmt.Sprintf("r%d", i), where: genWhere(r), win: genWindow(r),
		key: pick(r, [][]string{{"user"}, {"user"}, {"user"}, {"user", "api"}, {"api"}}),
		agg: pick(r, []string{"count", "count", "sum", "distinct", "avg", "min", "max", "ratio", "quantile"}), threshold: float64(r.IntN(6))}
	if r.IntN(5) == 0 {
		sp.threshold += 0.5
	}
	switch sp.agg {
	case "sum":
		sp.field = "amount"
		sp.threshold *= 40 // amounts are up to ~100 each
	case "distinct":
		sp.field = "device"
	case "avg", "min", "max":
		sp.field = pick(r, []string{"amount", "latency_ms"})
		if sp.agg == "avg" {
			// Whole amounts add up exactly in any order, as the engine's
			// panes and the model's scan add them; latencies in tenths
			// would round differently.
			sp.field = "amount"
		}
		sp.threshold *= 20
		if sp.field == "latency_ms" {
			sp.threshold *= 10 // latencies are up to 2000
		}
	case "ratio":
		sp.match = pick(r, [][]string{{"d1"}, {"d1", "d2", "d3"}})
		sp.threshold /= 6
	case "quantile":
		sp.field, sp.q = "latency_ms", pick(r, []float64{0.5, 0.9, 0.99, 1})
		sp.threshold *= 300
	}
	if r.IntN(3) == 0 {
		sp.minEvents = r.IntN(5)
	}
	return sp
}

func genHeatmap(r *rand.Rand, i int) refSpec {
	sp := refSpec{name: fmt.Sprintf("h%d", i), heatmap: true, where: genWhere(r), win: genWindow(r),
		key: pick(r, [][]string{{"api"}, {"user"}, {"api", "user"}}), field: "latency_ms"}
	for _, b := range propBuckets {
		if r.IntN(2) == 0 {
			sp.buckets = append(sp.buckets, b)
		}
	}
	if len(sp.buckets) == 0 {
		sp.buckets = []float64{10}
	}
	return sp
}

// genEvents draws timestamps that increase on average with bounded disorder
// (base + jitter in [-D, +D]) and, sometimes, events far beyond it: late
// ones, and ones around max_ahead (ahead ms) past the largest so far.
func genEvents(r *rand.Rand, ahead int64) []genEvent {
	n := 20 + r.IntN(281)
	keys := 1 + r.IntN(4)
	step := pick(r, []int64{50, 300, 1000, 3000})
	disorder := pick(r, []int64{0, 100, 1000, 3000})
	lateEvery := pick(r, []int{0, 50, 10})
	base := pick(r, []int64{0, -30000, 1732150000000, r.Int64N(2000000) - 1000000})
	// On a coarse grid, timestamps, window bounds and watermarks coincide
	// often, which is where off-by-one errors show.
	grid := pick(r, []int64{1, 1, 100, 250, 500, 1000})
	aheadEvery := pick(r, []int{0, 0, 30})
	evs := make([]genEvent, n)
	maxTS := int64(math.MinInt64)
	for i := range evs {
		base += r.Int64N(step + 1)
		e := genEvent{id: "e" + strconv.Itoa(i), ts: base - disorder + r.Int64N(2*disorder+1)}
		if lateEvery > 0 && r.IntN(lateEvery) == 0 {
			e.ts = base - disorder - 1 - r.Int64N(10000)
		}
		if aheadEvery > 0 && i > 0 && r.IntN(aheadEvery) == 0 {
			// At the bound, one past it, or far beyond.
			e.ts = maxTS + ahead + pick(r, []int64{0, 1, r.Int64N(1 << 40)})
		}
		maxTS = max(maxTS, e.ts)
		e.ts -= e.ts % grid
		e.rfc3339 = r.IntN(20) == 0
		e.user = maybe(r, "u"+strconv.Itoa(1+r.IntN(keys)))
		e.api = maybe(r, pick(r, propAPIs))
		e.device = maybe(r, "d"+strconv.Itoa(1+r.IntN(6)))
		e.amount, e.hasAmount = r.Int64N(111)-10, r.IntN(20) != 0
		switch r.IntN(10) {
		case 0:
			e.latency = 0
		case 1, 2:
			e.latency = float64(r.IntN(2000))
		default:
			e.latency = float64(r.IntN(20000)) / 10
		}
		e.hasLatency = r.IntN(20) != 0
		evs[i] = e
	}
	return evs
}

// maybe leaves an attribute out now and then: such events do not match the
// rules that need it.
func maybe(r *rand.Rand, s string) string {
	if r.IntN(20) == 0 {
		return ""
	}
	return s
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func (c *propCase) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "watermark:\n  out_of_orderness: %dms\n  allowed_lateness: %dms\n  max_ahead: %dms\n", c.ooo, c.lateness, c.ahead)
	section := ""
	for _, sp := range c.specs {
		if s := map[bool]string{false: "rules", true: "heatmaps"}[sp.heatmap]; s != section {
			section = s
			fmt.Fprintf(&b, "%s:\n", s)
		}
		fmt.Fprintf(&b, "  - name: %s\n", sp.name)
		if sp.where != nil {
			fmt.Fprintf(&b, "    where: {api: [%s]}\n", strings.Join(sp.where, ", "))
		}
		fmt.Fprintf(&b, "    key: [%s]\n", strings.Join(sp.key, ", "))
		switch w := sp.win; w.kind {
		case "tumbling":
			fmt.Fprintf(&b, "    window: {type: tumbling, size: %dms}\n", w.size)
		case "sliding":
			fmt.Fprintf(&b, "    window: {type: sliding, size: %dms, slide: %dms}\n", w.size, w.slide)
		default:
			fmt.Fprintf(&b, "    window: {type: session, gap: %dms}\n", w.gap)
		}
		if sp.heatmap {
			bs := make([]string, len(sp.buckets))
			for i, v := range sp.buckets {
				bs[i] = strconv.FormatFloat(v, 'f', -1, 64)
			}
			fmt.Fprintf(&b, "    field: %s\n    buckets: [%s]\n", sp.field, strings.Join(bs, ", "))
			continue
		}
		agg := sp.agg
		if sp.field != "" {
			agg += ":" + sp.field
		}
		if sp.agg == "quantile" {
			agg += ":" + strconv.FormatFloat(sp.q, 'g', -1, 64)
		}
		fmt.Fprintf(&b, "    aggregate: %q\n    threshold: %v\n    action: deny\n", agg, sp.threshold)
		if sp.match != nil {
			fmt.Fprintf(&b, "    match: {device: [%s]}\n", strings.Join(sp.match, ", "))
		}
		if sp.minEvents > 0 {
			fmt.Fprintf(&b, "    min_events: %d\n", sp.minEvents)
		}
	}
	return b.String()
}

func (e *genEvent) json() string {
	b := []byte(`{"id":`)
	b = strconv.AppendQuote(b, e.id)
	b = append(b, `,"ts":`...)
	if e.rfc3339 {
		b = strconv.AppendQuote(b, time.UnixMilli(e.ts).UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	} else {
		b = strconv.AppendInt(b, e.ts, 10)
	}
	for _, a := range []string{"user", "api", "device", "amount", "latency_ms"} {
		if t, ok := e.text(a); ok {
			b = append(b, ',', '"')
			b = append(b, a...)
			b = append(b, '"', ':')
			b = append(b, t...)
		}
	}
	return string(append(b, '}'))
}

func (c *propCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (%d events)\n--- rules.yaml\n%s--- events.jsonl\n", c.seed, len(c.events), c.yaml())
	for i := range c.events {
		b.WriteString(c.events[i].json())
		b.WriteByte('\n')
	}
	return b.String()
}

// capture is an Output that either keeps copies of what the engine emits
// (it reuses what it passes) in the model's comparable form, or renders it
// as the sinks would, for the byte-level comparison.
type capture struct {
	enc       *sink.Encoder // nil: keep records, render nothing
	rendered  []byte
	decisions []decRec
	heatmaps  []hmRec
	late      []lateRec
	dlq       []string
	stats     Stats // at the end of input
}

func (c *capture) Decision(d *windows.Decision) {
	if c.enc != nil {
		c.rendered = c.enc.AppendDecision(c.rendered, d)
		return
	}
	c.decisions = append(c.decisions, decRec{string(d.EventID), d.EventTS, d.Rule.Name, d.Key, d.Start, d.End, d.Value})
}

func (c *capture) Heatmap(h *windows.HeatmapWindow) {
	if c.enc != nil {
		c.rendered = c.enc.AppendHeatmap(c.rendered, h)
		return
	}
	a := h.Acc
	c.heatmaps = append(c.heatmaps, hmRec{hmCore: hmCore{name: h.Heatmap.Name, key: h.Key, start: h.Start, end: h.End, rev: h.Revision,
		count: a.Count, min: a.Min, max: a.Max, buckets: bucketText(a.Buckets), degraded: a.Degraded},
		quantiles: [3]float64{a.Quantile(0.50), a.Quantile(0.95), a.Quantile(0.99)}})
}

func (c *capture) Late(raw []byte, wm int64, p *event.Provenance) {
	if c.enc != nil {
		c.rendered = sink.AppendLate(c.rendered, raw, wm, p)
		return
	}
	c.late = append(c.late, lateRec{eventID(raw), wm})
}

// eventID returns the quoted id of a generated event's JSON text.
func eventID(raw []byte) string {
	id := raw[bytes.Index(raw, []byte(`"id":`))+5:]
	return string(id[:bytes.IndexByte(id[1:], '"')+2])
}

func (c *capture) DLQ(raw []byte, reason string, p *event.Provenance) {
	if c.enc != nil {
		c.rendered = sink.AppendDLQ(c.rendered, raw, reason, p)
		return
	}
	c.dlq = append(c.dlq, eventID(raw))
}

// runEngine runs c through the engine; render chooses rendered output over
// records.
func runEngine(c *propCase, backend slotstore.Backend, slots int, memory int64, render bool) (*capture, error) {
	cfg, err := rules.Parse("rules.yaml", []byte(c.yaml()))
	if err != nil {
		return nil, err
	}
	out := &capture{}
	if render {
		out.enc = sink.NewEncoder()
	}
	e, err := New(Options{Config: cfg, Backend: backend, Output: out, CacheSlots: slots, MemoryBytes: memory})
	if err != nil {
		return nil, err
	}
	for i := range c.events {
		rec := Record{Value: []byte(c.events[i].json()), Prov: propProvenance(i)}
		if err := e.Process(&rec, 0); err != nil {
			return nil, err
		}
	}
	err = e.Finish()
	out.stats = e.Stats()
	return out, err
}

// propProvenance is where the property tests' record i comes from: a
// topic's, which the encoder renders in decisions, late and dlq records,
// so that outputs compared byte for byte also compare the provenance each
// output was given.
func propProvenance(i int) event.Provenance {
	return event.Provenance{Topic: "requests", Partition: int32(i % 3), Offset: int64(i)}
}

func runModel(c *propCase) *refModel {
	m := newRefModel(c)
	for i := range c.events {
		m.process(&c.events[i])
	}
	m.finish()
	return m
}

// checkModel returns the first difference between the engine and the model
// (properties 1 to 3), or nil.
func checkModel(c *propCase) error {
	got, err := runEngine(c, slotstore.NewMemBackend(), 0, 0, false)
	if err != nil {
		return fmt.Errorf("engine: %v", err)
	}
	want := runModel(c)
	if !slices.Equal(got.dlq, want.dlq) {
		return fmt.Errorf("dlq: got %v, want %v", got.dlq, want.dlq)
	}
	if err := diffSeq("decisions", got.decisions, want.decisions); err != nil {
		return err
	}
	if err := diffSeq("late", got.late, want.late); err != nil {
		return err
	}
	return diffHeatmaps(got.heatmaps, want.heatmaps)
}

// diffSeq reports the first position where got and want differ.
func diffSeq[T interface {
	comparable
	fmt.Stringer
}](what string, got, want []T) error {
	for i := range max(len(got), len(want)) {
		if i < len(got) && i < len(want) && got[i] == want[i] {
			continue
		}
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i].String()
		}
		if i < len(want) {
			w = want[i].String()
		}
		return fmt.Errorf("%s #%d (engine %d, model %d):\nengine: %s\nmodel:  %s", what, i, len(got), len(want), g, w)
	}
	return nil
}

// diffHeatmaps compares heatmap records as multisets (the model does not
// order windows fired together), then each engine quantile against the
// exact value.
func diffHeatmaps(got, want []hmRec) error {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.SortStableFunc(got, compareIdentity)
	slices.SortStableFunc(want, compareIdentity)
	core := func(hs []hmRec) []hmCore {
		out := make([]hmCore, len(hs))
		for i := range hs {
			out[i] = hs[i].hmCore
		}
		return out
	}
	if err := diffSeq("heatmaps (sorted by identity)", core(got), core(want)); err != nil {
		return err
	}
	for i, g := range got {
		for j, q := range []float64{0.50, 0.95, 0.99} {
			// DDSketch's rank convention: the value at rank floor(q(n-1)).
			exact := want[i].sorted[int(math.Floor(q*float64(g.count-1)))]
			if math.Abs(g.quantiles[j]-exact) > 0.01*math.Abs(exact)+1e-9 {
				return fmt.Errorf("heatmap %s: p%v = %v, exact %v (values %v)", g.identity(), q*100, g.quantiles[j], exact, want[i].sorted)
			}
		}
	}
	return nil
}

// checkCaches is property 4: a one-slot cache over store, which sends every
// slot through encoding and storage, renders the same bytes as everything in
// memory. The store is shared between cases (opening Pebble is slow), which
// also checks that end of input leaves no state behind: every window fired
// and was purged.
func checkCaches(c *propCase, store *liveKeys) error {
	mem, err := runEngine(c, slotstore.NewMemBackend(), 0, 0, true)
	if err != nil {
		return fmt.Errorf("engine, all in memory: %v", err)
	}
	// A one-slot cache sends every slot through encoding and the cold
	// store; a memory budget of one byte then makes the cold store spill
	// all but its newest chunk to the Backend.
	for _, memory := range []int64{0, 1} {
		if err := store.reset(); err != nil {
			return err
		}
		disk, err := runEngine(c, store, 1, memory, true)
		if err != nil {
			return fmt.Errorf("engine, one-slot cache, memory %d: %v", memory, err)
		}
		ml, dl := strings.SplitAfter(string(mem.rendered), "\n"), strings.SplitAfter(string(disk.rendered), "\n")
		for i := range max(len(ml), len(dl)) {
			if i >= len(ml) || i >= len(dl) || ml[i] != dl[i] {
				return fmt.Errorf("rendered output differs at line %d:\nall in memory:  %s\none-slot cache, memory %d: %s", i+1, at(ml, i), memory, at(dl, i))
			}
		}
		if len(store.keys) > 0 {
			return fmt.Errorf("memory %d: %d slots still stored after end of input, e.g. %q", memory, len(store.keys), slices.Sorted(maps.Keys(store.keys))[0])
		}
	}
	return nil
}

// liveKeys wraps a Backend to know which keys hold state.
type liveKeys struct {
	slotstore.Backend
	keys map[string]bool
}

func (l *liveKeys) Set(key, value []byte) error {
	l.keys[string(key)] = true
	return l.Backend.Set(key, value)
}

func (l *liveKeys) Delete(key []byte) error {
	delete(l.keys, string(key))
	return l.Backend.Delete(key)
}

// reset deletes what a previous case left, so every case starts empty.
func (l *liveKeys) reset() error {
	for k := range l.keys {
		if err := l.Delete([]byte(k)); err != nil {
			return err
		}
	}
	return nil
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)\n"
}

// shrink removes events (halves, then quarters, ... then single ones) and
// specs while check still fails, so a report shows a short repro. A smaller
// case that gets stuck does not count as failing: it could not be reported.
func shrink(c *propCase, check func(*propCase) error) *propCase {
	fails := func(d *propCase) bool {
		err := check(d)
		return err != nil && !errors.Is(err, errStuck)
	}
	for chunk := len(c.events) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk <= len(c.events); {
			d := *c
			d.events = slices.Delete(slices.Clone(c.events), i, i+chunk)
			if fails(&d) {
				c = &d
			} else {
				i += chunk
			}
		}
	}
	for i := 0; i < len(c.specs) && len(c.specs) > 1; {
		d := *c
		d.specs = slices.Delete(slices.Clone(c.specs), i, i+1)
		if fails(&d) {
			c = &d
		} else {
			i++
		}
	}
	return c
}

// errStuck is a case that did not finish within propCaseTimeout.
var errStuck = errors.New("the engine did not finish the case: stuck in a loop?")

// propCaseTimeout is far above what one case takes (milliseconds).
const propCaseTimeout = 10 * time.Second

// bounded runs check with a deadline, so that an engine stuck in a loop
// fails with its case instead of hanging until go test's timeout, and turns
// a panic into an error that is reported with its case. Once a check is
// stuck its goroutine still runs, and may hold shared state: every later
// check returns errStuck without running.
func bounded(check func(*propCase) error) func(*propCase) error {
	stuck := false
	return func(c *propCase) error {
		if stuck {
			return errStuck
		}
		done := make(chan error, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					done <- fmt.Errorf("panic: %v\n%s", p, debug.Stack())
				}
			}()
			done <- check(c)
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(propCaseTimeout):
			stuck = true
			return errStuck
		}
	}
}

// runProperty checks cases 0..n-1 and reports the first failure with its
// case, shrunk unless the engine got stuck on it.
func runProperty(t *testing.T, n int, check func(*propCase) error) {
	check = bounded(check)
	for i := range scaled(n) {
		c := genCase(uint64(i))
		switch err := check(c); {
		case errors.Is(err, errStuck):
			t.Fatalf("%v\n\n%s", err, c)
		case err != nil:
			s := shrink(c, check)
			t.Fatalf("%v\n\n%s\nshrunk: %v\n\n%s", err, c, check(s), s)
		}
	}
}

func TestPropertyEngineMatchesModel(t *testing.T) {
	runProperty(t, propIterations, checkModel)
}

func TestPropertyCacheIndependence(t *testing.T) {
	db, err := state.Open(state.Options{Dir: t.TempDir(), DisableWAL: true, BatchBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	disk := &liveKeys{Backend: db, keys: map[string]bool{}}
	mem := &liveKeys{Backend: slotstore.NewMemBackend(), keys: map[string]bool{}}
	// Pebble is slow under -race; the in-memory twin takes the other cases
	// through the same evictions and encodings.
	runProperty(t, propCacheIterations, func(c *propCase) error {
		if c.seed%propPebbleEvery == 0 {
			return checkCaches(c, disk)
		}
		return checkCaches(c, mem)
	})
}

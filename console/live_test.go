package console

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// fired is a heatmap window of hm with values vs.
func fired(hm *rules.Heatmap, key string, start, end int64, revision int32, vs ...float64) *windows.HeatmapWindow {
	acc := heatmap.New(len(hm.Buckets))
	for _, v := range vs {
		acc.Add(v, false, hm.Buckets, nil)
	}
	return &windows.HeatmapWindow{Heatmap: hm, Key: key, Start: start, End: end, Revision: revision, Acc: acc}
}

// TestLiveKeepsTheLatestWindows: per key, the last Windows windows in
// start order, a later revision in place of the earlier; keys past Series
// are counted, not kept.
func TestLiveKeepsTheLatestWindows(t *testing.T) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{10, 100}}
	l := NewLive(LiveOptions{Windows: 3, Series: 2})
	// Out of order, and one window twice.
	for _, start := range []int64{30, 10, 20, 0, 40} {
		l.Heatmap(fired(hm, "\"/pay\"\x00", start, start+10, 0, 5))
	}
	l.Heatmap(fired(hm, "\"/pay\"\x00", 30, 40, 1, 5, 50, 500))
	l.Heatmap(fired(hm, "\"/home\"\x00", 0, 10, 0, 1))
	l.Heatmap(fired(hm, "\"/cart\"\x00", 0, 10, 0, 1))
	if len(l.series) != 2 || len(l.hidden) != 1 {
		t.Fatalf("%d series kept and %d hidden, want 2 and 1", len(l.series), len(l.hidden))
	}
	pay := l.series["lat\x00\"/pay\"\x00"]
	if pay == nil || pay.Key != "api=/pay" {
		t.Fatalf("series %v, want api=/pay among them", slices.Collect(maps.Keys(l.series)))
	}
	var starts []int64
	for _, w := range pay.Windows {
		starts = append(starts, w.Start)
	}
	if !slices.Equal(starts, []int64{20, 30, 40}) {
		t.Errorf("windows kept start at %v, want the last three, 20 30 40", starts)
	}
	if w := pay.Windows[1]; w.Revision != 1 || !slices.Equal(w.Buckets, []int64{1, 1, 1}) {
		t.Errorf("window 30: revision %d buckets %v, want revision 1 with one value per bucket", w.Revision, w.Buckets)
	}
	// An older revision arriving late changes nothing, and redraws nothing.
	version := l.heatmaps
	l.Heatmap(fired(hm, "\"/pay\"\x00", 30, 40, 0, 5))
	if w := pay.Windows[1]; w.Revision != 1 || l.heatmaps != version {
		t.Errorf("after revision 0 of window 30 came again: revision %d kept, heatmaps version %d (was %d)", w.Revision, l.heatmaps, version)
	}
}

// TestLiveReload: after a reload the keys of a heatmap that keeps its state
// keep their windows, and those of a heatmap removed, or restarted because
// its buckets or its key changed, are forgotten, keys not drawn included; a
// key not drawn that later finds a place is no longer counted as not
// drawn.
func TestLiveReload(t *testing.T) {
	lat := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{10, 100}}
	size := &rules.Heatmap{Name: "size", Key: []string{"api"}, Buckets: []float64{1}}
	gone := &rules.Heatmap{Name: "gone", Key: []string{"api"}, Buckets: []float64{1}}
	keyed := &rules.Heatmap{Name: "keyed", Key: []string{"api"}, Buckets: []float64{1}}
	l := NewLive(LiveOptions{Series: 4})
	l.Heatmap(fired(lat, "\"/pay\"\x00", 0, 10, 0, 5))
	l.Heatmap(fired(size, "\"/pay\"\x00", 0, 10, 0, 5))
	l.Heatmap(fired(gone, "\"/pay\"\x00", 0, 10, 0, 5))
	l.Heatmap(fired(keyed, "\"/pay\"\x00", 0, 10, 0, 5))
	l.Heatmap(fired(gone, "\"/cart\"\x00", 0, 10, 0, 5)) // not drawn: Series is 4
	l.Heatmap(fired(lat, "\"/home\"\x00", 0, 10, 0, 5))  // not drawn either
	l.Heatmap(fired(size, "\"/cart\"\x00", 0, 10, 0, 5)) // nor this
	before := l.heatmaps

	newLat := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{10, 100, 1000}}
	newKeyed := &rules.Heatmap{Name: "keyed", Key: []string{"region"}, Buckets: []float64{1}}
	old := &rules.Config{Heatmaps: []rules.Heatmap{*lat, *size, *gone, *keyed}}
	cfg := &rules.Config{Heatmaps: []rules.Heatmap{*newLat, *size, *newKeyed}}
	l.Reload(rules.DiffIdentities(old.Identities(), cfg.Identities()))
	if got := slices.Sorted(maps.Keys(l.series)); !slices.Equal(got, []string{"size\x00\"/pay\"\x00"}) {
		t.Fatalf("series after the reload %q, want only size's, the one heatmap that keeps its state", got)
	}
	if len(l.series["size\x00\"/pay\"\x00"].Windows) != 1 {
		t.Error("size's window was not kept")
	}
	if got := slices.Sorted(maps.Keys(l.hidden)); !slices.Equal(got, []string{"size\x00\"/cart\"\x00"}) {
		t.Errorf("keys not drawn after the reload %q, want only size's", got)
	}
	if l.heatmaps == before {
		t.Error("the heatmaps' version did not change: the page would keep the figures of the series dropped")
	}
	l.Heatmap(fired(newLat, "\"/pay\"\x00", 50, 60, 0, 5))
	pay := l.series["lat\x00\"/pay\"\x00"]
	if pay == nil || !slices.Equal(pay.Bounds, newLat.Buckets) || len(pay.Windows) != 1 || len(pay.Windows[0].Buckets) != 4 {
		t.Errorf("lat's key after the reload: %+v, want the new bounds and one window of 4 buckets", pay)
	}
	l.Heatmap(fired(size, "\"/cart\"\x00", 50, 60, 0, 5))
	if l.series["size\x00\"/cart\"\x00"] == nil || l.hidden["size\x00\"/cart\"\x00"] {
		t.Errorf("size's /cart, given a place the reload freed: drawn %v, counted as not drawn %v",
			l.series["size\x00\"/cart\"\x00"] != nil, l.hidden["size\x00\"/cart\"\x00"])
	}
}

// TestDecisionRatesByRule: rates pair each rule and action with its own
// count in the sample before, however a reload reordered the rules.
func TestDecisionRatesByRule(t *testing.T) {
	samples := []Sample{
		{At: 0, Decisions: []RuleCount{{Rule: "a", Action: "deny", Count: 10}, {Rule: "b", Action: "review", Count: 100}}},
		{At: 1000, Decisions: []RuleCount{{Rule: "b", Action: "review", Count: 104}, {Rule: "a", Action: "deny", Count: 12}, {Rule: "c", Action: "alert", Count: 3}}},
	}
	got := map[string]float64{}
	for _, s := range decisionRates(samples) {
		if len(s.Points) != 1 {
			t.Fatalf("%s: %d points, want 1", s.Name, len(s.Points))
		}
		got[s.Name] = s.Points[0].V
	}
	want := map[string]float64{"a → deny": 2, "b → review": 4, "c → alert": 3}
	if !maps.Equal(got, want) {
		t.Errorf("rates %v, want %v", got, want)
	}
}

// TestLiveSamplesSpan: samples older than the span are dropped, the
// newest kept whatever its age.
func TestLiveSamplesSpan(t *testing.T) {
	l := NewLive(LiveOptions{Span: 10 * time.Second})
	for at := int64(0); at <= 30_000; at += 1000 {
		l.Add(Sample{At: at})
	}
	s := l.snapshot()
	if first, last := s.samples[0].At, s.samples[len(s.samples)-1].At; first != 20_000 || last != 30_000 {
		t.Errorf("samples kept from %d to %d, want 20000 to 30000", first, last)
	}
}

// TestDecisionKeys: counts per rule and key, the most first, at most limit
// keys between takes, afresh after each take.
func TestDecisionKeys(t *testing.T) {
	r := &rules.Rule{Name: "burst", Key: []string{"user"}}
	k := NewDecisionKeys(2)
	for _, key := range []string{"a", "b", "b", "c", "b", "a"} {
		k.Add(&windows.Decision{Rule: r, Key: `"` + key + "\"\x00"})
	}
	got := k.Take(5)
	want := []KeyCount{{"burst", "user=b", 3}, {"burst", "user=a", 2}}
	if !slices.Equal(got, want) {
		t.Errorf("took %v, want %v (c came past the limit)", got, want)
	}
	k.Add(&windows.Decision{Rule: r, Key: "\"c\"\x00"})
	if got := k.Take(5); !slices.Equal(got, []KeyCount{{"burst", "user=c", 1}}) {
		t.Errorf("after a take: %v, want c alone", got)
	}
}

// TestValueRow: a value is drawn within its bucket's row, and higher
// values higher, against the bucket found by a linear scan.
func TestValueRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		bounds := []float64{rng.Float64() * 2}
		for range rng.IntN(12) {
			bounds = append(bounds, bounds[len(bounds)-1]*(1.1+rng.Float64()*3))
		}
		prev := -1.0
		for v := 0.001; v < bounds[len(bounds)-1]*10; v *= 1.07 {
			bucket := len(bounds)
			for i, le := range bounds {
				if v <= le {
					bucket = i
					break
				}
			}
			row := valueRow(bounds, v)
			if row < float64(bucket) || row > float64(bucket+1) || math.IsNaN(row) {
				t.Fatalf("bounds %v: %v drawn at row %v, its bucket is %d", bounds, v, row, bucket)
			}
			if row < prev {
				t.Fatalf("bounds %v: %v drawn lower (%v) than a smaller value (%v)", bounds, v, row, prev)
			}
			prev = row
		}
	}
}

// TestLiveHandler: / is the page with its script and the drawing, the
// content alone at /console/content, and nothing else is found.
func TestLiveHandler(t *testing.T) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{10, 100}}
	now := time.UnixMilli(1_700_000_100_000)
	l := NewLive(LiveOptions{Now: func() time.Time { return now }})
	l.Heatmap(fired(hm, "\"/pay\"\x00", 1_700_000_000_000, 1_700_000_010_000, 0, 5, 7, 70))
	l.Add(Sample{At: 1_700_000_099_000, Records: 100, Decisions: []RuleCount{{"burst", "deny", 1}}})
	l.Add(Sample{At: 1_700_000_100_000, Records: 300, Decisions: []RuleCount{{"burst", "deny", 5}},
		Partitions: []PartitionSample{{Partition: 0, WatermarkLag: 2000, Known: true, ConsumerLag: 7}}})
	l.Checkpointed(now.Add(-300 * time.Millisecond))
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, page := get("/")
	if code != http.StatusOK || !strings.Contains(page, "<script>") || !strings.Contains(page, "refreshMillis = 1000") {
		t.Fatalf("/: %d, want the page and its script", code)
	}
	for _, want := range []string{
		`data-le="10" data-count="2"`, `data-le="100" data-count="1"`, `data-le="+Inf" data-count="0"`, // the window's buckets
		`class="value">200<`,    // events/s: 200 records in a second
		`class="value">4<`,      // decisions/s
		`class="value">300 ms<`, // checkpoint age
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/ lacks %s", want)
		}
	}
	code, content := get("/console/content?part=heatmaps")
	if code != http.StatusOK || strings.Contains(content, "<script>") || !strings.Contains(content, `class="cell"`) {
		t.Errorf("/console/content?part=heatmaps: %d, want the heatmaps without the page", code)
	}
	if code, content := get("/console/content?part=status"); code != http.StatusOK || !strings.Contains(content, ">300 ms<") {
		t.Errorf("/console/content?part=status: %d, want the figures", code)
	}
	if code, _ := get("/console/content?part=nothing"); code != http.StatusNotFound {
		t.Errorf("/console/content?part=nothing: %d, want 404", code)
	}
	// The heatmaps again, as a page that has them: not sent while no
	// window fired, sent once one did (in a later second).
	heatmaps := func(etag string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/console/content?part=heatmaps", nil)
		req.Header.Set("If-None-Match", etag)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	etag := heatmaps("").Header.Get("ETag")
	if resp := heatmaps(etag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("the heatmaps asked for again, unchanged: %s, want 304", resp.Status)
	}
	l.Heatmap(fired(hm, "\"/pay\"\x00", 1_700_000_010_000, 1_700_000_020_000, 0, 3))
	now = now.Add(time.Second)
	if resp := heatmaps(etag); resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == etag {
		t.Errorf("the heatmaps asked for again after a window fired: %s, ETag %q, want 200 and a new ETag", resp.Status, resp.Header.Get("ETag"))
	}
	if code, _ := get("/other"); code != http.StatusNotFound {
		t.Errorf("/other: %d, want 404", code)
	}
}

// TestReportSpanNegative: the report's event-time span holds for times
// before the epoch, which windows support, as for any other.
func TestReportSpanNegative(t *testing.T) {
	var r Report
	r.span(-5000, -4001)
	r.span(-3000, -2001)
	if r.From != -5000 || r.To != -2001 {
		t.Errorf("span [%d, %d], want [-5000, -2001]", r.From, r.To)
	}
}

// TestShortDegradedSpell: a source degraded for a single sample among more
// than the charts draw still has its period drawn.
func TestShortDegradedSpell(t *testing.T) {
	now := time.UnixMilli(1_700_001_000_000)
	l := NewLive(LiveOptions{Now: func() time.Time { return now }})
	for i := range 3 * chartPoints {
		at := now.UnixMilli() - int64(3*chartPoints-i)*1000
		l.Add(Sample{At: at, Sources: []SourceSample{{Source: "gw-1", Skew: 3, Known: true, Degraded: i == 3*chartPoints-2}}})
	}
	// The case: thinning the samples to the chart's points drops it.
	snap := l.snapshot()
	for _, s := range thin(snap.samples, chartPoints) {
		if s.Sources[0].Degraded {
			t.Fatal("thinning keeps the degraded sample: the test no longer shows that periods come from every sample")
		}
	}
	var b strings.Builder
	renderCharts(&b, snap, l.opts)
	if !strings.Contains(b.String(), "gw-1 degraded ") {
		t.Error("the degraded sample's period is not drawn")
	}
}

// TestHiddenKeysBounded: keys past Series are counted up to a bound, and
// past it the page says the count is a floor.
func TestHiddenKeysBounded(t *testing.T) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"user"}, Buckets: []float64{10}}
	l := NewLive(LiveOptions{Series: 1})
	for i := range 150 {
		l.Heatmap(fired(hm, fmt.Sprintf("\"u%d\"\x00", i), 0, 10, 0, 1))
	}
	if len(l.hidden) != 100 {
		t.Fatalf("%d keys counted as not drawn, want the bound of 100", len(l.hidden))
	}
	if html := l.draw(partHeatmaps).html; !strings.Contains(html, "At least 100 more keys") {
		t.Error("the page does not say that 100 is a floor")
	}
}

// TestCompareSources: the degraded sources first, then the others, each by
// the size of their skew, the largest first, whatever its sign.
func TestCompareSources(t *testing.T) {
	sources := []SourceSample{{Source: "a", Skew: 3}, {Source: "b", Skew: -40, Degraded: true},
		{Source: "c", Skew: -5}, {Source: "d", Skew: 20, Degraded: true}, {Source: "e", Skew: 0}}
	slices.SortStableFunc(sources, CompareSources)
	var order []string
	for _, s := range sources {
		order = append(order, s.Source)
	}
	if want := []string{"b", "d", "c", "a", "e"}; !slices.Equal(order, want) {
		t.Errorf("sources in the order %v, want %v", order, want)
	}
}

// TestLiveFirstScreen: the status part, the page's first screen, says
// whether the job is healthy, which rules fire now and how much (per
// second now, in the last minute, since start), which sources are
// degraded, each heatmap key's p99 as a number, highest first, and the
// late and dlq counts, with the watermark's date.
func TestLiveFirstScreen(t *testing.T) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{10, 100}}
	now := time.UnixMilli(1_700_000_100_000)
	healthy := errors.New("brokers: no fetch of requests partition 0 answered for 15s")
	l := NewLive(LiveOptions{Now: func() time.Time { return now }, Health: func() error { return healthy }})
	l.Heatmap(fired(hm, "\"/pay\"\x00", 1_700_000_000_000, 1_700_000_010_000, 0, 5, 7, 70))
	l.Heatmap(fired(hm, "\"/cart\"\x00", 1_700_000_000_000, 1_700_000_010_000, 0, 500, 600))
	rules := func(burst, spend int64) []RuleCount {
		return []RuleCount{{"burst", "deny", burst}, {"spend", "review", spend}, {"quiet", "deny", 0}}
	}
	l.Add(Sample{At: 1_700_000_030_000, Records: 10, Decisions: rules(0, 0)})
	l.Add(Sample{At: 1_700_000_099_000, Records: 100, Decisions: rules(10, 2), Late: 3, DLQ: 1})
	l.Add(Sample{At: 1_700_000_100_000, Records: 300, Decisions: rules(15, 2), Late: 5, DLQ: 1, Watermark: 1_700_000_098_000,
		Sources: []SourceSample{{Source: "gw-1", Skew: 200, Known: true, Degraded: true}, {Source: "gw-2", Known: true}}})
	var b strings.Builder
	renderStatus(&b, l.snapshot(), l.opts)
	page := b.String()
	for _, want := range []string{
		`<div class="label">health</div><div class="value">unhealthy</div><div class="detail">brokers: no fetch`,
		`<div class="label">late</div><div class="value">5</div><div class="detail">since start, 2/s now`,
		`<div class="label">dlq</div><div class="value">1</div><div class="detail">since start, 0/s now`,
		`<div class="label">sources degraded</div><div class="value">1</div><div class="detail">gw-1`,
		`<div class="value">22:14:58</div><div class="detail">2023-11-14 UTC, 2 s behind`,
		// burst: 5 in the last second, 15 since the sample 70 s ago, 15
		// since start.
		`<th class="n">last 1 min 10 s</th>`,
		`<td><code>burst</code></td><td>deny</td><td class="n">5</td><td class="n">15</td><td class="n">15</td>`,
		`<td><code>spend</code></td><td>review</td><td class="n">0</td><td class="n">2</td><td class="n">2</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the first screen lacks %s", want)
		}
	}
	if strings.Contains(page, "quiet") {
		t.Error("a rule that never decided is listed")
	}
	// p99 per key, the highest first: /cart's 600-ish before /pay's 70-ish.
	cart, pay := strings.Index(page, `<code>api=/cart</code>`), strings.Index(page, `<code>api=/pay</code>`)
	if cart < 0 || pay < 0 || cart > pay {
		t.Errorf("p99 rows: /cart at %d, /pay at %d; want both, /cart first:\n%s", cart, pay, page)
	}
	if !regexp.MustCompile(`<code>api=/cart</code></td><td class="n">(49\d|50\d)(\.\d+)?</td>`).MatchString(page) {
		t.Errorf("/cart's p99 (of 500 and 600: the lower, as the sketch ranks them) is not printed as a number:\n%s", page)
	}
	healthy = nil
	b.Reset()
	renderStatus(&b, l.snapshot(), l.opts)
	if !strings.Contains(b.String(), `<div class="value">ok</div>`) {
		t.Error("a healthy job is not said to be")
	}
}

// TestSeriesColors: a series has the colour of its name's place among
// the chart's names, whatever their order, so that the console and the
// report, which draw the same rules, colour each alike; up to the
// palette's size no two share one.
func TestSeriesColors(t *testing.T) {
	names := []string{"pay-burst → deny", "user-spend → review", "device-session-scraping → deny", "a", "b", "c", "d", "e", "f", "g"}
	series := func(ns ...string) []Series {
		var s []Series
		for _, n := range ns {
			s = append(s, Series{Name: n})
		}
		return s
	}
	all := seriesColors(series(names...))
	seen := map[string]bool{}
	for _, c := range all {
		if seen[c] {
			t.Errorf("colour %s given twice among %d series: %v", c, len(names), all)
		}
		seen[c] = true
	}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	back := seriesColors(series(reversed...))
	for i := range names {
		if back[len(names)-1-i] != all[i] {
			t.Errorf("%q: %s in one order, %s in the other", names[i], all[i], back[len(names)-1-i])
		}
	}
}

// TestWholeAxis: a chart of counts has no tick between whole numbers, even
// when every count is 0.
func TestWholeAxis(t *testing.T) {
	var b strings.Builder
	lineChart{label: "lag", yLabel: "records", series: []Series{{Name: "partition 0", Points: []Point{{T: 0, V: 0}, {T: 1000, V: 0}}}},
		from: 0, to: 1000, whole: true}.render(&b)
	if strings.Contains(b.String(), ">0.5<") || strings.Contains(b.String(), ">0.25<") {
		t.Errorf("a tick between whole numbers on a chart of counts:\n%s", b.String())
	}
}

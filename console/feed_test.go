package console

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows"
)

// TestOutputFeedIsTheLiveConsole: a console fed the records of the
// decisions and heatmaps outputs, as the job writes them, keeps the
// heatmap windows, the decision counts and the top keys a console fed by
// the job itself keeps; the late and dlq records are counted.
func TestOutputFeedIsTheLiveConsole(t *testing.T) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"api", "channel"}, Buckets: []float64{10, 100, 1000}}
	burst := &rules.Rule{Name: "burst", Action: "deny", Key: []string{"user"}, Threshold: 5}
	review := &rules.Rule{Name: "spend", Action: "review", Key: []string{"user"}, Threshold: 100}
	opts := LiveOptions{Windows: 3, Series: 2, Now: func() time.Time { return time.UnixMilli(1_700_000_000_000) }}
	job, fromOutputs := NewLive(opts), NewLive(opts)
	feed := NewOutputFeed(fromOutputs, 100)
	keys := NewDecisionKeys(100)
	enc := sink.NewEncoder()
	var decisions []windows.Decision
	for i := range 40 {
		r := burst
		if i%3 == 0 {
			r = review
		}
		decisions = append(decisions, windows.Decision{Rule: r, EventID: fmt.Appendf(nil, `"e%d"`, i), EventTS: int64(1000 + i),
			Key: fmt.Sprintf("\"u%d\"\x00", i%7), Start: 0, End: 60_000, Value: float64(i)})
	}
	var windowsFired []*windows.HeatmapWindow
	for i, key := range []string{"\"/pay\"\x00\"web\"\x00", "\"/home\"\x00\"app\"\x00", "\"/cart\"\x00\"web\"\x00"} {
		for start := int64(0); start < 50; start += 10 {
			windowsFired = append(windowsFired, fired(hm, key, start, start+10, 0, 3, 30, 300, float64(i)*400))
		}
	}
	windowsFired = append(windowsFired, fired(hm, "\"/pay\"\x00\"web\"\x00", 30, 40, 1, 5000, 5, 5)) // a later revision
	for i := range decisions {
		keys.Add(&decisions[i])
		if err := feed.Decision(enc.AppendDecision(nil, &decisions[i])); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range windowsFired {
		job.Heatmap(w)
		if err := feed.Heatmap(enc.AppendHeatmap(nil, w)); err != nil {
			t.Fatal(err)
		}
	}
	// Another writer's record, its fields in another order, counts as the
	// job's own.
	other := `{"rule":"burst","key":{"user":"u0"},"action":"deny","id":"x/burst","window":{"start":0,"end":60000}}`
	if err := feed.Decision([]byte(other)); err != nil {
		t.Fatal(err)
	}
	keys.Add(&windows.Decision{Rule: burst, Key: "\"u0\"\x00"})
	for range 3 {
		feed.Late()
	}
	feed.DLQ()
	job.Add(Sample{At: 1_700_000_000_000, Decisions: []RuleCount{{"spend", "review", 14}, {"burst", "deny", 27}}, TopKeys: keys.Take(topKeyCount), Late: 3, DLQ: 1})
	feed.Sample(time.UnixMilli(1_700_000_000_000)) // the rules in the order they first decided

	// Ids differ: the job's are its keys' bytes, the outputs' their text.
	byName := map[string]*liveSeries{}
	for _, s := range fromOutputs.series {
		byName[s.Heatmap+" "+s.Key] = s
	}
	for _, want := range job.series {
		id := want.Heatmap + " " + want.Key
		got := byName[id]
		if got == nil {
			t.Fatalf("from the outputs: series %v, want %q among them", slices.Collect(maps.Keys(byName)), id)
		}
		if got.Heatmap != want.Heatmap || got.Key != want.Key || !slices.Equal(got.Bounds, want.Bounds) {
			t.Errorf("%q from the outputs: %s %s %v, want %s %s %v", id, got.Heatmap, got.Key, got.Bounds, want.Heatmap, want.Key, want.Bounds)
		}
		if len(got.Windows) != len(want.Windows) {
			t.Fatalf("%q from the outputs: %d windows, want %d", id, len(got.Windows), len(want.Windows))
		}
		for i, w := range want.Windows {
			g := got.Windows[i]
			if g.Start != w.Start || g.End != w.End || g.Revision != w.Revision || g.Count != w.Count || !slices.Equal(g.Buckets, w.Buckets) ||
				!near(g.P50, w.P50) || !near(g.P99, w.P99) {
				t.Errorf("%q window %d from the outputs: %+v, want %+v", id, i, g, w)
			}
		}
	}
	if len(fromOutputs.hidden) != len(job.hidden) || len(fromOutputs.series) != len(job.series) {
		t.Errorf("from the outputs: %d keys kept, %d hidden; want %d and %d", len(fromOutputs.series), len(fromOutputs.hidden), len(job.series), len(job.hidden))
	}
	got, want := fromOutputs.samples[0], job.samples[0]
	if !slices.Equal(got.Decisions, want.Decisions) || !slices.Equal(got.TopKeys, want.TopKeys) || got.Late != want.Late || got.DLQ != want.DLQ {
		t.Errorf("sample from the outputs:\n%+v\nwant\n%+v", got, want)
	}
}

// near reports whether two quantiles agree to the 6 significant digits
// the heatmaps output writes.
func near(a, b float64) bool { return a == b || (a-b)/b < 1e-5 && (b-a)/b < 1e-5 }

// TestFromOutputsPage: the console of the outputs shows what they say and
// leaves out what only the job knows of itself, and links to the other
// view.
func TestFromOutputsPage(t *testing.T) {
	l := NewLive(LiveOptions{FromOutputs: true, Title: "riskstream: the whole job", Self: "/job/",
		Links: []Link{{"this instance", "/"}, {"the whole job", "/job/"}}})
	feed := NewOutputFeed(l, 10)
	feed.Sample(time.Now())
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	page := string(b)
	for _, want := range []string{`<a href="/">this instance</a>`, `<a href="/job/" aria-current="page">the whole job</a>`,
		`<div class="label">decisions/s</div>`, `<div class="label">dlq</div>`, `id="decisions"`, `id="top-keys"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	for _, absent := range []string{"events/s", "consumer lag", "watermark", "checkpoint age", `id="skew"`} {
		if strings.Contains(page, absent) {
			t.Errorf("the page shows %q, which the outputs do not say", absent)
		}
	}
}

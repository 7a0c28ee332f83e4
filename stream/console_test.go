package stream

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/headless"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
)

// cellWindows returns the windows the cells are of.
func cellWindows(cells map[headless.Cell]int64) map[headless.Cell]bool {
	windows := map[headless.Cell]bool{}
	for c := range cells {
		c.LE = ""
		windows[c] = true
	}
	return windows
}

// TestConsoleServed: a job with an HTTP address serves the console's page
// and its parts beside /metrics, and answers 404 for other paths; no
// browser needed.
func TestConsoleServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and a job")
	}
	addr := testbroker.Start(t, 1)
	metrics := kafkatest.FreeAddr(t)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, StateDir: t.TempDir(), MetricsAddr: metrics,
		Registry: prometheus.NewRegistry()})
	defer stop()
	for path, want := range map[string]int{"/": http.StatusOK, "/console/content?part=heatmaps": http.StatusOK,
		"/console/content?part=status": http.StatusOK, "/metrics": http.StatusOK, "/nothing-here": http.StatusNotFound} {
		resp, err := http.Get("http://" + metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %s, want %d", path, resp.Status, want)
		}
	}
}

var liveUpdates = regexp.MustCompile(`<body[^>]* data-live="connected" data-updates="(\d+)"`)

// TestConsoleInBrowser: Chromium opens the console of a running job that
// has taken the bundled workload; the page's script refreshes it from the
// job, the browser's console stays empty, every heatmap cell drawn has
// the bucket and count of the heatmaps topic's record of its window, and a
// screenshot is not blank.
func TestConsoleInBrowser(t *testing.T) {
	browser := headless.Require(t)
	if testing.Short() {
		t.Skip("starts a broker, a job and a browser")
	}
	want := replayDecisions(t)
	addr := testbroker.Start(t, 1)
	produceBundled(t, addr)
	metrics := kafkatest.FreeAddr(t)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, StateDir: t.TempDir(), CheckpointInterval: 100 * time.Millisecond,
		MetricsAddr: metrics, Registry: prometheus.NewRegistry()})
	defer stop()
	if got := waitRecords(t, addr, "decisions", len(want)); len(got) < len(want) {
		t.Fatalf("the decisions topic holds %d records, want %d", len(got), len(want))
	}
	before, err := headless.RecordCells(readTopic(t, addr, "heatmaps"))
	if err != nil {
		t.Fatal(err)
	}
	fired := len(cellWindows(before))
	if fired == 0 {
		t.Fatal("no heatmap window fired: nothing to check the page against")
	}

	// The console samples the job every second: wait for one that has
	// the decisions.
	waitConsole(t, metrics, "status", "<td><code>pay-burst</code></td>")
	ctx := context.Background()
	url := "http://" + metrics + "/"
	page, err := browser.Load(ctx, url, 2500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Console) > 0 {
		t.Errorf("the browser's console has %d messages: %q", len(page.Console), page.Console)
	}
	if m := liveUpdates.FindStringSubmatch(page.DOM); m == nil {
		t.Error("the page's script did not refresh it from the job (no data-live=connected data-updates on <body>)")
	} else if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Errorf("the page was refreshed %d times in 2.5 s, want every second", n)
	}
	// The first screen, as the browser has it: health, the rules firing,
	// each heatmap key's p99 as a number.
	for _, want := range []string{`<div class="label">health</div><div class="value">ok</div>`,
		`<section id="firing">`, `<td><code>pay-burst</code></td>`, `<section id="p99-now">`, `<td><code>api=/pay</code></td><td class="n">`} {
		if !strings.Contains(page.DOM, want) {
			i := strings.Index(page.DOM, `<section id="firing">`)
			t.Errorf("the page's first screen lacks %s: %.600s", want, page.DOM[max(i, 0):])
		}
	}
	got, err := headless.DOMCells(page.DOM)
	if err != nil {
		t.Fatal(err)
	}
	// Read after the page was drawn: windows may have fired since, not
	// before.
	records, err := headless.RecordCells(readTopic(t, addr, "heatmaps"))
	if err != nil {
		t.Fatal(err)
	}
	for c, n := range got {
		if w, ok := records[c]; !ok || w != n {
			t.Errorf("cell %+v: the page has %d, the heatmaps topic %d (has it: %v)", c, n, w, ok)
		}
	}
	if drawn := len(cellWindows(got)); drawn < fired {
		t.Errorf("the page draws %d windows, the heatmaps topic had %d before it was opened", drawn, fired)
	}

	shot := filepath.Join(t.TempDir(), "console.png")
	colors, err := browser.Screenshot(ctx, url, shot, 1280, 1600, 1500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if colors < 50 {
		t.Errorf("the screenshot has %d colours: blank or unstyled", colors)
	}
}

// waitConsole waits until a part of the console at addr has want, and
// returns that part.
func waitConsole(t *testing.T, addr, part, want string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/console/content?part=" + part)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), want) {
			return string(body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console's %s never had %s:\n%s", part, want, body)
		}
	}
}

package stream

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/headless"
	"github.com/segmentio/kafka-go"
)

// waitForRecords waits up to a minute for a one-partition topic to hold n
// records.
func waitForRecords(t *testing.T, addr, topic string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := kafka.DialLeader(context.Background(), "tcp", addr, topic, 0)
		if err != nil {
			continue
		}
		last, _ := conn.ReadLastOffset()
		conn.Close()
		if int(last) >= n {
			return
		}
	}
	t.Fatalf("the %s topic never held %d records", topic, n)
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
	addr := startLiveBroker(t)
	produceBundled(t, addr)
	metrics := freeAddr(t)
	stop := startJob(t, RunOptions{Brokers: []string{addr}, StateDir: t.TempDir(), CheckpointInterval: 100 * time.Millisecond,
		MetricsAddr: metrics, Registry: prometheus.NewRegistry()})
	defer stop()
	waitForRecords(t, addr, "decisions", len(want))
	fired := len(readTopic(t, addr, "heatmaps"))

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
	windows := map[headless.Cell]bool{}
	for c, n := range got {
		if w, ok := records[c]; !ok || w != n {
			t.Errorf("cell %+v: the page has %d, the heatmaps topic %d (has it: %v)", c, n, w, ok)
		}
		c.LE = ""
		windows[c] = true
	}
	if len(windows) < fired {
		t.Errorf("the page draws %d windows, the heatmaps topic had %d before it was opened", len(windows), fired)
	}

	for _, path := range []string{"/console/content?part=heatmaps", "/console/content?part=status", "/"} {
		resp, err := http.Get("http://" + metrics + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", path, resp.Status)
		}
	}
	if resp, err := http.Get("http://" + metrics + "/nothing-here"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nothing-here: %s, want 404", resp.Status)
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

package console_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/headless"
)

// TestReportInBrowser: Chromium opens the report of the bundled replay
// without a console message, its DOM has every heatmap cell of the
// heatmaps output with its count, and a screenshot of it is not blank.
func TestReportInBrowser(t *testing.T) {
	browser := headless.Require(t)
	if testing.Short() {
		t.Skip("starts a browser: not with -short")
	}
	dir := replayOf(t, bundledInput)
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, report(t, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	url := "file://" + path
	page, err := browser.Load(ctx, url, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Console) > 0 {
		t.Errorf("the browser's console has %d messages: %q", len(page.Console), page.Console)
	}
	if n := checkCells(t, page.DOM, lines(t, filepath.Join(dir, "heatmaps.jsonl"))); n == 0 {
		t.Fatal("no heatmap cell to check")
	}
	shot := filepath.Join(t.TempDir(), "report.png")
	colors, err := browser.Screenshot(ctx, url, shot, 1280, 1600, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if colors < 50 {
		t.Errorf("the screenshot has %d colours: blank or unstyled", colors)
	}
}

// Package headless drives the system's Chromium, headless, for the tests
// of the live console and the report: it loads a page, lets its scripts
// run, and gives back the DOM as the browser left it, what the page wrote
// to the browser's console, and screenshots. It runs the chromium command
// (Debian's package, which CI installs); the tests skip, saying so, where
// there is none.
package headless

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Browser is a Chromium binary.
type Browser struct {
	path string
	// profile is a folder of its own for each run's profile, so that runs
	// share nothing and leave nothing behind.
	profile string
}

// Require returns the system's Chromium, or skips the test saying how to
// get one. $RISKSTREAM_CHROMIUM names another binary.
func Require(t testing.TB) *Browser {
	t.Helper()
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if p := os.Getenv("RISKSTREAM_CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return &Browser{path: p, profile: t.TempDir()}
		}
	}
	t.Skip("no chromium on PATH: the browser tests need it (apt-get install chromium; .ci/run installs it), or RISKSTREAM_CHROMIUM naming one")
	return nil
}

// Page is a page as the browser left it.
type Page struct {
	// DOM is the document serialised after its scripts ran.
	DOM string
	// Console is every message the page wrote to the browser's console,
	// uncaught errors included.
	Console []string
}

// consoleLine is how Chromium logs a page's console message on stderr
// with --enable-logging=stderr: [pid:tid:date:LEVEL:CONSOLE:line] "message",
// source: url (line).
var consoleLine = regexp.MustCompile(`:CONSOLE[^\]]*\] (.*)`)

// args are the flags of every run: headless, no sandbox (CI runs as root,
// where Chromium's sandbox refuses to start), no GPU, nothing fetched but
// the page, and the page's console logged on stderr.
func (b *Browser) args(wait time.Duration, extra ...string) []string {
	return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + b.profile, "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
		// Virtual time runs the page's timers and fetches, as fast as
		// they answer, for wait, then the page is taken as it is.
		"--virtual-time-budget=" + strconv.FormatInt(wait.Milliseconds(), 10)}, extra...)
}

// run runs Chromium with args and returns its stdout and stderr.
func (b *Browser) run(ctx context.Context, args []string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.path, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("headless: %s: %w\n%s", b.path, err, errOut.Bytes())
	}
	return out.Bytes(), errOut.Bytes(), nil
}

// Load opens url, lets the page run for wait of its time, and returns
// the page.
func (b *Browser) Load(ctx context.Context, url string, wait time.Duration) (*Page, error) {
	out, errOut, err := b.run(ctx, b.args(wait, "--dump-dom", url))
	if err != nil {
		return nil, err
	}
	p := &Page{DOM: string(out)}
	for _, m := range consoleLine.FindAllSubmatch(errOut, -1) {
		p.Console = append(p.Console, string(m[1]))
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil, fmt.Errorf("headless: %s: no document\n%s", url, errOut)
	}
	return p, nil
}

// Screenshot opens url in a window of width by height, lets the page run
// for wait, writes what it shows to path as PNG, and returns how many
// colours it has (DistinctColors).
func (b *Browser) Screenshot(ctx context.Context, url, path string, width, height int, wait time.Duration) (colors int, err error) {
	_, _, err = b.run(ctx, b.args(wait, "--screenshot="+path, fmt.Sprintf("--window-size=%d,%d", width, height), url))
	if err != nil {
		return 0, err
	}
	return DistinctColors(path)
}

// DistinctColors counts the colours of a PNG: a blank or failed page
// has one or two, a drawn chart hundreds.
func DistinctColors(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return 0, fmt.Errorf("headless: %s: %w", path, err)
	}
	seen := map[[4]uint32]struct{}{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c0, c1, c2, c3 := img.At(x, y).RGBA()
			seen[[4]uint32{c0, c1, c2, c3}] = struct{}{}
		}
	}
	if len(seen) == 0 {
		return 0, errors.New("headless: empty image")
	}
	return len(seen), nil
}

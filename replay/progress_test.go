package replay

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/testinput"
)

// TestLogClearsProgressLine replays a workload whose gw-1 clock steps
// 200 ms ahead midway, showing progress on the terminal the log writes to:
// the skew warning must start on a line of its own, after the progress
// line is cleared, never after the progress text.
func TestLogClearsProgressLine(t *testing.T) {
	o := gen.DefaultOptions()
	o.Clocks = []gen.Clock{{Source: "gw-1", Step: 200 * time.Millisecond, StepAt: 2 * time.Second}}
	var in bytes.Buffer
	if _, err := gen.Generate(&in, o); err != nil {
		t.Fatal(err)
	}
	var term testinput.LockedBuffer // the terminal both write to
	clock := time.Unix(0, 0)
	tick := func() time.Time { clock = clock.Add(time.Second); return clock }
	sum := replay(t, Options{Config: testinput.Rules(t), Inputs: []string{"-"}, Stdin: &in, OutDir: t.TempDir(),
		Progress: &term, Now: tick, Logger: slog.New(slog.NewTextHandler(&term, nil))})
	if len(sum.Sources) == 0 || !sum.Sources[1].Degraded && sum.Sources[1].Transitions == 0 {
		t.Fatalf("gw-1 was not degraded: %+v", sum.Sources)
	}
	out := term.String()
	cleared := 0
	for i := strings.Index(out, "time="); i >= 0; {
		before := out[:i]
		switch {
		case strings.HasSuffix(before, "\r\x1b[K"):
			cleared++
		case before == "" || strings.HasSuffix(before, "\n"):
		default:
			t.Fatalf("a log record lands on the progress line: %q", out[max(0, i-80):min(len(out), i+80)])
		}
		next := strings.Index(out[i+1:], "time=")
		if next < 0 {
			break
		}
		i += 1 + next
	}
	if cleared == 0 || !strings.Contains(out, "level=WARN") {
		t.Fatalf("no warning logged while the progress line showed:\n%q", out)
	}
}

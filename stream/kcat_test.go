package stream

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
)

// TestKcat proves that a Kafka client we did not write can use the job:
// kcat produces the requests and consumes the decisions. CI installs kcat
// (.ci/run); without it the test is skipped.
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install kcat)")
	}
	addr := testbroker.Start(t, 1)
	var in strings.Builder
	for i := range 7 {
		fmt.Fprintf(&in, `{"id":"k%d","ts":%d,"user":"u1","api":"/pay","latency_ms":3}`+"\n", i, 1732150000000+int64(i)*1000)
	}
	produce := exec.Command(kcat, "-P", "-b", addr, "-t", "requests", "-p", "0")
	produce.Stdin = strings.NewReader(in.String())
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v: %s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
			CheckpointInterval: 50 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var got []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		consume := exec.Command(kcat, "-C", "-b", addr, "-t", "decisions", "-o", "beginning", "-e", "-q", "-f", "%k %s\n")
		var stderr bytes.Buffer
		consume.Stderr = &stderr
		if got, err = consume.Output(); err == nil && bytes.Count(got, []byte("\n")) >= 2 {
			break
		}
	}
	// More than 5 payments in 60 s: the 6th and 7th are denied.
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], `k5 {"id":"k5/pay-burst"`) || !strings.HasPrefix(lines[1], `k6 {"id":"k6/pay-burst"`) {
		t.Fatalf("kcat read the decisions:\n%s", got)
	}
}

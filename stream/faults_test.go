package stream

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/kafkatest"
)

// faultsEnv gates the fault-injection suite: processes killed with SIGKILL
// many times over, which takes minutes. CI sets it.
const faultsEnv = "RISKSTREAM_FAULTS"

// faults reports whether the fault-injection suite runs.
func faults() bool { return os.Getenv(faultsEnv) != "" }

// TestFaultBrokerSIGKILL kills the broker, a process of its own, three times
// while the job consumes, restarting it each time on its data: the job rides
// each outage out, and at the end its decisions are replay's, none missing
// and none foreign. Each recovery (broker back to the job's next decision)
// is logged.
func TestFaultBrokerSIGKILL(t *testing.T) {
	if testing.Short() || !faults() {
		t.Skipf("fault injection: set %s=1", faultsEnv)
	}
	bin := buildBinary(t)
	input := filepath.Join(t.TempDir(), "in.jsonl")
	o := gen.DefaultOptions()
	o.Events, o.Users = 300_000, 20_000
	writeWorkload(t, input, o)
	want := replayDecisionsOf(t, input)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	data := t.TempDir()
	startBroker := func() *exec.Cmd {
		logs := &lockedBuffer{}
		cmd := exec.Command(bin, "broker", "--addr", addr, "--data-dir", data, "--partitions", "1")
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, logs, "development broker")
		return cmd
	}
	b := startBroker()
	defer func() { b.Process.Kill(); b.Wait() }()
	if st, err := Produce(context.Background(), ProduceOptions{File: input, Brokers: []string{addr}}); err != nil || st.Failed != 0 {
		t.Fatalf("produce: %+v, %v", st, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: loadRules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
			CheckpointInterval: 50 * time.Millisecond})
	}()
	decided := func() int64 {
		n, err := kafkatest.LastOffset(addr, "decisions", 0)
		if err != nil {
			return -1
		}
		return n
	}
	for kill := range 3 {
		// Let the job make progress, then kill the broker under it.
		for before := decided(); decided() <= before && before < int64(len(want)); time.Sleep(20 * time.Millisecond) {
		}
		time.Sleep(150 * time.Millisecond)
		b.Process.Signal(syscall.SIGKILL)
		b.Wait()
		time.Sleep(time.Second)
		b = startBroker()
		back := time.Now()
		before := decided()
		if before < 0 {
			t.Fatal("the restarted broker does not answer")
		}
		for n := before; n == before && n < int64(len(want)); n = decided() {
			if time.Since(back) > time.Minute {
				t.Fatalf("kill %d: no decision a minute after the broker came back (%d of %d written)", kill+1, before, len(want))
			}
			select {
			case err := <-done:
				t.Fatalf("the job stopped: %v", err)
			default:
			}
			time.Sleep(20 * time.Millisecond)
		}
		if decided() >= int64(len(want)) {
			t.Logf("broker SIGKILL %d: the input was all decided by the time the broker was back", kill+1)
			continue
		}
		t.Logf("broker SIGKILL %d: the job decided again %v after the broker was back", kill+1, time.Since(back).Round(time.Millisecond))
	}
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if coversAll(decisionSet(t, addr), want) {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkDecisions(t, addr, want)
}

// writeWorkload writes a generated workload to path.
func writeWorkload(t *testing.T, path string, o gen.Options) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	if _, err := gen.Generate(w, o); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// checkDecisions fails the test unless the decisions topic holds every
// decision of want and nothing else (repeats of the same record allowed).
func checkDecisions(t *testing.T, addr string, want []string) {
	t.Helper()
	got := liveDecisions(t, addr)
	set := decisionSet(t, addr)
	missing := 0
	for _, d := range want {
		if !set[d] {
			missing++
		}
		delete(set, d)
	}
	if missing > 0 || len(set) > 0 {
		t.Fatalf("%d decisions missing, %d foreign (of %d)", missing, len(set), len(want))
	}
	t.Logf("%d decisions written for %d distinct: 0 missing, 0 foreign", len(got), len(want))
}

package stream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/observe"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/segmentio/kafka-go"
)

// TestFaultBrokerSIGKILL kills the broker, a process of its own, three times
// while the job consumes, restarting it each time on its data: the job rides
// each outage out, and at the end its decisions are replay's, none missing
// and none foreign. Each recovery (broker back to the job's next decision)
// is logged.
func TestFaultBrokerSIGKILL(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin, input, want := faultWorkload(t)
	addr, data := kafkatest.FreeAddr(t), t.TempDir()
	startBroker := func() *exec.Cmd { return startBrokerProcess(t, bin, addr, data, 1) }
	b := startBroker()
	defer func() { b.Process.Kill(); b.Wait() }()
	if st, err := produce.Run(context.Background(), produce.Options{File: input, Brokers: []string{addr}}); err != nil || st.Failed != 0 {
		t.Fatalf("produce: %+v, %v", st, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
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

// faultWorkload returns the riskstream binary, a generated input of
// 300,000 events (9,615 decisions with the bundled rules) and what a
// replay of it decides, for the fault tests that run the job and the
// broker as processes of their own.
func faultWorkload(t *testing.T) (bin, input string, want []string) {
	t.Helper()
	bin = buildBinary(t)
	input = filepath.Join(t.TempDir(), "in.jsonl")
	o := gen.DefaultOptions()
	o.Events, o.Users = 300_000, 20_000
	testinput.WriteWorkload(t, input, o)
	return bin, input, replayDecisionsOf(t, input)
}

// startBrokerProcess starts the development broker as a process of its
// own, on addr with its data in data and partitions input partitions, and
// returns once it listens.
func startBrokerProcess(t *testing.T, bin, addr, data string, partitions int) *exec.Cmd {
	t.Helper()
	logs := &testinput.LockedBuffer{}
	cmd := exec.Command(bin, "broker", "--addr", addr, "--data-dir", data, "--partitions", strconv.Itoa(partitions))
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, logs, "development broker")
	return cmd
}

// TestFaultBrokerHang stops the broker, a process of its own, with SIGSTOP
// while the job, another, consumes (a broker that hangs: connections open,
// no answer): /healthz turns 503 once nothing has been answered for
// stallAfter, and SIGTERM ends the job within jobbase.StopBound. With the broker
// back, a restart makes every decision of the replay, none with another
// value.
func TestFaultBrokerHang(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin, input, want := faultWorkload(t)
	addr, data := kafkatest.FreeAddr(t), t.TempDir()
	b := startBrokerProcess(t, bin, addr, data, 1)
	defer func() { b.Process.Signal(syscall.SIGCONT); b.Process.Kill(); b.Wait() }()
	if st, err := produce.Run(context.Background(), produce.Options{File: input, Brokers: []string{addr}}); err != nil || st.Failed != 0 {
		t.Fatalf("produce: %+v, %v", st, err)
	}
	stateDir, metrics := t.TempDir(), kafkatest.FreeAddr(t)
	run := func() (*exec.Cmd, *testinput.LockedBuffer) {
		return startProcess(t, bin, "run", "--rules", bundledRules, "--brokers", addr, "--state-dir", stateDir,
			"--checkpoint-interval", "100ms", "--metrics-addr", metrics)
	}
	job, logs := run()
	defer func() { job.Process.Kill(); job.Wait() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if n, err := kafkatest.LastOffset(addr, "decisions", 0); err == nil && n > int64(len(want))/10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decisions a minute after the start:\n%s", logs)
		}
	}
	b.Process.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	for {
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			t.Logf("/healthz turned 503 %s after the broker hung: %s", time.Since(stopped).Round(time.Millisecond), body)
			break
		}
		if time.Since(stopped) > observe.StallAfter+5*time.Second {
			t.Fatalf("/healthz still answers %d %s %s after the broker hung", resp.StatusCode, body, time.Since(stopped))
		}
		time.Sleep(100 * time.Millisecond)
	}
	job.Process.Signal(syscall.SIGTERM)
	asked := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- job.Wait() }()
	select {
	case err := <-exited:
		t.Logf("stopped %s after SIGTERM, the broker hung: %v", time.Since(asked).Round(time.Millisecond), err)
	case <-time.After(jobbase.StopBound + 5*time.Second):
		t.Fatalf("the job did not stop within %s of SIGTERM, the broker hung:\n%s", jobbase.StopBound+5*time.Second, logs)
	}
	b.Process.Signal(syscall.SIGCONT)
	first := logs
	job, logs = run()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the first run's log:\n%s\nthe restart's:\n%s", first, logs)
		}
	})
	for deadline := time.Now().Add(time.Minute); !coversAll(decisionSet(t, addr), want) && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
	}
	job.Process.Signal(syscall.SIGTERM)
	if err := job.Wait(); err != nil {
		t.Fatalf("restart: %v\n%s", err, logs)
	}
	checkDecisions(t, addr, want)
}

// checkDecisions fails the test unless the decisions topic holds every
// decision of want and nothing else: repeats of the same record allowed,
// never another value for a decision id.
func checkDecisions(t *testing.T, addr string, want []string) {
	t.Helper()
	got := liveDecisions(t, addr)
	c := countDecisions(got, want)
	// Repeats of the same record are allowed here (a job killed before its
	// checkpoint may have written a decision it makes again identically),
	// never another value.
	if c.missing+c.foreign+c.changed > 0 {
		t.Fatalf("%d decisions written, the replay made %d: %s", len(got), len(want), c)
	}
	t.Logf("%d decisions written for %d distinct: %s", len(got), len(want), c)
}

// TestKilledAfterWaitsRanOut: the job takes a partition's records after
// another's later ones, its wait for the partition having run out (the
// records reached the broker late), and is killed before a checkpoint
// covers them. Its restart takes them in the same order again (the merge's
// journal), so every output it makes again is the one written, byte for
// byte: none written twice, none with another value.
func TestKilledAfterWaitsRanOut(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("fault injection: set %s=1", kafkatest.FaultsEnv)
	}
	bin := buildBinary(t)
	addr := testbroker.Start(t, 2)
	// Every event decides, with the count of its user's window so far: a
	// value that depends on the order the events were taken in.
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(`watermark: {out_of_orderness: 60s, idle_timeout: 1h}
rules:
  - name: running-count
    key: [user]
    window: {type: tumbling, size: 1h}
    aggregate: count
    threshold: 0
    action: review
`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := int64(1732150800000)
	events := func(p, from, n int, offset int64) []kafka.Message {
		var msgs []kafka.Message
		for i := from; i < from+n; i++ {
			ts := base + int64(i)*1000 + offset
			msgs = append(msgs, kafka.Message{
				Value: fmt.Appendf(nil, `{"id":"p%d-%d","ts":%d,"user":"u","api":"/x","latency_ms":1}`, p, i, ts),
				Time:  time.UnixMilli(ts),
			})
		}
		return msgs
	}
	waitDecisions := func(n int64, logs *testinput.LockedBuffer) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); recordsIn(t, addr, "decisions") < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d decisions written:\n%s", recordsIn(t, addr, "decisions"), n, logs)
			}
		}
	}
	stateDir := t.TempDir()
	start := func() (*exec.Cmd, *testinput.LockedBuffer) {
		return startProcess(t, bin, "run", "--rules", rulesFile, "--brokers", addr, "--state-dir", stateDir,
			"--metrics-addr", "", "--checkpoint-interval", "1h", "--partition-wait", "50ms")
	}
	job, logs := start()
	defer func() { job.Process.Kill(); job.Wait() }()
	// Partition 0's records, then partition 1's, which interleave with
	// them in time: the job went on without partition 1.
	writePartition(t, addr, 0, events(0, 0, 20, 0)...)
	waitDecisions(20, logs)
	writePartition(t, addr, 1, events(1, 0, 20, 500)...)
	waitDecisions(40, logs)
	job.Process.Signal(syscall.SIGKILL)
	job.Wait()
	first := readTopic(t, addr, "decisions")

	job, logs = start()
	waitFor(t, logs, "in the order the run before took them")
	writePartition(t, addr, 0, events(0, 20, 1, 0)...)
	writePartition(t, addr, 1, events(1, 20, 1, 500)...)
	waitDecisions(42, logs)
	job.Process.Signal(syscall.SIGTERM)
	if err := job.Wait(); err != nil {
		t.Fatalf("restart: %v\n%s", err, logs)
	}
	got := readTopic(t, addr, "decisions")
	if len(got) != 42 || !slices.Equal(got[:40], first) {
		t.Fatalf("%d decisions after the restart, want the 40 of the first run and 2 more:\n%s", len(got), strings.Join(got, "\n"))
	}
	// Against what the first run wrote and the two records after: the
	// replay of the topic takes them in timestamp order, as the first run
	// could not.
	c := countDecisions(got, append(slices.Clone(first), got[40:]...))
	if c.missing+c.foreign+c.twice+c.changed != 0 {
		t.Errorf("%d decisions: %s", len(got), c)
	}
	t.Logf("%d decisions: %s", len(got), c)
	if strings.Contains(logs.String(), "another value") {
		t.Errorf("the restart made outputs with another value:\n%s", logs)
	}
	// The order was the arrival's, not the timestamps': partition 1's
	// first event counted after all of partition 0's.
	if !strings.Contains(strings.Join(got, "\n"), `"id":"p1-0/running-count","event_id":"p1-0"`) || !strings.Contains(got[20], `"value":21`) {
		t.Errorf("partition 1's first event was not taken after partition 0's twenty: %s", got[20])
	}
}

// writePartition writes msgs to partition p of the input topic.
func writePartition(t testing.TB, addr string, p int, msgs ...kafka.Message) {
	t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", addr, "requests", p)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.WriteMessages(msgs...); err != nil {
		t.Fatal(err)
	}
}

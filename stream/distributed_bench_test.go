package stream

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/produce"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
)

var (
	distEvents      = flag.Int("dist.events", 500_000, "BenchmarkDistributedCatchUp: events in the input topic")
	distPartitions  = flag.Int("dist.partitions", 1, "BenchmarkDistributedCatchUp: partitions of the input topic")
	distRepartition = flag.Int("dist.repartition-partitions", 12, "BenchmarkDistributedCatchUp: --repartition-partitions")
	distDirect      = flag.Bool("dist.direct", false, "BenchmarkDistributedCatchUp: run the single job (no repartition hop) instead")
	distInstances   = flag.Int("dist.instances", 1, "BenchmarkDistributedCatchUp: distributed instances, in this process")
	distHop         = flag.Bool("dist.hop", false, "BenchmarkDistributedCatchUp: send every record through the repartition topic, the instance's own partitions' too")
)

// BenchmarkDistributedCatchUp measures what distribution costs one
// instance: the input topic is filled first, then one instance of the job,
// distributed or (-dist.direct) not, reads it from the start with the
// bundled rules, and the time until the decisions topic holds every
// decision of a replay of the topic gives events/s. Broker and job share
// the process and the machine. One instance holds every partition, so its
// records skip the repartition topic; -dist.hop sends them through it, as
// an instance sends those whose state another holds. repartition-B/event
// is what the hop writes to the repartition topic per input event
// (record, times and marks).
//
//	go test ./stream/ -run '^$' -bench BenchmarkDistributedCatchUp -benchtime 1x [-dist.direct] [-dist.hop] [-dist.events N]
func BenchmarkDistributedCatchUp(b *testing.B) {
	o := gen.DefaultOptions()
	o.Events, o.Users = *distEvents, max(*distEvents/20, 1)
	var buf bytes.Buffer
	if _, err := gen.Generate(&buf, o); err != nil {
		b.Fatal(err)
	}
	input := buf.Bytes()
	cfg := testinput.Rules(b)
	for b.Loop() {
		addr := testbroker.Start(b, int32(*distPartitions))
		if st, err := produce.Run(context.Background(), produce.Options{File: "-", Stdin: bytes.NewReader(input),
			Brokers: []string{addr}}); err != nil || st.Failed != 0 {
			b.Fatalf("produce: %+v %v", st, err)
		}
		want := len(topicReplayDecisions(b, addr, cfg))
		start, cpu := time.Now(), cpuTime(b)
		var stops []func()
		for range max(*distInstances, 1) {
			stops = append(stops, startJob(b, RunOptions{Config: cfg, Brokers: []string{addr}, Registry: prometheus.NewRegistry(),
				Distributed: !*distDirect, RepartitionPartitions: *distRepartition, CheckpointInterval: time.Second, Testing: jobbase.Testing{HopAll: *distHop}}))
		}
		for deadline := time.Now().Add(10 * time.Minute); int(recordsIn(b, addr, "decisions")) < want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the job did not make the %d decisions of the replay", want)
			}
		}
		took, cpu := time.Since(start), cpuTime(b)-cpu
		for _, stop := range stops {
			stop()
		}
		b.ReportMetric(float64(*distEvents)/took.Seconds(), "events/s")
		// The process's CPU, the broker's included, per million events.
		b.ReportMetric(cpu.Seconds()/float64(*distEvents)*1e6, "cpu-s/Mevent")
		b.ReportMetric(float64(want), "decisions")
		if !*distDirect {
			var n int64
			for p := range *distRepartition {
				for _, m := range readPartition(b, addr, "riskstream-repartition", p) {
					n += int64(len(m.Value))
				}
			}
			b.ReportMetric(float64(n)/float64(*distEvents), "repartition-B/event")
			b.ReportMetric(float64(len(input))/float64(*distEvents), "input-B/event")
		}
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var (
	takeoverEvents  = flag.Int("takeover.events", 400_000, "BenchmarkTakeover: events in the input topic")
	takeoverUsers   = flag.Int("takeover.users", 200_000, "BenchmarkTakeover: users among them (the state grows with them)")
	takeoverStandby = flag.Int("takeover.standby-replicas", 1, "BenchmarkTakeover: the instances' --standby-replicas")
	takeoverLong    = flag.Bool("takeover.long-windows", false, "BenchmarkTakeover: rules with day-long windows (longWindowRules), whose state holds every user and device, instead of the bundled rules")
)

// longWindowRules keep state for every user and device seen that day: the
// distinct devices of a user over a day, a device's requests over a
// sliding hour.
const longWindowRules = `
watermark: {out_of_orderness: 2s}
rules:
  - {name: user-devices-day, key: [user], window: {type: tumbling, size: 24h}, aggregate: "distinct:device", threshold: 5, action: review}
  - {name: device-hour, key: [device], window: {type: sliding, size: 1h, slide: 1m}, aggregate: count, threshold: 1000, action: review}
`

// tookAt finds when an instance took partitions, and how long restoring
// them took.
var tookAt = regexp.MustCompile(`time=(\S+) level=INFO msg="took partitions" generation=(\d+)`)

// BenchmarkTakeover measures how long a killed instance's partitions stay
// without an owner: two instances share a job over an input already in
// its topic; once they have processed it, the one holding the input is
// killed (SIGKILL), and the time until the other has taken every
// partition, its state restored from the changelog, is takeover-s. It is
// the session timeout (the group notices the death), the rebalance and the
// restore; state-MiB is what was restored.
//
//	go test ./stream/ -run '^$' -bench BenchmarkTakeover -benchtime 1x [-takeover.events N -takeover.users N]
func BenchmarkTakeover(b *testing.B) {
	o := gen.DefaultOptions()
	o.Events, o.Users = *takeoverEvents, *takeoverUsers
	var buf bytes.Buffer
	if _, err := gen.Generate(&buf, o); err != nil {
		b.Fatal(err)
	}
	bin := buildBinary(b)
	rulesFile := bundledRules
	if *takeoverLong {
		rulesFile = filepath.Join(b.TempDir(), "rules.yaml")
		if err := os.WriteFile(rulesFile, []byte(longWindowRules), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		addr := testbroker.Start(b, 1)
		if st, err := produce.Run(context.Background(), produce.Options{File: "-", Stdin: bytes.NewReader(buf.Bytes()),
			Brokers: []string{addr}}); err != nil || st.Failed != 0 {
			b.Fatalf("produce: %+v %v", st, err)
		}
		var cmds []*exec.Cmd
		var logs []*testinput.LockedBuffer
		var dirs []string
		for i := range 2 {
			dir := b.TempDir()
			cmd, l := startProcess(b, bin, "run", "--distributed", "--rules", rulesFile, "--brokers", addr,
				"--state-dir", dir, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", 19700+i),
				"--checkpoint-interval", "1s", "--repartition-partitions", "4", "--standby-replicas", strconv.Itoa(*takeoverStandby))
			cmds, logs, dirs = append(cmds, cmd), append(logs, l), append(dirs, dir)
		}
		// Both hold partitions, and the input is processed.
		// At least 10,000 events a second, on a busy machine.
		wait := max(5*time.Minute, time.Duration(*takeoverEvents/10_000)*time.Second)
		for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the instances did not process the input:\n%s\n%s", logs[0], logs[1])
			}
			if lastGeneration(logs[0].String()) == lastGeneration(logs[1].String()) && lastGeneration(logs[0].String()) > 0 &&
				metricAt(b, 19700, "riskstream_routed_records_total")+metricAt(b, 19701, "riskstream_routed_records_total") >= float64(*takeoverEvents) {
				break
			}
		}
		time.Sleep(3 * time.Second) // the state processed and checkpointed
		victim := 0
		if took := tookInput.FindAllStringSubmatch(logs[1].String(), -1); len(took) > 0 && took[len(took)-1][1] == "0" {
			victim = 1
		}
		survivor := 1 - victim
		before := lastGeneration(logs[survivor].String())
		killed := time.Now()
		cmds[victim].Process.Signal(syscall.SIGKILL)
		cmds[victim].Wait()
		var took time.Time
		for deadline := time.Now().Add(2 * time.Minute); took.IsZero(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("the survivor never took the partitions over:\n%s", logs[survivor])
			}
			for _, m := range tookAt.FindAllStringSubmatch(logs[survivor].String(), -1) {
				if g, _ := strconv.Atoi(m[2]); g > before {
					took, _ = time.Parse(time.RFC3339Nano, m[1])
				}
			}
		}
		restored := 0.0
		for _, m := range restoredBytes.FindAllStringSubmatch(logs[survivor].String(), -1) {
			n, _ := strconv.ParseFloat(m[2], 64)
			restored += n
		}
		cmds[survivor].Process.Signal(syscall.SIGTERM)
		cmds[survivor].Wait()
		b.ReportMetric(took.Sub(killed).Seconds(), "takeover-s")
		b.ReportMetric(restored/(1<<20), "restored-MiB")
		b.ReportMetric(float64(dirSize(b, dirs[survivor]))/(1<<20), "survivor-state-MiB")
	}
}

var restoredBytes = regexp.MustCompile(`from its changelog"? partition=(\d+) records=\d+ bytes=(\d+)`)

// lastGeneration returns the generation of an instance's last "took
// partitions", 0 before any.
func lastGeneration(logs string) int {
	m := tookAt.FindAllStringSubmatch(logs, -1)
	if len(m) == 0 {
		return 0
	}
	g, _ := strconv.Atoi(m[len(m)-1][2])
	return g
}

// metricAt returns the sum of a metric's series served on a local port, 0
// when it cannot be read.
func metricAt(t testing.TB, port int, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name) {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				sum += v
			}
		}
	}
	return sum
}

// dirSize returns the bytes of the files under dir.
func dirSize(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

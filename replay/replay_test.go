package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/expected from this replay")

const (
	bundledRules = "../testdata/rules.yaml"
	bundledInput = "../testdata/requests.jsonl.gz"
)

// bundledOptions are the gen flags that made testdata/requests.jsonl.gz:
//
//	riskstream gen --events 20000 --users 2000 --seed 1 --rate 200 --bursts 0.2 \
//	  --scrapes 0.03 --late 0.002 --invalid 0.002 --out testdata/requests.jsonl.gz
func bundledOptions() gen.Options {
	o := gen.DefaultOptions()
	o.Events, o.Users, o.Seed, o.Rate = 20000, 2000, 1, 200
	o.BurstRate, o.ScrapeRate, o.LateFraction, o.InvalidFraction = 0.2, 0.03, 0.002, 0.002
	return o
}

func replay(t *testing.T, opts Options) *Summary {
	t.Helper()
	sum, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestBundledReplay checks replay of the bundled workload against the
// expected outputs in testdata/expected (go test ./replay -update rewrites
// them after a deliberate change).
func TestBundledReplay(t *testing.T) {
	out := t.TempDir()
	sum := replay(t, Options{Config: testinput.Rules(t), Inputs: []string{bundledInput}, OutDir: out})
	got := testinput.ReadOutputs(t, out)
	for _, n := range testinput.OutputNames {
		path := filepath.Join("..", "testdata", "expected", n)
		if *update {
			if err := os.WriteFile(path, got[n], 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[n], want) {
			t.Errorf("%s differs from testdata/expected/%s (%d vs %d bytes); rerun with -update after checking the change",
				n, n, len(got[n]), len(want))
		}
	}
	// Every kind of output occurs but skew (the bundled input never
	// degrades a source), so the comparison above covers the others;
	// skew.jsonl's records are checked by sink's and the report's tests.
	if sum.Records != 20000 || sum.Invalid == 0 || sum.Late == 0 || sum.WindowsFired == 0 {
		t.Errorf("summary %+v: want 20000 records with invalid, late and fired windows", sum)
	}
	for i, n := range sum.Decisions {
		if n == 0 {
			t.Errorf("rule %d made no decision on the bundled workload", i)
		}
	}
}

// TestReplayDeterministic replays the bundled workload twice, the second
// time with a 1% cache so that most state goes through Pebble, and expects
// byte-identical outputs.
// TestReplayDeterministic replays the bundled input with a large cache on
// one shard, and with a 50-slot cache on three shards while showing
// progress (the merge reads the counts while the shards run): the outputs
// must be the same bytes.
func TestReplayDeterministic(t *testing.T) {
	cfg := testinput.Rules(t)
	a, b := t.TempDir(), t.TempDir()
	replay(t, Options{Config: cfg, Inputs: []string{bundledInput}, OutDir: a, Shards: 1})
	var progress bytes.Buffer
	clock := time.Unix(0, 0)
	tick := func() time.Time { clock = clock.Add(time.Second); return clock }
	replay(t, Options{Config: cfg, Inputs: []string{bundledInput}, OutDir: b, CacheSlots: 50, StateDir: t.TempDir(),
		Shards: 3, Progress: &progress, Now: tick})
	ga, gb := testinput.ReadOutputs(t, a), testinput.ReadOutputs(t, b)
	for _, n := range testinput.OutputNames {
		if !bytes.Equal(ga[n], gb[n]) {
			t.Errorf("%s differs between one shard with a large cache and three with 50 slots", n)
		}
	}
	if !strings.Contains(progress.String(), "20000 records") {
		t.Errorf("progress does not reach the 20000 records: %q", progress.String())
	}
}

// TestBundledInputIsGenerated keeps the bundled workload reproducible: it is
// exactly what gen writes for the documented flags.
func TestBundledInputIsGenerated(t *testing.T) {
	have := testinput.Bundled(t)
	var want bytes.Buffer
	if _, err := gen.Generate(&want, bundledOptions()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want.Bytes()) {
		t.Fatal("testdata/requests.jsonl.gz is not what gen writes for the documented flags")
	}
}

// TestGeneratedWorkloadNotSkewed: gen's workloads have perfect clocks unless
// told otherwise, so a replay of one degrades no source, late records
// included (a denser share of them than the default too), and reports
// them as late.
func TestGeneratedWorkloadNotSkewed(t *testing.T) {
	cfg := testinput.Rules(t)
	for name, late := range map[string]float64{"default": gen.DefaultOptions().LateFraction, "late 1%": 0.01} {
		t.Run(name, func(t *testing.T) {
			o := gen.DefaultOptions()
			o.LateFraction = late
			var in bytes.Buffer
			st, err := gen.Generate(&in, o)
			if err != nil {
				t.Fatal(err)
			}
			sum := replay(t, Options{Config: cfg, Inputs: []string{"-"}, Stdin: &in, OutDir: t.TempDir()})
			for _, src := range sum.Sources {
				if src.Degraded || src.Transitions > 0 || src.Skew < -time.Second {
					t.Errorf("source %s degraded (skew %v, %d transitions)", src.Source, src.Skew, src.Transitions)
				}
			}
			if len(sum.Sources) != o.Sources || sum.Retimed != 0 {
				t.Errorf("%d sources, %d events re-timed; want %d and none", len(sum.Sources), sum.Retimed, o.Sources)
			}
			if st.Late > 100 && sum.Late == 0 {
				t.Errorf("none of the %d late records generated is late in the replay", st.Late)
			}
		})
	}
}

// TestReplayInputs covers stdin, plain files, several inputs as one stream,
// blank lines and CRLF, and a missing file.
func TestReplayInputs(t *testing.T) {
	cfg := testinput.Rules(t)
	dir := t.TempDir()
	lines := []string{
		`{"id":"a","ts":1000,"api":"/pay","user":"u","latency_ms":1}`,
		``,
		`{"id":"b","ts":2000,"api":"/pay","user":"u","latency_ms":2}` + "\r",
		`not json`,
	}
	plain := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(plain, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "new", "out")
	sum := replay(t, Options{Config: cfg, Inputs: []string{plain, "-"}, OutDir: out,
		Stdin: strings.NewReader(strings.Join(lines, "\n") + "\n")})
	if sum.Records != 6 || sum.Invalid != 2 {
		t.Fatalf("records %d invalid %d, want 6 and 2", sum.Records, sum.Invalid)
	}
	dlq := testinput.ReadOutputs(t, out)["dlq.jsonl"]
	for _, want := range []string{`"file":"` + plain + `","line":4`, `"file":"-","line":4`} {
		if !bytes.Contains(dlq, []byte(want)) {
			t.Errorf("dlq lacks %s:\n%s", want, dlq)
		}
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Inputs: []string{filepath.Join(dir, "missing.jsonl")}, OutDir: out}); err == nil {
		t.Error("a missing input must fail the replay")
	}
}

// TestReplayGzipByContent: a gzip input is decompressed whatever its name,
// from a file or stdin, and gives the same outputs as the same records in
// a .gz file; a .gz file that is not gzip is refused.
func TestReplayGzipByContent(t *testing.T) {
	cfg := testinput.Rules(t)
	gz, err := os.ReadFile(bundledInput)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	renamed := filepath.Join(dir, "capture.jsonl")
	if err := os.WriteFile(renamed, gz, 0o644); err != nil {
		t.Fatal(err)
	}
	// The bundled workload is small: keep the comparison to two files.
	want := replay(t, Options{Config: cfg, Inputs: []string{bundledInput}, OutDir: filepath.Join(dir, "want")})
	wantOut := testinput.ReadOutputs(t, filepath.Join(dir, "want"))
	for name, opts := range map[string]Options{
		"file":  {Inputs: []string{renamed}},
		"stdin": {Inputs: []string{"-"}, Stdin: bytes.NewReader(gz)},
	} {
		opts.Config, opts.OutDir = cfg, filepath.Join(dir, name)
		sum := replay(t, opts)
		if sum.Records != want.Records || sum.Invalid != want.Invalid {
			t.Errorf("%s: records %d invalid %d, want %d and %d", name, sum.Records, sum.Invalid, want.Records, want.Invalid)
		}
		if got := testinput.ReadOutputs(t, opts.OutDir); !bytes.Equal(got["decisions.jsonl"], wantOut["decisions.jsonl"]) {
			t.Errorf("%s: decisions differ from the .gz input's", name)
		}
	}
	notGzip := filepath.Join(dir, "plain.jsonl.gz")
	os.WriteFile(notGzip, []byte(`{"id":"a","ts":1}`+"\n"), 0o644)
	if _, err := Run(context.Background(), Options{Config: cfg, Inputs: []string{notGzip}, OutDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a .gz file that is not gzip: err = %v, want a gzip error", err)
	}
}

// TestReplayLongLine feeds a record longer than the reader's buffer.
func TestReplayLongLine(t *testing.T) {
	cfg := testinput.Rules(t)
	long := `{"id":"x","ts":1000,"api":"/pay","user":"u","latency_ms":1,"pad":"` + strings.Repeat("y", 3<<20) + `"}`
	sum := replay(t, Options{Config: cfg, Inputs: []string{"-"}, OutDir: t.TempDir(),
		Stdin: strings.NewReader(long + "\n" + long)})
	if sum.Records != 2 || sum.Invalid != 0 {
		t.Fatalf("records %d invalid %d, want 2 valid", sum.Records, sum.Invalid)
	}
}

// TestReplayStopsMidway: an input that turns unreadable after several
// chunks, or a context cancelled while an endless input flows, with
// batches on every stage of the pipeline, stops the replay with an error,
// and leaves no goroutine behind.
func TestReplayStopsMidway(t *testing.T) {
	cfg := testinput.Rules(t)
	var plain bytes.Buffer
	for i := 0; plain.Len() < 6*memory.MaxChunk; i++ {
		fmt.Fprintf(&plain, `{"id":"r%d","ts":%d,"api":"/pay","user":"u%d","latency_ms":1}`+"\n", i, 1000+i, i%50)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain.Bytes())
	zw.Close()
	// Past the first chunks, the compressed stream is garbage.
	b := gz.Bytes()
	for i := len(b) / 2; i < len(b); i++ {
		b[i] ^= 0x5a
	}
	broken := filepath.Join(t.TempDir(), "broken.jsonl.gz")
	if err := os.WriteFile(broken, b, 0o644); err != nil {
		t.Fatal(err)
	}
	noLeak := func(t *testing.T, before int) {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Fatalf("%d goroutines after the replay, %d before", n, before)
		}
	}
	t.Run("broken input", func(t *testing.T) {
		before := runtime.NumGoroutine()
		_, err := Run(context.Background(), Options{Config: cfg, Inputs: []string{broken}, OutDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), broken) {
			t.Fatalf("err = %v, want a read error naming %s", err, broken)
		}
		noLeak(t, before)
	})
	t.Run("cancelled", func(t *testing.T) {
		before := runtime.NumGoroutine()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := Run(ctx, Options{Config: cfg, Inputs: []string{"-"}, OutDir: t.TempDir(),
			Stdin: endless(plain.Bytes())})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's", err)
		}
		noLeak(t, before)
	})
}

// endless returns a reader that repeats b forever.
func endless(b []byte) io.Reader {
	off := 0
	return readerFunc(func(p []byte) (int, error) {
		n := copy(p, b[off:])
		off = (off + n) % len(b)
		return n, nil
	})
}

type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestReplayLineNumbersAcrossChunks: records are read in chunks cut at
// line ends; the dlq's line numbers must still be the file's, in every
// chunk, with a line longer than a chunk among them.
func TestReplayLineNumbersAcrossChunks(t *testing.T) {
	cfg := testinput.Rules(t)
	var in bytes.Buffer
	var want []string
	for n := 1; in.Len() < 3*memory.MaxChunk; n++ {
		switch {
		case n%997 == 0:
			in.WriteString("not json\n")
			want = append(want, fmt.Sprintf(`"line":%d}`, n))
		case n == 3000:
			fmt.Fprintf(&in, `{"id":"long","ts":1000,"api":"/pay","user":"u","pad":"%s"}`+"\n", strings.Repeat("y", 2*memory.MaxChunk))
		default:
			fmt.Fprintf(&in, `{"id":"r%d","ts":%d,"api":"/pay","user":"u%d","latency_ms":1}`+"\n", n, 1000+n, n%50)
		}
	}
	out := t.TempDir()
	replay(t, Options{Config: cfg, Inputs: []string{"-"}, OutDir: out, Stdin: bytes.NewReader(in.Bytes())})
	dlq := strings.Split(strings.TrimSpace(string(testinput.ReadOutputs(t, out)["dlq.jsonl"])), "\n")
	if len(dlq) != len(want) {
		t.Fatalf("%d dlq records, want %d", len(dlq), len(want))
	}
	for i := range want {
		if !strings.HasSuffix(dlq[i], want[i]) {
			t.Fatalf("dlq record %d is %s, want it to end with %s", i, dlq[i], want[i])
		}
	}
}

// TestFailedReplayKeepsOutputs: a replay that fails (an input that is a
// folder; a truncated .gz) returns an error and leaves the outputs of the
// run before it as they were.
func TestFailedReplayKeepsOutputs(t *testing.T) {
	gz, err := os.ReadFile(bundledInput)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "cut.jsonl.gz")
	if err := os.WriteFile(truncated, gz[:len(gz)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for name, input := range map[string]string{"folder": t.TempDir(), "truncated gzip": truncated} {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			replay(t, Options{Config: testinput.Rules(t), Inputs: []string{bundledInput}, OutDir: out})
			before := readFolder(t, out)
			if len(before["decisions.jsonl"]) == 0 {
				t.Fatal("the first replay decided nothing")
			}
			_, err := Run(context.Background(), Options{Config: testinput.Rules(t), Inputs: []string{input}, OutDir: out})
			if err == nil {
				t.Fatal("the replay succeeded")
			}
			t.Log(err)
			if after := readFolder(t, out); !maps.EqualFunc(after, before, bytes.Equal) {
				t.Errorf("the failed replay changed the outputs: %d files, was %d", len(after), len(before))
			}
		})
	}
}

// readFolder reads every file of a folder.
func readFolder(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

// TestAttackMostlyDecided: gen's attack phase is what the decision-heavy
// benchmark relies on: replayed with the example rules, or with the key
// scale ones (testdata/bench/keyscale.yaml), most events of a workload
// that is all attack trip pay-burst.
func TestAttackMostlyDecided(t *testing.T) {
	for _, file := range []string{bundledRules, "../testdata/bench/keyscale.yaml"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			cfg, err := rules.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			o := gen.DefaultOptions()
			o.Events, o.Users = 100_000, 100_000
			o.UserDist, o.DevicesPerUser = gen.UniformUsers, 1
			o.AttackDuration, o.AttackShare, o.AttackUsers = time.Hour, 0.8, 1000
			var in bytes.Buffer
			if _, err := gen.Generate(&in, o); err != nil {
				t.Fatal(err)
			}
			sum := replay(t, Options{Config: cfg, Inputs: []string{"-"}, Stdin: &in, OutDir: t.TempDir()})
			if got := float64(sum.Decisions[0]) / float64(sum.Records); got < 0.6 {
				t.Errorf("pay-burst decided %d of %d events (%.2f), want most", sum.Decisions[0], sum.Records, got)
			}
		})
	}
}

// TestReplayMemoryBudget replays a workload whose window state (about
// 700,000 states, 90 MB in the cold store's encoding) is several times
// what a 64 MiB budget leaves it, so that most states are spilled to
// Pebble and read back: the outputs are the bytes of a replay within the
// default budget. In the fault-injection suite: it reads back from Pebble
// for seconds.
func TestReplayMemoryBudget(t *testing.T) {
	if testing.Short() || !kafkatest.Faults() {
		t.Skipf("a long replay: set %s=1", kafkatest.FaultsEnv)
	}
	cfg, err := rules.Load("../testdata/bench/keyscale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	input, _ := testinput.KeyScaleWorkload(t)
	a, b := t.TempDir(), t.TempDir()
	if sum := replay(t, Options{Config: cfg, Inputs: []string{input}, OutDir: a}); sum.Spilled != 0 {
		t.Errorf("the default budget spilled %d states", sum.Spilled)
	}
	sum := replay(t, Options{Config: cfg, Inputs: []string{input}, OutDir: b, MemoryBytes: memory.Min, StateDir: t.TempDir()})
	if sum.Spilled < 100_000 {
		t.Errorf("%d MiB spilled only %d states", memory.Min>>20, sum.Spilled)
	}
	ga, gb := testinput.ReadOutputs(t, a), testinput.ReadOutputs(t, b)
	for _, n := range testinput.OutputNames {
		if !bytes.Equal(ga[n], gb[n]) {
			t.Errorf("%s differs between the default memory budget and %d MiB", n, memory.Min>>20)
		}
	}
	if len(ga["decisions.jsonl"]) == 0 || len(ga["heatmaps.jsonl"]) == 0 {
		t.Fatal("the workload made no decisions or heatmaps to compare")
	}
}

// TestReplayDedupe: a replay of the bundled input with records sent again
// (each a few records after the first, as a producer's retry) makes the
// same outputs as the input itself, and counts the records dropped.
func TestReplayDedupe(t *testing.T) {
	lines := bytes.Split(bytes.TrimSpace(testinput.Bundled(t)), []byte("\n"))
	r := rand.New(rand.NewPCG(3, 4))
	var retried [][]byte
	sent := 0
	for i, l := range lines {
		retried = append(retried, l)
		if j := i - r.IntN(50); j >= 0 && r.IntN(20) == 0 {
			retried = append(retried, lines[j])
			sent++
		}
	}
	input := filepath.Join(t.TempDir(), "retried.jsonl")
	if err := os.WriteFile(input, append(bytes.Join(retried, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	want, got := t.TempDir(), t.TempDir()
	replay(t, Options{Config: testinput.Rules(t), Inputs: []string{bundledInput}, OutDir: want})
	sum := replay(t, Options{Config: testinput.Rules(t), Inputs: []string{input}, OutDir: got})
	w, g := testinput.ReadOutputs(t, want), testinput.ReadOutputs(t, got)
	// An invalid record is not taken, so not remembered: its dlq record
	// comes again.
	dlqAgain := bytes.Count(g["dlq.jsonl"], []byte("\n")) - bytes.Count(w["dlq.jsonl"], []byte("\n"))
	if sum.Duplicates+int64(dlqAgain) != int64(sent) || sum.Duplicates == 0 {
		t.Fatalf("the replay dropped %d records and sent %d to the dlq again, %d were sent again", sum.Duplicates, dlqAgain, sent)
	}
	// Late records name their file and line, which the records sent again
	// move.
	lineNo := regexp.MustCompile(`"file":"[^"]*","line":\d+`)
	for _, name := range []string{"decisions.jsonl", "heatmaps.jsonl", "late.jsonl"} {
		if !bytes.Equal(lineNo.ReplaceAll(w[name], nil), lineNo.ReplaceAll(g[name], nil)) {
			t.Errorf("%s differs from the replay without records sent again", name)
		}
	}
}

// TestReplayTopicRefused: a replay of a topic on brokers nothing listens
// at says so and what to check, as produce does, not a bare dial error.
func TestReplayTopicRefused(t *testing.T) {
	_, err := Run(context.Background(), Options{Config: testinput.Rules(t), Brokers: []string{kafkatest.FreeAddr(t)}, Topic: "requests", OutDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "replay of topic requests: brokers") || !strings.Contains(err.Error(), "nothing listens there: check --brokers") {
		t.Fatalf("a replay of a topic with no broker: %v", err)
	}
}

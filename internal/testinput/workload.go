package testinput

import (
	"bufio"
	"os"
	"path/filepath"
	"testing"

	"github.com/riskstream/riskstream/gen"
	"github.com/riskstream/riskstream/rules"
)

// OutputNames are the files a replay writes.
var OutputNames = []string{"decisions.jsonl", "heatmaps.jsonl", "late.jsonl", "dlq.jsonl", "skew.jsonl"}

// Rules returns the README's rules, testdata/rules.yaml.
func Rules(t testing.TB) *rules.Config { t.Helper(); return rulesFile(t, "rules.yaml") }

// rulesFile returns the rules of testdata/name.
func rulesFile(t testing.TB, name string) *rules.Config {
	t.Helper()
	cfg, err := rules.Load(filepath.Join(Root(t), "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// ReloadedRules returns testdata/rules-reloaded.yaml, the README's rules
// after an edit that keeps, restarts, removes and adds a rule.
func ReloadedRules(t testing.TB) *rules.Config {
	t.Helper()
	return rulesFile(t, "rules-reloaded.yaml")
}

// ReadOutputs returns the contents of replay's output files in dir, by
// name (OutputNames).
func ReadOutputs(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range OutputNames {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// WriteWorkload writes a generated workload to path.
func WriteWorkload(t testing.TB, path string, o gen.Options) {
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

// KeyScaleWorkload writes a workload whose state is many times the
// smallest memory budget: 300,000 events of a million users drawn
// uniformly, one device each, an amount on every request. It returns the
// file and the number of events.
func KeyScaleWorkload(t testing.TB) (string, int) {
	t.Helper()
	input := filepath.Join(t.TempDir(), "in.jsonl")
	o := gen.DefaultOptions()
	o.Events, o.Users, o.Rate = 300_000, 1_000_000, 20_000
	o.UserDist, o.DevicesPerUser, o.AmountShare = gen.UniformUsers, 1, 1
	WriteWorkload(t, input, o)
	return input, o.Events
}

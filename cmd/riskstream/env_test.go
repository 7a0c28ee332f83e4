package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"

	"github.com/spf13/pflag"
)

// runWithStderr executes the CLI with args, returning stdout, stderr and
// the error main would print.
func runWithStderr(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(""))
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

// TestFlagsFromEnv: every flag can come from RISKSTREAM_<NAME>, a required
// one included; the command line wins; a bad value names its variable.
func TestFlagsFromEnv(t *testing.T) {
	dir := t.TempDir()
	gen, err := run(t, "", "gen", "--events", "50")
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(gen), 0o644)
	t.Setenv("RISKSTREAM_RULES", "../../testdata/rules.yaml")
	t.Setenv("RISKSTREAM_OUT", filepath.Join(dir, "from-env"))
	t.Setenv("RISKSTREAM_PROGRESS", "off")
	if out, err := run(t, "", "replay", in); err != nil || !strings.Contains(out, "records   50") {
		t.Fatalf("replay with --rules from the environment: %q, %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "from-env", "decisions.jsonl")); err != nil {
		t.Errorf("--out from RISKSTREAM_OUT: %v", err)
	}
	if _, err := run(t, "", "replay", "--out", filepath.Join(dir, "from-flag"), in); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "from-flag", "decisions.jsonl")); err != nil {
		t.Errorf("the --out flag did not win over RISKSTREAM_OUT: %v", err)
	}
	t.Setenv("RISKSTREAM_SHARDS", "many")
	if _, err := run(t, "", "replay", in); err == nil || !strings.Contains(err.Error(), "$RISKSTREAM_SHARDS") {
		t.Errorf("a bad RISKSTREAM_SHARDS: %v", err)
	}
}

// TestEnvOfOneCommand: a flag whose meaning differs between commands is
// read from the command's own variable: RISKSTREAM_TOPIC exported for run
// does not make replay FILE a replay of a topic, nor does RISKSTREAM_RATE
// set gen's rate.
func TestEnvOfOneCommand(t *testing.T) {
	t.Setenv("RISKSTREAM_TOPIC", "requests")
	t.Setenv("RISKSTREAM_RATE", "nonsense")
	gen, err := run(t, "", "gen", "--events", "20")
	if err != nil {
		t.Fatalf("gen with RISKSTREAM_RATE exported for produce: %v", err)
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(in, []byte(gen), 0o644)
	if out, err := run(t, "", "replay", "--rules", "../../testdata/rules.yaml", "--progress", "off",
		"--out", t.TempDir(), in); err != nil || !strings.Contains(out, "records   20") {
		t.Fatalf("replay FILE with RISKSTREAM_TOPIC exported for run: %q, %v", out, err)
	}
	t.Setenv("RISKSTREAM_GEN_RATE", "nonsense")
	if _, err := run(t, "", "gen", "--events", "20"); err == nil || !strings.Contains(err.Error(), "$RISKSTREAM_GEN_RATE") {
		t.Errorf("a bad RISKSTREAM_GEN_RATE: %v", err)
	}
}

// TestProduceFromEnv: a list flag (--brokers) and a boolean one
// (--retime) from the environment.
func TestProduceFromEnv(t *testing.T) {
	b := startInputBroker(t)
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(`{"id":"a","ts":1732150000000,"ingest_ts":1732150000001}`+"\n"), 0o644)
	t.Setenv("RISKSTREAM_BROKERS", b.Addr()+","+b.Addr()) // a list: one address twice
	t.Setenv("RISKSTREAM_RETIME", "true")
	// Read only with a SASL mechanism: it does not stop a plaintext run.
	t.Setenv("RISKSTREAM_SASL_PASSWORD", "secret")
	start := time.Now()
	if _, err := run(t, "", "produce", file); err != nil {
		t.Fatal(err)
	}
	m := kafkatest.ReadMessages(t, nil, b.Addr(), "requests", 0, 1, 10*time.Second)[0]
	if d := m.Time.Sub(start); d < -time.Second || d > 10*time.Second {
		t.Errorf("record time %v, %v from the start: RISKSTREAM_RETIME did not retime it", m.Time, d)
	}
}

// TestLogFormat: --log-format json (or RISKSTREAM_LOG_FORMAT) writes one
// JSON object a line on stderr; another format is refused.
func TestLogFormat(t *testing.T) {
	check := func(args ...string) {
		t.Helper()
		_, stderr, err := runWithStderr(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		line, _, _ := strings.Cut(stderr, "\n")
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["msg"] != "generated" || rec["level"] != "INFO" {
			t.Errorf("%v: stderr is not JSON logs: %q (%v)", args, stderr, err)
		}
	}
	check("gen", "--events", "5", "--log-format", "json")
	t.Setenv("RISKSTREAM_LOG_FORMAT", "json")
	check("gen", "--events", "5")
	if _, _, err := runWithStderr(t, "gen", "--events", "5", "--log-format", "xml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format xml: %v", err)
	}
	// The command line wins over the environment.
	if _, stderr, _ := runWithStderr(t, "gen", "--events", "5", "--log-format", "text"); !strings.HasPrefix(stderr, "time=") {
		t.Errorf("--log-format text with RISKSTREAM_LOG_FORMAT=json: %q", stderr)
	}
}

// TestEnvInHelp: every command's help says how the environment sets its
// flags, and every flag names its variable.
func TestEnvInHelp(t *testing.T) {
	root := newRootCmd()
	for _, c := range append(root.Commands(), root) {
		if !strings.Contains(c.Long, "RISKSTREAM_STATE_DIR") {
			t.Errorf("%s: the help does not explain the environment variables", c.Name())
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(f.Usage, "$"+envName(c.Name(), f.Name)) {
				t.Errorf("%s --%s: the usage does not name $%s", c.Name(), f.Name, envName(c.Name(), f.Name))
			}
		})
	}
	out, err := run(t, "", "run", "--help")
	if err != nil || !strings.Contains(out, "[$RISKSTREAM_STATE_DIR]") {
		t.Errorf("run --help: %v\n%s", err, out)
	}
}

// TestCheckArgs: check with the wrong number of files says what it takes.
func TestCheckArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--diff", "a.yaml"}, "check --diff takes two rules files, OLD and NEW, got 1"},
		{[]string{"check", "a.yaml", "b.yaml"}, "check takes one rules file, got 2 (two are compared with --diff OLD NEW)"},
	} {
		if _, _, err := runWithStderr(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

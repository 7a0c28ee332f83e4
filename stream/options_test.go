package stream

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/memory"
	"github.com/riskstream/riskstream/replay"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
)

// TestRunOptionsValidate: every option that cannot work is reported, all
// of them at once, by what is wrong; options with their defaults and what
// Run requires pass; EnsureDefaults gives the exported defaults.
func TestRunOptionsValidate(t *testing.T) {
	cfg := &rules.Config{}
	valid := func() RunOptions {
		o := RunOptions{Config: cfg, StateDir: t.TempDir()}
		o.EnsureDefaults()
		return o
	}
	if o := valid(); o.Validate() != nil {
		t.Fatalf("valid options refused: %v", o.Validate())
	}
	o := valid()
	if o.Topic != DefaultTopic || o.Group != DefaultGroup || o.CheckpointInterval != DefaultCheckpointInterval ||
		o.PartitionDiscovery != DefaultPartitionDiscovery || o.MetricLabelLimit != DefaultMetricLabelLimit ||
		o.StandbyReplicas != DefaultStandbyReplicas || o.RepartitionPartitions != DefaultRepartitionPartitions ||
		o.PartitionWait != DefaultPartitionWait || o.MemoryBytes != memory.Default || o.MaxMessageBytes != sink.DefaultMaxMessageBytes {
		t.Fatalf("defaults: %+v", o)
	}
	for _, c := range []struct {
		name   string
		change func(*RunOptions)
		want   []string
	}{
		{"no rules", func(o *RunOptions) { o.Config = nil }, []string{"needs rules"}},
		{"no state", func(o *RunOptions) { o.StateDir = "" }, []string{"needs a state directory"}},
		{"small messages", func(o *RunOptions) { o.MaxMessageBytes = 10 }, []string{"maximum message size of 10 bytes"}},
		{"distributed, embedded", func(o *RunOptions) { o.Distributed = true }, []string{"--distributed needs --brokers"}},
		{"security, embedded", func(o *RunOptions) { o.Security = kafkaconn.Options{SASL: kafkaconn.SASLOptions{Mechanism: "PLAIN"}} },
			[]string{"TLS and SASL need --brokers"}},
		{"all at once", func(o *RunOptions) { o.Config, o.StateDir, o.MaxMessageBytes = nil, "", 1 },
			[]string{"needs rules", "needs a state directory", "maximum message size of 1 bytes"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := valid()
			c.change(&o)
			checkProblems(t, o.Validate(), c.want)
		})
	}
	o = valid()
	o.Security.SASL.Mechanism = "PLAIN"
	if err := o.Validate(); !errors.Is(err, ErrEmbeddedSecurity) {
		t.Fatalf("security without brokers: %v, want ErrEmbeddedSecurity", err)
	}
}

// TestReplayOptionsValidate: missing rules, inputs both or neither given,
// a topic without brokers, and input files missing or folders, all
// reported at once.
func TestReplayOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &rules.Config{}
	for _, c := range []struct {
		name string
		o    replay.Options
		want []string
	}{
		{"files", replay.Options{Config: cfg, Inputs: []string{file, "-"}}, nil},
		{"topic", replay.Options{Config: cfg, Topic: "requests", Brokers: []string{"127.0.0.1:9092"}}, nil},
		{"no rules", replay.Options{Inputs: []string{file}}, []string{"needs rules"}},
		{"neither", replay.Options{Config: cfg}, []string{"either input files or a topic"}},
		{"both", replay.Options{Config: cfg, Inputs: []string{file}, Topic: "requests", Brokers: []string{"b:9092"}}, []string{"either input files or a topic"}},
		{"no brokers", replay.Options{Config: cfg, Topic: "requests"}, []string{"needs its brokers"}},
		{"bad files", replay.Options{Config: cfg, Inputs: []string{filepath.Join(dir, "gone.jsonl"), dir}},
			[]string{"gone.jsonl: no such file", "is a folder"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.EnsureDefaults()
			checkProblems(t, c.o.Validate(), c.want)
		})
	}
	var o replay.Options
	o.EnsureDefaults()
	if o.OutDir != "out" || o.MemoryBytes != memory.Default || o.Now == nil || o.Shards < 1 {
		t.Fatalf("defaults: %+v", o)
	}
}

// checkProblems checks that err reports the problems want, one line each,
// and nothing when want is empty.
func checkProblems(t *testing.T, err error, want []string) {
	t.Helper()
	switch {
	case len(want) == 0 && err != nil:
		t.Fatalf("refused: %v", err)
	case len(want) == 0:
		return
	case err == nil:
		t.Fatal("accepted")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if got := len(strings.Split(err.Error(), "\n")); got != len(want) {
		t.Errorf("%d problems reported, want %d: %q", got, len(want), err)
	}
}

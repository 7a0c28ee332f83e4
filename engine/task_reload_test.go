package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// TestTaskReloadMatchesEngine: a reload of a distributed job's rules, a
// rules message from the router of three input partitions to every
// partition, with tasks restored from checkpoints before and after it and
// messages delivered again, gives the outputs of one Engine reloaded at
// the same record: the state of the rules whose definition is unchanged
// kept, the others restarted, added or removed alike.
func TestTaskReloadMatchesEngine(t *testing.T) {
	before, after := loadTwoRules(t)
	lines := testinput.BundledLines(t)
	cut := len(lines) / 2
	record := func(i int) Record {
		p := int32(i % 3)
		return Record{Value: lines[i], Partition: p, Prov: event.Provenance{Topic: "requests", Partition: p, Offset: int64(i)}}
	}

	rec := testinput.NewRecorder()
	e, err := New(Options{Config: before, Backend: slotstore.NewMemBackend(), Output: rec})
	if err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		if i == cut {
			if _, err := e.Reload(after); err != nil {
				t.Fatal(err)
			}
		}
		rec := record(i)
		if err := e.Process(&rec, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Finish(); err != nil {
		t.Fatal(err)
	}
	want := sortedLines(rec.Take())

	for _, n := range []int{1, 3} {
		r := rand.New(rand.NewPCG(uint64(n), 1))
		out := testinput.NewRecorder()
		router, err := NewRouter(before, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		backends := make([]slotstore.Backend, n)
		tasks := make([]*Task, n)
		for k := range n {
			backends[k] = slotstore.NewMemBackend()
			if tasks[k], err = NewTask(TaskOptions{Config: before, RulesVersion: 1, Backend: backends[k], Output: out,
				Partition: k, Partitions: n, Topic: "requests"}); err != nil {
				t.Fatal(err)
			}
		}
		sent := make([][][]byte, n)
		deliver := func(k int, b []byte) {
			var m Message
			if err := DecodeMessage(b, &m); err != nil {
				t.Fatal(err)
			}
			if _, err := tasks[k].Apply(&m); err != nil {
				t.Fatal(err)
			}
		}
		send := func(k int, m *Message) {
			b := AppendMessage(nil, m)
			sent[k] = append(sent[k], b)
			deliver(k, b)
		}
		// restart makes task k anew from its checkpoint, with the rules
		// the checkpoint names.
		restart := func(k int) {
			cp, err := tasks[k].Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			version, source, err := TaskRules(cp)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := rules.Parse(fmt.Sprintf("rules version %d", version), source)
			if err != nil {
				t.Fatal(err)
			}
			if tasks[k], err = NewTask(TaskOptions{Config: cfg, RulesVersion: version, Backend: backends[k], Output: out,
				Partition: k, Partitions: n, Topic: "requests"}); err != nil {
				t.Fatal(err)
			}
			if err := tasks[k].Restore(cp); err != nil {
				t.Fatal(err)
			}
		}
		for i := range lines {
			if i == cut {
				if err := router.Reload(after); err != nil {
					t.Fatal(err)
				}
				for k := range n {
					send(k, &Message{Kind: RulesMessage, Offset: int64(i - 1), Watermark: router.Watermark(), Version: 2, Value: after.Source})
					if tasks[k].RulesVersion() != 2 {
						t.Fatalf("%d partitions: partition %d applies rules version %d after the rules message, want 2", n, k, tasks[k].RulesVersion())
					}
				}
				restart(r.IntN(n))
			}
			rec := record(i)
			into, to := (*Decoded)(nil), func(k int, m *Message) error { send(k, m); return nil }
			if r.IntN(2) == 0 { // handed over decoded, by the rules the router routes by
				into = new(Decoded)
				to = func(k int, m *Message) error {
					sent[k] = append(sent[k], AppendMessage(nil, m))
					_, err := tasks[k].ApplyDecoded(m, into)
					return err
				}
			}
			if err := route(router, &rec, into, out, to); err != nil {
				t.Fatal(err)
			}
			if r.IntN(50) == 0 { // a partition gets the messages since one again, a rules message among them
				k := r.IntN(n)
				for _, b := range sent[k][max(0, len(sent[k])-r.IntN(200)):] {
					deliver(k, b)
				}
			}
			if r.IntN(500) == 0 {
				restart(r.IntN(n))
			}
		}
		for _, task := range tasks {
			if err := task.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		got := sortedLines(out.Take())
		if split := router.Stats().Split; split > 0 {
			// Late records may differ (see checkDistributed): compare the rest.
			got, want = without(got, "late "), without(want, "late ")
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d partitions: %d output records, the engine %d; first difference:\n%s", n, len(got), len(want), firstDifference(got, want))
		}
	}
}

// TestTaskReloadsAtRulesMessage: a task takes new rules where the rules
// message comes, between two records, keeping the state of an unchanged
// rule; a rules message sent again, by a router restarted from a
// checkpoint, changes nothing.
func TestTaskReloadsAtRulesMessage(t *testing.T) {
	parse := func(threshold int) *rules.Config {
		cfg, err := rules.Parse("rules.yaml", fmt.Appendf(nil, `
rules:
  - {name: burst, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: %d, action: deny}
`, threshold))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	before, after := parse(100), parse(0) // after: every event decides
	rec := testinput.NewRecorder()
	task, err := NewTask(TaskOptions{Config: before, RulesVersion: 1, Backend: slotstore.NewMemBackend(), Output: rec,
		Partition: 0, Partitions: 1, Topic: "requests"})
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[int32]int64{}
	record := func(p int32, id string) {
		m := Message{Kind: RecordMessage, Partition: p, Offset: offsets[p], Watermark: 1000, Before: 1000, Time: 1_732_150_000_000,
			Value: fmt.Appendf(nil, `{"id":%q,"ts":1732150000000,"user":"u1"}`, id)}
		offsets[p]++
		if _, err := task.Apply(&m); err != nil {
			t.Fatal(err)
		}
	}
	sendRules := func(version int64, cfg *rules.Config) {
		if _, err := task.Apply(&Message{Kind: RulesMessage, Partition: 1, Offset: offsets[1] - 1, Version: version, Value: cfg.Source}); err != nil {
			t.Fatal(err)
		}
	}
	record(0, "a")
	record(1, "b")
	if out := rec.Take(); out != "" {
		t.Errorf("decided under the old rules:\n%s", out)
	}
	sendRules(2, after)
	if task.RulesVersion() != 2 {
		t.Fatalf("after the rules message: version %d, want 2", task.RulesVersion())
	}
	record(0, "c")
	sendRules(1, before) // an older version, sent again: ignored
	sendRules(2, after)  // the same, sent again: ignored
	record(1, "d")
	// c and d decide under the new rules; the count is the key's state,
	// kept through the reload: a and b before, then c and d.
	out := rec.Take()
	for _, want := range []string{`"event_id":"c"`, `"value":3`, `"event_id":"d"`, `"value":4`} {
		if !strings.Contains(out, want) {
			t.Errorf("after the reload the outputs lack %s:\n%s", want, out)
		}
	}
	if task.RulesVersion() != 2 {
		t.Errorf("after rules sent again: version %d, want 2", task.RulesVersion())
	}
}

// sortedLines returns out's lines, sorted.
func sortedLines(out string) []string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	slices.Sort(lines)
	return lines
}

// without returns lines but those starting with prefix.
func without(lines []string, prefix string) []string {
	return slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// firstDifference shows where two sorted lists of lines part.
func firstDifference(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("got  %s\nwant %s", got[i], want[i])
		}
	}
	return fmt.Sprintf("one list is the other's start: %d and %d lines", len(got), len(want))
}

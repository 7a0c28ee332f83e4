package engine

import (
	"reflect"
	"testing"

	"github.com/riskstream/riskstream/rules"

	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// FuzzDecodeLayout: a checkpoint's layout of the rules' state, which a
// restart reads first, decodes or fails on any bytes, and what decodes
// encodes to bytes that decode to the same.
func FuzzDecodeLayout(f *testing.F) {
	before, after := testinput.Rules(f), testinput.ReloadedRules(f)
	l := identityLayout(before)
	next, _ := l.next(after)
	f.Add(l.appendBinary(nil))
	f.Add(next.appendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeLayout(b)
		if err != nil {
			return
		}
		again, err := decodeLayout(l.appendBinary(nil))
		if err != nil || !reflect.DeepEqual(again, l) {
			t.Fatalf("%x decodes to %+v, which encodes to bytes that decode to %+v (%v)", b, l, again, err)
		}
	})
}

// FuzzTaskRestore: a state's checkpoint, which a takeover reads from a
// changelog another instance wrote, restores or fails on any bytes; its
// rules, when it names them, parse or fail alike.
func FuzzTaskRestore(f *testing.F) {
	cfg := testinput.Rules(f)
	newTask := func() *Task {
		t, err := NewTask(TaskOptions{Config: cfg, RulesVersion: 1, Backend: slotstore.NewMemBackend(), Output: testinput.NewRecorder(),
			Partition: 0, Partitions: 1, Topic: "requests"})
		if err != nil {
			f.Fatal(err)
		}
		return t
	}
	task := newTask()
	for i, l := range testinput.BundledLines(f)[:200] {
		if _, err := task.Apply(&Message{Kind: RecordMessage, Offset: int64(i), Watermark: 1732150000000, Before: 1732150000000,
			Time: 1732150000000 + int64(i), Value: l}); err != nil {
			f.Fatal(err)
		}
	}
	cp, err := task.Checkpoint()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cp)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, source, err := TaskRules(b)
		if err != nil {
			return
		}
		if source != nil {
			rules.Parse("rules version", source) // rules, or the problems with them: never a panic
		}
		_ = newTask().Restore(b) // an error, or a task: never a panic
	})
}

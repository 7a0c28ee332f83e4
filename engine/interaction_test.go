package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
)

// TestCheckpointInteractions runs the checkpoint and restore scenarios in
// testdata/checkpoint, in the style of raft's interaction tests: a script
// of what the job's loop does (events from input partitions, state written
// back between checkpoints, checkpoints, crashes and restarts) and what
// each step makes. The harness is the loop's order of things around the
// engine: a checkpoint is the engine's, then the manifest with the input
// offsets it covers, in one committed batch of a Pebble store on disk; a
// crash closes the store without committing, and the restart restores
// the last checkpoint and reads every partition again from its offset, as
// a consumer would, so that the outputs made again are shown. Commands:
//
//	rules [slots=N] [memory=N]
//	                 input: a rules file; opens the store and the engine
//	events partition=N
//	                 input: one record per line, the partition's next
//	                 offsets; output: what was made, the watermark
//	write-back n=N   writes up to N changed states to the store, uncommitted
//	checkpoint       output: the manifest's input offsets
//	manifest version=N
//	                 replaces the manifest with one of another version
//	crash            closes the store without committing; input, if any:
//	                 the rules of the restart; output: what was restored
//	                 (or why not), then what reading the partitions again
//	                 from their offsets made
//	finish           end of input
//	stats            the engine's counters
func TestCheckpointInteractions(t *testing.T) {
	datadriven.Walk(t, filepath.Join("..", "testdata", "checkpoint"), func(t *testing.T, path string) {
		h := &loopHarness{t: t, dir: t.TempDir(), rec: testinput.NewRecorder()}
		defer h.close()
		datadriven.RunTest(t, path, h.run)
	})
}

// loopHarness is the job's loop around one engine, for
// TestCheckpointInteractions.
type loopHarness struct {
	t           *testing.T
	dir         string
	rulesText   string
	slots       int
	memory      int64
	db          *state.DB
	e           *Engine
	rec         *testinput.Recorder
	log         []loggedRecord  // every record read, in the order processed
	offsets     map[int32]int64 // each partition's next offset
	checkpoints int
}

// loggedRecord is a record of an input partition.
type loggedRecord struct {
	partition int32
	offset    int64
	value     []byte
}

func (h *loopHarness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "rules":
		h.rulesText = d.Input
		for _, arg := range d.CmdArgs {
			v, err := strconv.ParseInt(arg.Vals[0], 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			switch arg.Key {
			case "slots":
				h.slots = int(v)
			case "memory":
				h.memory = v
			}
		}
		if err := h.open(h.rulesText); err != nil {
			return err.Error() + "\n"
		}
		h.offsets = map[int32]int64{}
		return "ok\n"
	case "events":
		var partition int
		d.ScanArgs(t, "partition", &partition)
		p := int32(partition)
		for _, l := range strings.Split(d.Input, "\n") {
			r := loggedRecord{partition: p, offset: h.offsets[p], value: []byte(l)}
			h.log = append(h.log, r)
			h.process(r)
		}
		return h.rec.Take() + wmLine(h.e)
	case "write-back":
		var n int
		d.ScanArgs(t, "n", &n)
		if err := h.e.WriteBack(n); err != nil {
			t.Fatal(err)
		}
		return "ok\n"
	case "checkpoint":
		cp, err := h.e.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		m := checkpoint.Manifest{Engine: cp, Inputs: h.inputs()}
		if err := checkpoint.Write(h.db, &m); err != nil {
			t.Fatal(err)
		}
		if err := h.db.Commit(true); err != nil {
			t.Fatal(err)
		}
		h.checkpoints++
		return "inputs " + formatOffsets(m.Inputs) + "\n"
	case "manifest":
		var version int
		d.ScanArgs(t, "version", &version)
		raw, ok, err := h.db.Meta(checkpoint.MetaKey)
		if err != nil || !ok {
			t.Fatalf("%s: no manifest to replace (%v)", d.Pos, err)
		}
		raw = append([]byte{byte(version)}, raw[1:]...)
		if err := h.db.SetMeta(checkpoint.MetaKey, raw); err != nil {
			t.Fatal(err)
		}
		if err := h.db.Commit(true); err != nil {
			t.Fatal(err)
		}
		return "ok\n"
	case "crash":
		return h.crash(d.Input)
	case "finish":
		if err := h.e.Finish(); err != nil {
			t.Fatal(err)
		}
		return h.rec.Take()
	case "stats":
		s := h.e.Stats()
		return fmt.Sprintf("records=%d accepted=%d late=%d invalid=%d decisions=%v fired=%d duplicates=%d\n",
			s.Records, s.Accepted, s.Late, s.Invalid, s.Decisions, s.WindowsFired, s.Duplicates)
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		return ""
	}
}

// open opens the store in h.dir and an engine of the rules text over it.
func (h *loopHarness) open(text string) error {
	cfg, err := rules.Parse("rules.yaml", []byte(text))
	if err != nil {
		return err
	}
	if h.db, err = state.Open(state.Options{Dir: h.dir, AtomicCheckpoints: true}); err != nil {
		h.t.Fatal(err)
	}
	if h.e, err = New(Options{Config: cfg, Backend: h.db, Output: h.rec, CacheSlots: h.slots, MemoryBytes: h.memory}); err != nil {
		h.t.Fatal(err)
	}
	return nil
}

// process hands r to the engine and moves its partition on.
func (h *loopHarness) process(r loggedRecord) {
	rec := Record{Value: r.value, Partition: r.partition,
		Prov: event.Provenance{Topic: "requests", Partition: r.partition, Offset: r.offset}}
	if err := h.e.Process(&rec, 0); err != nil {
		h.t.Fatal(err)
	}
	h.offsets[r.partition] = r.offset + 1
}

// crash closes the store without committing what followed the last
// checkpoint, opens it again with the rules text (the same when empty),
// restores, and reads every partition again from the restored offsets.
func (h *loopHarness) crash(text string) string {
	if err := h.db.Close(); err != nil {
		h.t.Fatal(err)
	}
	if text == "" {
		text = h.rulesText
	}
	h.rulesText = text
	h.rec.Take() // what the engine left made before the crash is gone with it
	if err := h.open(text); err != nil {
		return err.Error() + "\n"
	}
	var b strings.Builder
	h.offsets = map[int32]int64{}
	m, found, err := checkpoint.Read(h.db, func([]byte) ([]checkpoint.Offset, error) {
		return nil, errors.New("no layout before the manifest in these tests")
	})
	switch {
	case err != nil:
		return "refused: " + err.Error() + "\n"
	case !found:
		b.WriteString("no checkpoint: from the start of every partition\n")
	default:
		if err := h.e.Restore(m.Engine); err != nil {
			return "refused: " + err.Error() + "\n"
		}
		for _, o := range m.Inputs {
			h.offsets[o.Partition] = o.Offset
		}
		fmt.Fprintf(&b, "restored: inputs %s, %s", formatOffsets(m.Inputs), wmLine(h.e))
		if diff := h.e.Restored(); len(diff.Restarted)+len(diff.Added)+len(diff.Removed) > 0 {
			fmt.Fprintf(&b, "rules: %d kept, %d restarted, %d added, %d removed\n", len(diff.Kept), len(diff.Restarted), len(diff.Added), len(diff.Removed))
		}
	}
	again := 0
	for _, r := range h.log {
		if r.offset >= h.offsets[r.partition] {
			h.process(r)
			again++
		}
	}
	fmt.Fprintf(&b, "read again: %d records\n", again)
	b.WriteString(h.rec.Take())
	b.WriteString(wmLine(h.e))
	return b.String()
}

// inputs lists the partitions' offsets, by partition.
func (h *loopHarness) inputs() []checkpoint.Offset {
	var offs []checkpoint.Offset
	for p, o := range h.offsets {
		offs = append(offs, checkpoint.Offset{Topic: "requests", Partition: p, Offset: o})
	}
	slices.SortFunc(offs, func(a, b checkpoint.Offset) int { return int(a.Partition - b.Partition) })
	return offs
}

func formatOffsets(offs []checkpoint.Offset) string {
	if len(offs) == 0 {
		return "none"
	}
	parts := make([]string, len(offs))
	for i, o := range offs {
		parts[i] = fmt.Sprintf("p%d=%d", o.Partition, o.Offset)
	}
	return strings.Join(parts, " ")
}

func (h *loopHarness) close() {
	if h.db != nil {
		h.db.Close()
	}
}

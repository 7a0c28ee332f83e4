package engine

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// backends are the state configurations every scenario runs under: all
// state in the cache; a one-slot cache over Pebble on disk, which forces
// every slot through encoding and the cold store; and the same with a
// memory budget of one byte, which makes the cold store spill all but its
// newest chunk, so that slots are read back from Pebble. Outputs must not
// differ.
var backends = []struct {
	name   string
	slots  int
	memory int64
	open   func(t *testing.T) slotstore.Backend
}{
	{"memory", 0, 0, func(*testing.T) slotstore.Backend { return slotstore.NewMemBackend() }},
	{"pebble-cache1", 1, 0, openPebble},
	{"pebble-spill", 1, 1, openPebble},
}

func openPebble(t *testing.T) slotstore.Backend {
	db, err := state.Open(state.Options{Dir: t.TempDir(), DisableWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestScenarios runs the window-semantics scenarios in testdata/scenarios.
// Commands:
//
//	rules            input: a rules file; output: ok or the problems
//	events [partition=N] [now=MS]
//	                 input: one record per line; output: what was emitted,
//	                 then the watermark
//	tick now=MS      lets idle partitions go; output as for events
//	finish           end of input
//	stats            the engine's counters
func TestScenarios(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			datadriven.Walk(t, filepath.Join("..", "testdata", "scenarios"), func(t *testing.T, path string) {
				runScenario(t, path, b.slots, b.memory, b.open)
			})
		})
	}
}

func runScenario(t *testing.T, path string, slots int, memory int64, open func(*testing.T) slotstore.Backend) {
	var e *Engine
	rec := testinput.NewRecorder()
	line := int64(0)
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "rules":
			cfg, err := rules.Parse("rules.yaml", []byte(d.Input))
			if err != nil {
				return err.Error() + "\n"
			}
			e, err = New(Options{Config: cfg, Backend: open(t), Output: rec, CacheSlots: slots, MemoryBytes: memory})
			if err != nil {
				t.Fatal(err)
			}
			return "ok\n"
		case "events":
			partition, now := int64(0), int64(0)
			for _, arg := range d.CmdArgs {
				v, err := strconv.ParseInt(arg.Vals[0], 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				switch arg.Key {
				case "partition":
					partition = v
				case "now":
					now = v
				}
			}
			for _, l := range strings.Split(d.Input, "\n") {
				line++
				r := Record{Value: []byte(l), Partition: int32(partition), Prov: event.Provenance{File: "in.jsonl", Line: line}}
				if err := e.Process(&r, now); err != nil {
					t.Fatal(err)
				}
			}
			return rec.Take() + wmLine(e)
		case "tick":
			var now int64
			d.ScanArgs(t, "now", &now)
			if err := e.Tick(now); err != nil {
				t.Fatal(err)
			}
			return rec.Take() + wmLine(e)
		case "finish":
			if err := e.Finish(); err != nil {
				t.Fatal(err)
			}
			return rec.Take()
		case "stats":
			s := e.Stats()
			dups := ""
			if s.Duplicates > 0 {
				dups = fmt.Sprintf(" duplicates=%d", s.Duplicates)
			}
			return fmt.Sprintf("records=%d accepted=%d unmatched=%d late=%d invalid=%d decisions=%v fired=%d%s\n",
				s.Records, s.Accepted, s.Unmatched, s.Late, s.Invalid, s.Decisions, s.WindowsFired, dups)
		default:
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		}
	})
}

func wmLine(e *Engine) string {
	switch wm := e.Watermark(); wm {
	case watermark.Min:
		return "wm=-inf\n"
	case watermark.Max:
		return "wm=+inf\n"
	default:
		return fmt.Sprintf("wm=%d\n", wm)
	}
}

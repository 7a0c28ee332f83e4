package engine

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/windows/slotstore"
)

func loadTwoRules(t *testing.T) (before, after *rules.Config) {
	t.Helper()
	before, err := rules.Load("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return before, testinput.ReloadedRules(t)
}

// phases runs lines through e in two phases, split at cut, calling
// between before the second, and returns each phase's outputs.
func phases(t *testing.T, e *Engine, rec *testinput.Recorder, lines [][]byte, cut int, between func()) (first, second string) {
	t.Helper()
	for i, l := range lines {
		if i == cut {
			first = rec.Take()
			if between != nil {
				between()
			}
		}
		if err := e.Process(&Record{Value: l, Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Finish(); err != nil {
		t.Fatal(err)
	}
	return first, rec.Take()
}

// of keeps the output lines of a rule (or, with name "heatmap", the
// heatmap records).
func of(out, name string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if name == "heatmap" && strings.HasPrefix(l, "heatmap ") || strings.Contains(l, `"rule":"`+name+`"`) {
			b.WriteString(l)
		}
	}
	return b.String()
}

// decisionValues returns the values of a rule's decisions by event id.
func decisionValues(t *testing.T, out, rule string) map[string]float64 {
	t.Helper()
	values := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(of(out, rule)), "\n") {
		if l == "" {
			continue
		}
		var d struct {
			EventID string  `json:"event_id"`
			Value   float64 `json:"value"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "decision ")), &d); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		values[d.EventID] = d.Value
	}
	return values
}

// commitCheckpoint stores what checkpoint returns in db, as the live job
// does, and commits it synced; it returns the checkpoint.
func commitCheckpoint(tb testing.TB, db *state.DB, checkpoint func() ([]byte, error)) []byte {
	tb.Helper()
	cp, err := checkpoint()
	if err != nil {
		tb.Fatal(err)
	}
	if err := db.SetMeta("cp", cp); err != nil {
		tb.Fatal(err)
	}
	if err := db.Commit(true); err != nil {
		tb.Fatal(err)
	}
	return cp
}

// deleteAllRetired calls an engine's DeleteRetired until no retired state
// is left, as the live loop does tick by tick.
func deleteAllRetired(t *testing.T, deleteRetired func(n int) (int, int, error)) {
	t.Helper()
	for left := 1; left > 0; {
		var err error
		if _, left, err = deleteRetired(512); err != nil {
			t.Fatal(err)
		}
	}
}

// staleStates counts the states db holds under the state ids 1 and 2: those
// of device-session-scraping and user-spend in testdata/rules.yaml, whose
// state the edit of testdata/rules-reloaded.yaml removes and restarts.
func staleStates(t *testing.T, db *state.DB) int {
	t.Helper()
	n := 0
	err := db.Seek(nil, func(key, _ []byte) (bool, error) {
		if key[0] == 0 && (key[1] == 1 || key[1] == 2) {
			n++
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReloadKeepsUnchangedRules: reloading the rules between two records
// keeps the state of the rules whose definition is unchanged: pay-burst,
// its threshold and action changed, decides after the reload exactly as a
// run that had the new rules from the start, and the heatmap fires the
// same windows; user-spend, its window changed, starts empty.
func TestReloadKeepsUnchangedRules(t *testing.T) {
	before, after := loadTwoRules(t)
	lines := testinput.BundledLines(t)
	cut := len(lines) / 2
	run := func(cfg *rules.Config, reload *rules.Config, slots int) (first, second string, diff rules.Diff) {
		backend := slotstore.NewMemBackend()
		rec := testinput.NewRecorder()
		e, err := New(Options{Config: cfg, Backend: backend, Output: rec, CacheSlots: slots})
		if err != nil {
			t.Fatal(err)
		}
		first, second = phases(t, e, rec, lines, cut, func() {
			if reload == nil {
				return
			}
			if diff, err = e.Reload(reload); err != nil {
				t.Fatal(err)
			}
		})
		return first, second, diff
	}
	for _, slots := range []int{0, 50} {
		_, want, _ := run(after, nil, slots)
		_, got, diff := run(before, after, slots)
		if g, w := of(got, "pay-burst"), of(want, "pay-burst"); g != w || g == "" {
			t.Errorf("%d slots: pay-burst after the reload: %d bytes of decisions, want %d", slots, len(g), len(w))
		}
		if g, w := of(got, "heatmap"), of(want, "heatmap"); g != w || g == "" {
			t.Errorf("%d slots: heatmaps after the reload: %d bytes, want %d", slots, len(g), len(w))
		}
		if g, w := of(got, "pay-ratio"), of(want, "pay-ratio"); g == "" || w == "" {
			t.Errorf("%d slots: the added rule decided nothing", slots)
		}
		// user-spend restarted: its sums hold only what came after the
		// reload, never more than the run that had it all along.
		fresh, all := decisionValues(t, got, "user-spend"), decisionValues(t, want, "user-spend")
		lower := 0
		for id, v := range fresh {
			if w, ok := all[id]; !ok || v > w {
				t.Errorf("%d slots: user-spend decided %s at %v, the run with all its state %v (%v)", slots, id, v, w, ok)
			} else if v < w {
				lower++
			}
		}
		if len(fresh) == 0 || lower == 0 {
			t.Errorf("%d slots: user-spend after the reload: %d decisions, %d lower than with all the state", slots, len(fresh), lower)
		}
		names := func(ids []rules.Identity) string {
			var s []string
			for _, id := range ids {
				s = append(s, id.Name)
			}
			return strings.Join(s, ",")
		}
		kept, restarted, removed, added := diff.Groups()
		if names(kept) != "pay-burst,api-latency" || names(restarted) != "user-spend" ||
			names(removed) != "device-session-scraping" || names(added) != "pay-ratio" {
			t.Errorf("diff: kept %v, restarted %v, removed %v, added %v", names(kept), names(restarted), names(removed), names(added))
		}
	}
}

// TestRestoreAfterReload: a checkpoint taken after a reload records the
// new rules' layout: a job restarted on it with the new rules goes on
// exactly as the reloaded one did; and a job restarted with the new rules
// on a checkpoint of the old keeps the unchanged rules' state as a reload
// would. Either way, after the restore, DeleteRetired deletes the state of
// the rules gone from the store: a reload drops it from memory only.
func TestRestoreAfterReload(t *testing.T) {
	before, after := loadTwoRules(t)
	lines := testinput.BundledLines(t)
	cut, restart := len(lines)/3, 2*len(lines)/3
	process := func(e *Engine, from, to int) {
		for i := from; i < to; i++ {
			if err := e.Process(&Record{Value: lines[i], Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func(dir string, cfg *rules.Config, rec *testinput.Recorder) (*state.DB, *Engine) {
		db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(Options{Config: cfg, Backend: db, Output: rec, CacheSlots: 100})
		if err != nil {
			t.Fatal(err)
		}
		return db, e
	}
	checkpoint := func(db *state.DB, e *Engine) []byte { return commitCheckpoint(t, db, e.Checkpoint) }
	// One job, reloaded at cut, uninterrupted.
	rec := testinput.NewRecorder()
	db, e := open(t.TempDir(), before, rec)
	process(e, 0, cut)
	if _, err := e.Reload(after); err != nil {
		t.Fatal(err)
	}
	process(e, cut, len(lines))
	if err := e.Finish(); err != nil {
		t.Fatal(err)
	}
	want := rec.Take()
	db.Close()

	for _, reloadFirst := range []bool{true, false} {
		dir := t.TempDir()
		rec := testinput.NewRecorder()
		db, e := open(dir, before, rec)
		process(e, 0, cut)
		if reloadFirst {
			if _, err := e.Reload(after); err != nil {
				t.Fatal(err)
			}
			process(e, cut, restart)
		}
		cp := checkpoint(db, e)
		db.Close()
		db, e = open(dir, after, rec)
		if err := e.Restore(cp); err != nil {
			t.Fatal(err)
		}
		deleteAllRetired(t, e.DeleteRetired)
		d := e.Restored()
		if reloadFirst == d.Changed() || !reloadFirst && (len(d.Kept) != 2 || len(d.Restarted) != 1 || len(d.Removed) != 1 || len(d.Added) != 1) {
			t.Errorf("reloaded before the checkpoint %v: restore found kept %v, restarted %v, removed %v, added %v",
				reloadFirst, d.Kept, d.Restarted, d.Removed, d.Added)
		}
		from := restart
		if !reloadFirst {
			from = cut
		}
		process(e, from, len(lines))
		if err := e.Finish(); err != nil {
			t.Fatal(err)
		}
		got := rec.Take()
		if reloadFirst && got != want {
			t.Errorf("restarted after a reload: %d bytes of outputs, want the reloaded job's %d", len(got), len(want))
		}
		if g, w := of(got, "pay-burst"), of(want, "pay-burst"); !reloadFirst && g != w {
			t.Errorf("restarted with the new rules: pay-burst %d bytes of decisions, want the reloaded job's %d", len(g), len(w))
		}
		checkpoint(db, e)
		if stale := staleStates(t, db); stale > 0 {
			t.Errorf("reloaded before the checkpoint %v: %d states of rules gone still stored after the restore and DeleteRetired", reloadFirst, stale)
		}
		if n := bytes.Count([]byte(got), []byte(`"rule":"device-session-scraping"`)); n > 0 {
			t.Errorf("the removed rule decided %d times after the restore", n)
		}
		db.Close()
	}
}

// TestShardedRestoreWithOtherRules: a sharded engine, as the live job's,
// restores a checkpoint of other rules, and DeleteRetired, as the live
// loop calls it, then deletes the stored state of the rules gone.
func TestShardedRestoreWithOtherRules(t *testing.T) {
	before, after := loadTwoRules(t)
	lines := testinput.BundledLines(t)
	dir := t.TempDir()
	open := func(cfg *rules.Config) (*state.DB, *Sharded) {
		db, err := state.Open(state.Options{Dir: dir, AtomicCheckpoints: true})
		if err != nil {
			t.Fatal(err)
		}
		parts, err := db.Parts(2)
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewSharded(Options{Config: cfg, Output: testinput.NewRecorder(), Checkpoints: true},
			[]slotstore.Backend{parts[0], parts[1]})
		if err != nil {
			t.Fatal(err)
		}
		return db, e
	}
	commit := func(db *state.DB, e *Sharded) { commitCheckpoint(t, db, e.Checkpoint) }
	db, e := open(before)
	b := e.NewBatch()
	dec := e.NewDecoder()
	for i := range len(lines) / 2 {
		b.Add(dec, &Record{Value: lines[i]})
	}
	if err := processBatch(e, b); err != nil {
		t.Fatal(err)
	}
	commit(db, e)
	cp, _, _ := db.Meta("cp")
	db.Close()

	db, e = open(after)
	defer db.Close()
	if err := e.Restore(cp); err != nil {
		t.Fatal(err)
	}
	if d := e.Restored(); len(d.Removed) != 1 || len(d.Restarted) != 1 {
		t.Errorf("restore found removed %v, restarted %v", d.Removed, d.Restarted)
	}
	deleteAllRetired(t, e.DeleteRetired)
	commit(db, e)
	if stale := staleStates(t, db); stale > 0 {
		t.Errorf("%d states of rules gone still stored after the restore and DeleteRetired", stale)
	}
}

// TestDeleteRetiredBetweenRecords: after a reload, the stored state of the
// rules it removed and changed is deleted a few states at a time between
// records, each part committed by a checkpoint; once all is deleted the
// checkpoint's layout retires nothing more, so a restore has nothing left
// to delete, and the outputs are those of a job never interrupted.
func TestDeleteRetiredBetweenRecords(t *testing.T) {
	before, after := loadTwoRules(t)
	lines := testinput.BundledLines(t)
	cut := len(lines) / 2
	db, err := state.Open(state.Options{Dir: t.TempDir(), AtomicCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec := testinput.NewRecorder()
	// Few states in memory: most of the removed rules' states are on disk.
	e, err := New(Options{Config: before, Backend: db, Output: rec, CacheSlots: 10})
	if err != nil {
		t.Fatal(err)
	}
	process := func(from, to int) {
		for i := from; i < to; i++ {
			if err := e.Process(&Record{Value: lines[i], Prov: event.Provenance{File: "in", Line: int64(i + 1)}}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	process(0, cut)
	commitCheckpoint(t, db, e.Checkpoint)
	stale := staleStates(t, db)
	if stale < 50 {
		t.Fatalf("%d states of the rules to remove stored before the reload: too few to test with", stale)
	}
	if _, err := e.Reload(after); err != nil {
		t.Fatal(err)
	}
	parts, total := 0, 0
	for left := 1; left > 0; parts++ {
		var deleted int
		if deleted, left, err = e.DeleteRetired(20); err != nil {
			t.Fatal(err)
		}
		total += deleted
		process(min(cut+parts*10, len(lines)), min(cut+parts*10+10, len(lines)))
		commitCheckpoint(t, db, e.Checkpoint)
	}
	if n := staleStates(t, db); n != 0 || total != stale || parts < stale/20 {
		t.Fatalf("%d states of rules gone left, %d deleted of %d, in %d parts of at most 20", n, total, stale, parts)
	}
	if len(e.layout.retired) != 0 {
		t.Fatalf("the layout still retires %v", e.layout.retired)
	}
	process(min(cut+parts*10, len(lines)), len(lines))
	if err := e.Finish(); err != nil {
		t.Fatal(err)
	}
	got := rec.Take()

	// The same job without a pause: the same outputs.
	rec = testinput.NewRecorder()
	e, err = New(Options{Config: before, Backend: slotstore.NewMemBackend(), Output: rec})
	if err != nil {
		t.Fatal(err)
	}
	process(0, cut)
	if _, err := e.Reload(after); err != nil {
		t.Fatal(err)
	}
	process(cut, len(lines))
	if err := e.Finish(); err != nil {
		t.Fatal(err)
	}
	if want := rec.Take(); got != want {
		t.Fatalf("%d bytes of outputs deleting the retired state between records, %d without", len(got), len(want))
	}
}

// TestReloadRefused: a reload that would change what a reload cannot (the
// watermark settings that shape every state, the skew and dedupe sections) is
// refused, by Engine and Sharded alike, and the engine goes on with its
// rules: the same decisions as without the attempt.
func TestReloadRefused(t *testing.T) {
	bundled, err := os.ReadFile("../testdata/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := testinput.BundledLines(t)
	cut := len(lines) / 2
	for _, edit := range []struct{ from, to string }{
		{"out_of_orderness: 2s", "out_of_orderness: 3s"},
		{"idle_timeout: 10s", "idle_timeout: 20s"},
		{"allowed_lateness: 0s", "allowed_lateness: 1s"},
		{"threshold: 15ms", "threshold: 20ms"},
		{"scope: source", "scope: job"},
		{"\nskew:", "\ndedupe: {horizon: 1s}\nskew:"},
	} {
		edited := strings.Replace(string(bundled), edit.from, edit.to, 1)
		cfg, err := rules.Parse("edited.yaml", []byte(edited))
		if err != nil || edited == string(bundled) {
			t.Fatalf("%s: %v (edited: %v)", edit.to, err, edited != string(bundled))
		}
		before, _ := loadTwoRules(t)
		run := func(reload bool) string {
			rec := testinput.NewRecorder()
			e, err := New(Options{Config: before, Backend: slotstore.NewMemBackend(), Output: rec})
			if err != nil {
				t.Fatal(err)
			}
			first, second := phases(t, e, rec, lines, cut, func() {
				if !reload {
					return
				}
				if _, err := e.Reload(cfg); err == nil {
					t.Errorf("%s: reload not refused", edit.to)
				}
				if e.cfg != before {
					t.Errorf("%s: a refused reload changed the rules", edit.to)
				}
			})
			return first + second
		}
		if got, want := run(true), run(false); got != want {
			t.Errorf("%s: %d bytes of outputs after a refused reload, %d without one", edit.to, len(got), len(want))
		}
		sharded, err := NewSharded(Options{Config: before, Output: testinput.NewRecorder()},
			[]slotstore.Backend{slotstore.NewMemBackend(), slotstore.NewMemBackend()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sharded.Reload(cfg); err == nil || sharded.cfg != before {
			t.Errorf("%s: the sharded engine's reload: %v, rules changed %v", edit.to, err, sharded.cfg != before)
		}
	}
}

// TestReloadQuantileThreshold: a quantile rule's panes and sessions count
// their values below its threshold (windows' screen); a reload that
// changes only the threshold keeps the state, and the rule then decides
// exactly as a run that had the new threshold from the start, its counts
// recounted whether its panes stayed in memory or were decoded. Sessions
// of two minutes span the reload.
func TestReloadQuantileThreshold(t *testing.T) {
	rulesWith := func(p99, p50 string) *rules.Config {
		cfg, err := rules.Parse("rules.yaml", []byte(`
watermark: {out_of_orderness: 2s}
rules:
  - name: p99
    key: [api]
    window: {type: sliding, size: 60s, slide: 1s}
    aggregate: quantile:latency_ms:0.99
    threshold: `+p99+`
    action: alert
  - name: p50
    key: [user]
    window: {type: sliding, size: 10s, slide: 2s}
    aggregate: quantile:latency_ms:0.5
    threshold: `+p50+`
    action: alert
  - name: session-p50
    key: [user]
    window: {type: session, gap: 2m}
    aggregate: quantile:latency_ms:0.5
    threshold: `+p50+`
    action: alert
`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	lines := testinput.BundledLines(t)
	cut := len(lines) / 2
	for _, slots := range []int{0, 50} {
		if raceShort() && slots == 0 {
			continue
		}
		// p99 of an api near 180 ms, p50 of a user's few requests near 20.
		for _, th := range [][4]string{{"300", "60", "180", "20"}, {"180", "20", "300", "60"}} {
			run := func(cfg, reload *rules.Config) string {
				rec := testinput.NewRecorder()
				e, err := New(Options{Config: cfg, Backend: slotstore.NewMemBackend(), Output: rec, CacheSlots: slots})
				if err != nil {
					t.Fatal(err)
				}
				_, second := phases(t, e, rec, lines, cut, func() {
					if reload == nil {
						return
					}
					diff, err := e.Reload(reload)
					if err != nil {
						t.Fatal(err)
					}
					if kept, _, _, _ := diff.Groups(); len(kept) != 3 {
						t.Fatalf("kept %v, want every rule", kept)
					}
				})
				return second
			}
			want := run(rulesWith(th[2], th[3]), nil)
			got := run(rulesWith(th[0], th[1]), rulesWith(th[2], th[3]))
			for _, r := range []string{"p99", "p50", "session-p50"} {
				if g, w := of(got, r), of(want, r); g != w || w == "" {
					t.Errorf("%d slots, thresholds %v: %s decided %d bytes after the reload, want %d",
						slots, th, r, len(g), len(w))
				}
			}
		}
	}
}

package job

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/state"
	"github.com/riskstream/riskstream/windows/slotstore"
	"github.com/segmentio/kafka-go"
)

// world is a Loop with what its caller does around it: a topic in memory
// (the broker), the state in Pebble on disk, whose pending writes a crash
// loses, the journal, and a fetch position per partition (the fetchers).
type world struct {
	t       *testing.T
	dir     string
	cfg     *rules.Config
	topic   map[int32][]kafka.Message
	fetchAt map[int32]int64
	db      *state.DB
	loop    *Loop
	journal *Journal
	rec     *testinput.Recorder
}

const topicName = "requests"

// TestLoop runs the loop's scenarios in testdata/loop: records taken in
// the merge's order, checkpoints, crashes and restores. Commands:
//
//	rules             input: a rules file
//	produce partition=N
//	                  input: one record per line, its timestamp (ms) then its value
//	start [wait=MS] [behind-wait=MS] [shards=N] [now=MS] [topic=NAME]
//	                  opens the state and restores its checkpoint, if any;
//	                  output: where each partition resumes
//	fetch partition=N [n=K] [behind]
//	                  hands the loop the partition's next K records (all by
//	                  default), behind when more follow or it says so
//	process now=MS [merge-now=MS]
//	                  takes what the merge gives, journals its runs, runs
//	                  the records; output: what they emitted
//	stop-before partition=N offset=K
//	                  makes the next takes stop before the partition's
//	                  record at K or later (StopBefore)
//	tick now=MS       moves processing time; output: what fired
//	reload            input: a rules file, which the loop changes to
//	                  between two records; output: what kept its state
//	checkpoint        commits the loop's manifest and state; output: the offsets
//	crash             closes the state without committing
func TestLoop(t *testing.T) {
	datadriven.Walk(t, filepath.Join("..", "testdata", "loop"), func(t *testing.T, path string) {
		w := &world{t: t, dir: t.TempDir(), topic: map[int32][]kafka.Message{}, rec: testinput.NewRecorder()}
		defer func() {
			if w.db != nil {
				w.db.Close()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := w.run(d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

func (w *world) run(d *datadriven.TestData) (string, error) {
	switch d.Cmd {
	case "rules":
		cfg, err := rules.Parse("rules.yaml", []byte(d.Input))
		if err != nil {
			return "", err
		}
		w.cfg = cfg
		return "ok\n", nil
	case "produce":
		p := int32(intArg(w.t, d, "partition", 0))
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			ts, value, ok := strings.Cut(line, " ")
			ms, err := strconv.ParseInt(ts, 10, 64)
			if !ok || err != nil {
				return "", fmt.Errorf("produce: want a timestamp and a value: %q", line)
			}
			w.topic[p] = append(w.topic[p], kafka.Message{Topic: topicName, Partition: int(p),
				Offset: int64(len(w.topic[p])), Time: time.UnixMilli(ms), Value: []byte(value)})
		}
		return fmt.Sprintf("partition %d ends at %d\n", p, len(w.topic[p])), nil
	case "start":
		return w.start(d)
	case "fetch":
		p := int32(intArg(w.t, d, "partition", 0))
		log := w.topic[p]
		from := w.fetchAt[p]
		to := int64(len(log))
		if d.HasArg("n") {
			to = min(to, from+int64(intArg(w.t, d, "n", 0)))
		}
		msgs := slices.Clone(log[from:to])
		w.fetchAt[p] = to
		w.loop.Push(kafkaio.Fetch{Partition: p, Msgs: msgs, Behind: to < int64(len(log)) || d.HasArg("behind")}, int64(intArg(w.t, d, "merge-now", 0)))
		return fmt.Sprintf("fetched %d records, %d buffered\n", len(msgs), w.loop.Buffered()), nil
	case "process":
		now := int64(intArg(w.t, d, "now", 0))
		n, runs := w.loop.Take(int64(intArg(w.t, d, "merge-now", int(now))))
		if err := w.journal.Write(runs); err != nil {
			return "", err
		}
		if err := w.loop.Run(now, nil); err != nil {
			return "", err
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "took %d", n)
		for _, r := range runs {
			fmt.Fprintf(&sb, ", %d of them without partitions %v", r.Picks, r.Without)
		}
		if p, o, ok := w.loop.Stopped(); ok {
			fmt.Fprintf(&sb, ", stopped before %d/%d", p, o)
		}
		fmt.Fprintf(&sb, "\n%s", w.rec.Take())
		fmt.Fprintf(&sb, "offsets %s\n", offsetsText(w.loop.Offsets()))
		return sb.String(), nil
	case "stop-before":
		w.loop.StopBefore(int32(intArg(w.t, d, "partition", 0)), int64(intArg(w.t, d, "offset", 0)))
		return "ok\n", nil
	case "reload":
		cfg, err := rules.Parse("rules.yaml", []byte(d.Input))
		if err != nil {
			return "", err
		}
		diff, err := w.loop.Reload(cfg)
		if err != nil {
			return "", err
		}
		w.cfg = cfg
		var sb strings.Builder
		kept, restarted, removed, added := diff.Groups()
		for _, g := range []struct {
			name string
			ids  []rules.Identity
		}{{"kept", kept}, {"restarted", restarted}, {"removed", removed}, {"added", added}} {
			for _, id := range g.ids {
				fmt.Fprintf(&sb, "%s %s\n", g.name, id)
			}
		}
		return sb.String(), nil
	case "tick":
		if err := w.loop.Tick(int64(intArg(w.t, d, "now", 0))); err != nil {
			return "", err
		}
		return w.rec.Take() + fmt.Sprintf("watermark %d\n", w.loop.Engine().Watermark()), nil
	case "checkpoint":
		m, err := w.loop.Checkpoint()
		if err != nil {
			return "", err
		}
		if err := checkpoint.Write(w.db, &m); err != nil {
			return "", err
		}
		if err := w.journal.Checkpoint(w.loop); err != nil {
			return "", err
		}
		if err := w.db.Commit(true); err != nil {
			return "", err
		}
		return fmt.Sprintf("checkpoint at offsets %s\n", offsetsText(w.loop.Offsets())), nil
	case "crash":
		err := w.db.Close()
		w.db, w.loop = nil, nil
		if err != nil {
			return "", err
		}
		return "crashed: the writes since the last checkpoint are lost\n", nil
	}
	return "", fmt.Errorf("unknown command %s", d.Cmd)
}

// start opens the state, restores its checkpoint if any, and adds every
// partition of the topic, whose fetches start where the loop says.
func (w *world) start(d *datadriven.TestData) (string, error) {
	if w.db != nil {
		return "", fmt.Errorf("started already")
	}
	db, err := state.Open(state.Options{Dir: w.dir, AtomicCheckpoints: true})
	if err != nil {
		return "", err
	}
	w.db = db
	shards := intArg(w.t, d, "shards", 2)
	parts, err := db.Parts(shards)
	if err != nil {
		return "", err
	}
	backends := make([]slotstore.Backend, len(parts))
	for i, p := range parts {
		backends[i] = p
	}
	e, err := engine.NewSharded(engine.Options{Config: w.cfg, Output: w.rec, Checkpoints: true}, backends)
	if err != nil {
		return "", err
	}
	wait := int64(intArg(w.t, d, "wait", Forever))
	topic := topicName
	if d.HasArg("topic") {
		d.ScanArgs(w.t, "topic", &topic)
	}
	w.loop, err = New(Options{Engine: e, Topic: topic, PartitionWait: wait, BehindWait: int64(intArg(w.t, d, "behind-wait", int(wait)))})
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	m, found, err := checkpoint.Read(db, nil)
	if err != nil {
		return "", err
	}
	w.journal = NewJournal(db)
	if found {
		if err := w.loop.Restore(&m); err != nil {
			db.Close()
			w.db, w.loop = nil, nil
			return "", err
		}
		n, err := w.journal.Load(w.loop)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "restored at offsets %s, watermark %d, following %d runs\n", offsetsText(w.loop.Offsets()), e.Watermark(), n)
	} else {
		sb.WriteString("no checkpoint\n")
	}
	w.fetchAt = map[int32]int64{}
	now := int64(intArg(w.t, d, "now", 0))
	for _, p := range slices.Sorted(maps.Keys(w.topic)) {
		from, _ := w.loop.AddPartition(p, now)
		if from == kafka.FirstOffset {
			from = 0
		}
		w.fetchAt[p] = from
		fmt.Fprintf(&sb, "partition %d fetches from %d\n", p, from)
	}
	return sb.String(), nil
}

// intArg is d's argument key, def without it.
func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

func offsetsText(offsets map[int32]int64) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(offsets)) {
		parts = append(parts, fmt.Sprintf("%d:%d", p, offsets[p]))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

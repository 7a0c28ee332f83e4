package engine

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// The distributed property: the records of one to three input partitions,
// in one order, routed by a Router to the Tasks of n partitions, through
// the message encoding, with marks at random points, messages sent again
// as a restarted router would, and the router and tasks restored from
// checkpoints midway, gives the outputs of one Engine that takes the same
// records in the same order:
// the same dlq records in order, and the same decisions, heatmap records
// and late records as multisets (tasks emit independently of each other).
// The one allowed difference: an event late unless a session merges it,
// with sessions in several partitions (RouterStats.Split), may go to the
// late output although a session merged it; never the other way round.

// distributedIterations cases are checked.
const distributedIterations = 200

func TestPropertyDistributedMatchesEngine(t *testing.T) {
	runProperty(t, distributedIterations, checkDistributed)
}

func checkDistributed(c *propCase) error {
	r := rand.New(rand.NewPCG(c.seed, 7))
	inputs := 1 + r.IntN(3)
	// Some records are an earlier one's event sent again, which dedupe
	// drops within its horizon.
	again := map[int]int{}
	for i := 1; i < len(c.events); i++ {
		if r.IntN(20) == 0 {
			again[i] = r.IntN(i)
		}
	}
	record := func(i int) Record {
		p, e := int32(i%inputs), i
		if j, ok := again[i]; ok {
			e = j
		}
		return Record{Value: []byte(c.events[e].json()), Partition: p,
			Prov: event.Provenance{Topic: "requests", Partition: p, Offset: int64(i)}}
	}
	want, err := runEngineOn(c, record)
	if err != nil {
		return fmt.Errorf("engine: %v", err)
	}
	got, split, err := runDistributed(c, r, record)
	if err != nil {
		return fmt.Errorf("distributed: %v", err)
	}
	if !slices.Equal(got.dlq, want.dlq) {
		return fmt.Errorf("dlq: got %v, want %v", got.dlq, want.dlq)
	}
	sortDec := func(ds []decRec) []decRec {
		ds = slices.Clone(ds)
		slices.SortStableFunc(ds, func(a, b decRec) int {
			return cmp.Or(cmp.Compare(a.eventID, b.eventID), cmp.Compare(a.rule, b.rule))
		})
		return ds
	}
	if err := diffSeq("decisions (sorted)", sortDec(got.decisions), sortDec(want.decisions)); err != nil {
		return err
	}
	sortLate := func(ls []lateRec) []lateRec {
		ls = slices.Clone(ls)
		slices.SortStableFunc(ls, func(a, b lateRec) int { return cmp.Compare(a.id, b.id) })
		return ls
	}
	gl, wl := sortLate(got.late), sortLate(want.late)
	if split == 0 {
		if err := diffSeq("late (sorted)", gl, wl); err != nil {
			return err
		}
	} else {
		for _, l := range wl {
			if _, found := slices.BinarySearchFunc(gl, l, func(a, b lateRec) int { return cmp.Compare(a.id, b.id) }); !found {
				return fmt.Errorf("late %v missing (%d split events)", l, split)
			}
		}
	}
	return sameHeatmaps(got.heatmaps, want.heatmaps)
}

// sameHeatmaps compares two engines' heatmap records as multisets, their
// quantiles too: the same values in the same order make the same sketch.
func sameHeatmaps(got, want []hmRec) error {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.SortStableFunc(got, compareIdentity)
	slices.SortStableFunc(want, compareIdentity)
	flat := func(hs []hmRec) []hmFull {
		out := make([]hmFull, len(hs))
		for i := range hs {
			out[i] = hmFull{hs[i].hmCore, hs[i].quantiles}
		}
		return out
	}
	return diffSeq("heatmaps (sorted by identity)", flat(got), flat(want))
}

// hmFull is a heatmap record with its quantiles, comparable.
type hmFull struct {
	hmCore
	q [3]float64
}

func (f hmFull) String() string { return fmt.Sprintf("%v q=%v", f.hmCore, f.q) }

// runEngineOn runs c's events through one Engine as the records record
// makes of them.
func runEngineOn(c *propCase, record func(i int) Record) (*capture, error) {
	cfg, err := rules.Parse("rules.yaml", []byte(c.yaml()))
	if err != nil {
		return nil, err
	}
	out := &capture{}
	e, err := New(Options{Config: cfg, Backend: slotstore.NewMemBackend(), Output: out})
	if err != nil {
		return nil, err
	}
	for i := range c.events {
		rec := record(i)
		if err := e.Process(&rec, 0); err != nil {
			return nil, err
		}
	}
	err = e.Finish()
	out.stats = e.Stats()
	return out, err
}

// route routes rec, its event decoded into into (nil: the router's own):
// its dlq or late record to out, its messages to send.
func route(router *Router, rec *Record, into *Decoded, out Output, send func(k int, m *Message) error) error {
	routed := router.Route(rec, 0, into)
	switch {
	case routed.Invalid != nil:
		out.DLQ(rec.Value, routed.Invalid.Error(), &rec.Prov)
	case routed.Late:
		out.Late(rec.Value, routed.Message.Before, &rec.Prov)
	}
	for _, k := range routed.Partitions {
		m := routed.Message
		m.Decider = k == routed.Decider
		if err := send(int(k), &m); err != nil {
			return err
		}
	}
	return nil
}

// runDistributed runs c's events, as the records record makes of them,
// through a Router and the Tasks of 1 to 5 partitions, and returns what
// they emitted and how many split events the router saw.
func runDistributed(c *propCase, r *rand.Rand, record func(i int) Record) (*capture, int64, error) {
	cfg, err := rules.Parse("rules.yaml", []byte(c.yaml()))
	if err != nil {
		return nil, 0, err
	}
	n := 1 + r.IntN(5)
	out := &capture{}
	var split int64 // of the routers before a restart
	router, err := NewRouter(cfg, n, nil)
	if err != nil {
		return nil, 0, err
	}
	ids, topic := NewIDLog(), idTopic{} // the router's dedupe, and where its checkpoints write it
	router.StoreIDs(ids)
	backends := make([]slotstore.Backend, n)
	tasks := make([]*Task, n)
	newTask := func(k int) (*Task, error) {
		return NewTask(TaskOptions{Config: cfg, Backend: backends[k], Output: out, Partition: k, Partitions: n,
			Topic: "requests"})
	}
	for k := range n {
		backends[k] = slotstore.NewMemBackend()
		if tasks[k], err = newTask(k); err != nil {
			return nil, 0, err
		}
	}
	// sent keeps every encoded message per partition, so that some can be
	// delivered again.
	sent := make([][][]byte, n)
	deliver := func(k int, b []byte) error {
		var m Message
		if err := DecodeMessage(b, &m); err != nil {
			return err
		}
		_, err := tasks[k].Apply(&m)
		return err
	}
	send := func(k int, m *Message) error {
		b := AppendMessage(nil, m)
		sent[k] = append(sent[k], b)
		return deliver(k, b)
	}
	// handOver gives a message to its partition as a router hands it to a
	// task of its own process: with the event it decoded.
	handOver := func(ev *Decoded) func(k int, m *Message) error {
		return func(k int, m *Message) error {
			sent[k] = append(sent[k], AppendMessage(nil, m))
			_, err := tasks[k].ApplyDecoded(m, ev)
			return err
		}
	}
	for i := range c.events {
		rec := record(i)
		into, to := (*Decoded)(nil), send
		if r.IntN(2) == 0 { // handed over decoded
			into = new(Decoded)
			to = handOver(into)
		}
		if err := route(router, &rec, into, out, to); err != nil {
			return nil, 0, err
		}
		if r.IntN(8) == 0 { // a mark to every partition
			wm := router.Mark(0)
			for k := range n {
				if err := send(k, &Message{Kind: MarkMessage, Partition: rec.Partition, Offset: rec.Prov.Offset, Watermark: wm}); err != nil {
					return nil, 0, err
				}
			}
		}
		if r.IntN(16) == 0 { // a partition gets some messages again
			k := r.IntN(n)
			from := r.IntN(len(sent[k]) + 1)
			for _, b := range sent[k][from:] {
				if err := deliver(k, b); err != nil {
					return nil, 0, err
				}
			}
		}
		if r.IntN(25) == 0 { // the router restarts from a checkpoint
			cp := router.Checkpoint()
			topic.write(ids)
			if ids, err = topic.read(); err != nil {
				return nil, 0, err
			}
			split += router.Stats().Split
			if router, err = NewRouter(cfg, n, nil); err != nil {
				return nil, 0, err
			}
			router.StoreIDs(ids)
			if err := router.Restore(nil, cp); err != nil {
				return nil, 0, err
			}
		}
		if r.IntN(20) == 0 { // a task restarts from a checkpoint
			k := r.IntN(n)
			cp, err := tasks[k].Checkpoint()
			if err != nil {
				return nil, 0, err
			}
			if tasks[k], err = newTask(k); err != nil {
				return nil, 0, err
			}
			if err := tasks[k].Restore(cp); err != nil {
				return nil, 0, err
			}
		}
	}
	for _, t := range tasks {
		if err := t.Finish(); err != nil {
			return nil, 0, err
		}
	}
	return out, split + router.Stats().Split, nil
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []Message{
		{Kind: RecordMessage, Partition: 3, Offset: 1 << 40, Watermark: -5, Before: -7, Time: 1732150000123,
			Processing: true, Decider: true, Value: []byte(`{"id":"a"}`)},
		{Kind: RecordMessage, Offset: 0, Watermark: watermark.Min, Before: watermark.Min, Value: []byte{}},
		{Kind: MarkMessage, Partition: 1, Offset: -1, Watermark: 99, Idle: true},
		{Kind: RulesMessage, Partition: 2, Offset: 17, Watermark: 1732150000000, Version: 2, Value: []byte("rules:\n  - {name: r}\n")},
	} {
		var got Message
		if err := DecodeMessage(AppendMessage(nil, &m), &got); err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(m) {
			t.Errorf("got %+v, want %+v", got, m)
		}
	}
	for _, b := range [][]byte{nil, {1}, {2, 1, 0, 0, 0, 0}, {1, 4, 0, 0, 0, 0}, {1, 3, 0, 0, 0, 0}, {1, 3, 0, 0, 0, 0, 0}, {1, 2, 0x80, 0, 0, 0}, {1, 2, 0, 0, 0, 0, 0}} {
		var m Message
		if err := DecodeMessage(b, &m); err == nil {
			t.Errorf("DecodeMessage(%v) = %+v, want an error", b, m)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add(AppendMessage(nil, &Message{Kind: RecordMessage, Partition: 2, Offset: 9, Value: []byte(`{}`)}))
	f.Add(AppendMessage(nil, &Message{Kind: MarkMessage, Offset: -1, Idle: true}))
	f.Add(AppendMessage(nil, &Message{Kind: RulesMessage, Partition: 1, Offset: 41, Watermark: 7, Version: 3, Value: []byte("rules: []\n")}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := DecodeMessage(b, &m); err != nil {
			return
		}
		// What decodes encodes to bytes that decode to the same.
		var again Message
		if err := DecodeMessage(AppendMessage(nil, &m), &again); err != nil || fmt.Sprint(again) != fmt.Sprint(m) {
			t.Fatalf("%x decodes to %+v, which encodes to bytes that decode to %+v (%v)", b, m, again, err)
		}
	})
}

// idTopic is the blobs of a router's IDLog written and not deleted, by
// generation, as the compacted topic of a distributed job keeps them.
type idTopic map[int64][][]byte

// write writes what l has to write at a checkpoint.
func (topic idTopic) write(l *IDLog) {
	blobs, forgotten, rewritten := l.Take()
	if rewritten {
		clear(topic)
	}
	for _, g := range forgotten {
		delete(topic, g)
	}
	delete(topic, PreWatermark) // its blobs replace those before
	for _, b := range blobs {
		topic[b.Gen] = append(topic[b.Gen], b.Entries)
	}
	l.Done(true)
}

// read returns an IDLog of what the topic holds.
func (topic idTopic) read() (*IDLog, error) {
	l := NewIDLog()
	for g, blobs := range topic {
		for _, b := range blobs {
			if err := l.Load(g, b); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// TestRouterDedupeRestore: a router drops an event sent again within the
// horizon. Its ids go to blobs (IDLog), written at each checkpoint before
// the checkpoint itself: restored from a checkpoint with the blobs of a
// later one, whose own record was not written, it takes the records past
// its checkpoint again as new, and still drops the events of records
// before it sent again; the generations it forgets as the watermark moves
// on are deleted from the blobs.
func TestRouterDedupeRestore(t *testing.T) {
	cfg, err := rules.Parse("rules.yaml", []byte(`
watermark: {out_of_orderness: 0s}
dedupe: {horizon: 10s}
rules:
  - {name: r, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: 100, action: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	topic := idTopic{}
	checkpoint := topic.write
	newRouter := func() (*Router, *IDLog) {
		r, err := NewRouter(cfg, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := topic.read()
		if err != nil {
			t.Fatal(err)
		}
		r.StoreIDs(l)
		return r, l
	}
	route := func(r *Router, offset int64, id int, ts int64) bool {
		rec := Record{Value: fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u1"}`, id, 1_732_150_000_000+ts),
			Prov: event.Provenance{Topic: "requests", Offset: offset}}
		routed := r.Route(&rec, 0, nil)
		return routed.Duplicate
	}
	r, log := newRouter()
	for o := range 6 {
		if route(r, int64(o), o, int64(o)) {
			t.Fatalf("event %d taken as a duplicate", o)
		}
	}
	if !route(r, 6, 2, 2) {
		t.Fatal("event 2 sent again was not dropped")
	}
	cp := r.Checkpoint() // covers offsets 0 to 6
	checkpoint(log)
	for o := 7; o < 10; o++ {
		route(r, int64(o), o, int64(o))
	}
	checkpoint(log) // its blobs written, its record not
	r, log = newRouter()
	if err := r.Restore(map[int32]int64{0: 7}, cp); err != nil {
		t.Fatal(err)
	}
	for o := 7; o < 10; o++ {
		if route(r, int64(o), o, int64(o)) {
			t.Errorf("offset %d, routed again after the restore, taken as a duplicate", o)
		}
	}
	if !route(r, 10, 4, 4) {
		t.Error("event 4, of a record before the checkpoint, sent again after the restore was not dropped")
	}
	if got := r.Stats().Duplicates; got != 1 {
		t.Errorf("the restored router counted %d duplicates, want 1", got)
	}
	// The watermark moves on by three horizons: the generations of the
	// ids above are forgotten, and their blobs deleted; of the two ids
	// taken after, the first was taken at the old watermark (dedupe runs
	// before the event moves it), and is forgotten with them.
	route(r, 11, 100, 30_000)
	route(r, 12, 101, 30_001)
	r.Checkpoint()
	checkpoint(log)
	n := 0
	for _, blobs := range topic {
		for _, b := range blobs {
			log.eachEntry(b, func([2]uint64, []byte) { n++ })
		}
	}
	if n != 1 {
		t.Errorf("the blobs hold %d ids after the watermark moved on, want 1: %v", n, topic)
	}
	r, _ = newRouter()
	if err := r.Restore(map[int32]int64{0: 13}, cp); err != nil {
		t.Fatal(err)
	}
	if route(r, 13, 2, 2) {
		t.Error("event 2, forgotten, sent again was dropped")
	}
}

// TestApplyDecodedOtherFields hands a task events a router decoded by
// rules that read fewer fields than the task's: the task decodes the
// records itself, and decides as when it is handed none.
func TestApplyDecodedOtherFields(t *testing.T) {
	parse := func(src string) *rules.Config {
		cfg, err := rules.Parse("rules.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	routed := parse(`
rules:
  - {name: n, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: 1, action: deny}
`)
	applied := parse(`
rules:
  - {name: n, key: [user], window: {type: tumbling, size: 60s}, aggregate: count, threshold: 1, action: deny}
  - {name: s, key: [user], window: {type: tumbling, size: 60s}, aggregate: "sum:amount", threshold: 10, action: review}
`)
	router, err := NewRouter(routed, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var outs [2]*testinput.Recorder
	var tasks [2]*Task
	for i := range tasks {
		outs[i] = testinput.NewRecorder()
		if tasks[i], err = NewTask(TaskOptions{Config: applied, Backend: slotstore.NewMemBackend(), Output: outs[i],
			Partition: 0, Partitions: 1, Topic: "requests"}); err != nil {
			t.Fatal(err)
		}
	}
	for o := range 6 {
		rec := Record{Value: fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u1","amount":%d}`, o, 1_732_150_000_000+o, 4*o),
			Prov: event.Provenance{Topic: "requests", Offset: int64(o)}}
		var ev Decoded
		r := router.Route(&rec, 0, &ev)
		if _, err := tasks[0].Apply(&r.Message); err != nil {
			t.Fatal(err)
		}
		if _, err := tasks[1].ApplyDecoded(&r.Message, &ev); err != nil {
			t.Fatal(err)
		}
	}
	want, got := outs[0].Take(), outs[1].Take()
	if !strings.Contains(want, `"rule":"s"`) || got != want {
		t.Errorf("handed the router's events, the task wrote\n%s\nwant\n%s", got, want)
	}
}

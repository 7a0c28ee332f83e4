package windows

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows/slot"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// prefetchTestRules have a sliding rule, whose slots hold many panes, a
// session rule and a heatmap, each keyed by the user.
const prefetchTestRules = `
rules:
  - {name: burst, key: [user], window: {type: sliding, size: 60s, slide: 1s}, aggregate: count, threshold: 3, action: deny}
  - {name: visits, key: [user], window: {type: session, gap: 30s}, aggregate: count, threshold: 4, action: review}
  - {name: quick, key: [user], window: {type: session, gap: 1s}, aggregate: count, threshold: 1, action: review}
heatmaps:
  - {name: lat, key: [user], window: {type: tumbling, size: 5s}, field: latency_ms, buckets: [10, 100]}
`

// TestPrefetchedSlots drives an operator the way a shard does, calling
// Prefetch at the start of each group of events with the next groups'
// refs, and one without Prefetch, over more keys than Prefetch leaves
// alone and a cache too small for them. Between Prefetch finding a slot and
// the event it was found for, the slot may be evicted and reused for
// another key, or for another rule of the same key, whose id is the
// same, while the event is processed, or dropped with its purged windows
// and left unused.
// Whenever the processing of an event would take a slot Prefetch found
// (prefetchedSlot), it is the one the index holds for the key; and both
// operators make the same outputs.
func TestPrefetchedSlots(t *testing.T) {
	const (
		keys      = 3 * slotstore.SmallIndex
		busy      = 300
		events    = 60_000
		returning = 9000
		group     = 16
	)
	rng := rand.New(rand.NewPCG(3, 4))
	lines := make([][]byte, 0, events)
	add := func(ts int64, user string) {
		lines = append(lines, fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"%s","latency_ms":%d}`, len(lines), ts, user, rng.IntN(200)))
	}
	// Half of the events from a few hundred busy users, whose slots stay
	// cached, the others from any user: the cache evicts, and reuses the
	// slots for other keys.
	const start = 1_000_000
	for i := range events - 3*returning {
		user := rng.IntN(keys)
		if i < events/2 && rng.IntN(2) == 0 {
			user = rng.IntN(busy)
		}
		add(start+int64(i), fmt.Sprint("u", user))
	}
	// Then keys whose quick session is purged, and its slot dropped, just
	// before their next event, among busy users, who take no slot: some
	// dropped slots stay unused while Prefetch's copies of them are still
	// to be used.
	type timed struct {
		ts   int64
		user string
	}
	var last []timed
	end := start + int64(len(lines))
	for j := range returning {
		r := fmt.Sprint("r", j)
		first := end + int64(j/3)
		last = append(last, timed{first, r}, timed{first + 2000 + int64(j%12), r})
	}
	for ts := end; len(last) < cap(lines)-len(lines); ts++ {
		last = append(last, timed{ts, fmt.Sprint("u", rng.IntN(busy))})
	}
	slices.SortStableFunc(last, func(a, b timed) int { return cmp.Compare(a.ts, b.ts) })
	for _, e := range last {
		add(e.ts, e.user)
	}

	run := func(prefetched bool) (*recorder, int, int) {
		out := &recorder{}
		op, dec := newTestOperatorWith(t, prefetchTestRules, slotstore.NewMemBackend(), out, Options{CacheSlots: 2000})
		keyer := op.NewKeyer()
		evs := make([]event.Event, events)
		var refs []SlotRef
		var keyBytes []byte
		starts := make([]int, events+1) // refs[starts[i]:starts[i+1]] are event i's
		for i, l := range lines {
			if err := dec.Decode(l, &evs[i]); err != nil {
				t.Fatal(err)
			}
			refs, keyBytes = keyer.Append(refs, keyBytes, &evs[i])
			starts[i+1] = len(refs)
		}
		refsOf := func(i, j int) []SlotRef { return refs[starts[min(i, events)]:starts[min(j, events)]] }
		taken, rejected := 0, 0
		maxTS := watermark.Min
		for i := range evs {
			if prefetched && i%group == 0 {
				grp := func(k int) []SlotRef { return refsOf(i+k*group, i+(k+1)*group) }
				if i == 0 {
					op.Prefetch(nil, nil, refsOf(0, 3*group))
					op.IssuePrefetches(1)
					op.Prefetch(nil, refsOf(0, 2*group), nil)
					op.IssuePrefetches(1)
					op.Prefetch(grp(0), nil, nil)
					op.IssuePrefetches(1)
				}
				op.Prefetch(grp(1), grp(2), grp(3))
			}
			if prefetched {
				op.IssuePrefetches(group - i%group)
			}
			own := refsOf(i, i+1)
			for k := range own {
				r := &own[k]
				got, want := op.prefetchedSlot(op.specs[r.spec], r), op.cache.Cached(int(r.spec), r.id)
				var found *slot.Slot // what Prefetch found for r
				if j := starts[i] - starts[i/group*group] + k; prefetched && j < len(op.groupSlots) {
					found = op.groupSlots[j]
				}
				switch {
				case got != nil && got != want:
					t.Fatalf("event %d: Prefetch's slot for %q is not the cached one", i, r.slotKey(keyBytes))
				case got == nil && found != nil && found == want:
					t.Fatalf("event %d: the cached slot of %q, found by Prefetch, was not taken", i, r.slotKey(keyBytes))
				case got != nil:
					taken++
				case found != nil:
					rejected++ // evicted since, maybe reused for another key
				}
			}
			if _, err := op.ProcessElement(own, keyBytes, evs[i].TS, false); err != nil {
				t.Fatal(err)
			}
			maxTS = max(maxTS, evs[i].TS)
			if err := op.AdvanceWatermark(maxTS - 1000); err != nil {
				t.Fatal(err)
			}
		}
		if err := op.AdvanceWatermark(watermark.Max); err != nil {
			t.Fatal(err)
		}
		return out, taken, rejected
	}

	want, _, _ := run(false)
	got, taken, rejected := run(true)
	t.Logf("%d outputs; %d slots taken from Prefetch, %d it found were no longer cached", len(want.lines), taken, rejected)
	if taken < events/4 || rejected == 0 {
		t.Errorf("%d slots taken from Prefetch, %d it found were no longer cached: want many, and some", taken, rejected)
	}
	for i := range max(len(want.lines), len(got.lines)) {
		if i >= len(want.lines) || i >= len(got.lines) || want.lines[i] != got.lines[i] {
			t.Fatalf("output %d differs with Prefetch:\nwithout: %s\nwith:    %s", i, at(want.lines, i), at(got.lines, i))
		}
	}
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(none)"
}

// TestRecordLines: the prefetching asks for the lines a record of the
// cold store takes, from its index entry, whose location holds no size:
// for records of one size up to a line, each line of each and no other,
// once the index has seen a few of that size written, whatever their
// size before.
func TestRecordLines(t *testing.T) {
	c := slotstore.NewCold(slotstore.NewMemBackend(), 1, 1<<30, false)
	x := &c.Idx[0]
	rng := rand.New(rand.NewPCG(2, 3))
	for _, valLen := range []int{100, 5, 21, 37, 53, 13} {
		var locs []uint64
		for range 64 {
			id := slot.ID{rng.Uint64(), rng.Uint64()}
			c.SetLoc(0, id, c.Append(id, []byte("k"), make([]byte, valLen), 0, slot.NoTimer))
			locs = append(locs, x.Entry(id).Ref())
		}
		_, _, size := c.Record(locs[0])
		if size > 64 {
			continue // the sizes before
		}
		if got := x.RecordBytes(); got != size {
			t.Fatalf("records of %d bytes: the index's mean is %d", size, got)
		}
		for _, loc := range locs[len(locs)/2:] {
			var q prefetch.Queue
			c.AddRecord(&q, loc, x.RecordBytes())
			start := prefetch.Addr(&c.Chunks[slotstore.LocSeq(loc)-c.FirstSeq].Bytes[slotstore.LocOff(loc)])
			var want []uintptr
			for line := start &^ 63; line < start+uintptr(size); line += 64 {
				want = append(want, line)
			}
			var got []uintptr
			for _, a := range q.Gathered() {
				got = append(got, a&^63)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("a record of %d bytes at %#x: lines %#x asked for, want %#x", size, start%64, got, want)
			}
		}
	}
}

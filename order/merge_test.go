package order

import (
	"cmp"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// rec is a test record: its partition, offset and timestamp.
type rec struct {
	p      int32
	offset int
	ts     int64
}

// newMerger returns a Merger of partitions 0 to partitions-1 that notes its
// timeouts in timeouts, if not nil.
func newMerger(t *testing.T, partitions int, wait, behindWait int64, timeouts *[]int32) *Merger[rec] {
	t.Helper()
	m, err := New(Options[rec]{
		Timestamp: func(r *rec) int64 { return r.ts }, Wait: wait, BehindWait: behindWait,
		OnTimeout: func(p int32, _ int64) {
			if timeouts != nil {
				*timeouts = append(*timeouts, p)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(partitions) {
		m.AddPartition(p)
	}
	return m
}

// reference merges whole partitions: repeatedly the head with the smallest
// timestamp, ties to the lower partition.
func reference(parts [][]rec) []rec {
	heads := make([]int, len(parts))
	var out []rec
	for {
		best := -1
		for p, recs := range parts {
			if heads[p] < len(recs) && (best < 0 || recs[heads[p]].ts < parts[best][heads[best]].ts) {
				best = p
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, parts[best][heads[best]])
		heads[best]++
	}
}

// randomParts makes n partitions of random records, timestamps mostly
// rising with some disorder and ties.
func randomParts(r *rand.Rand, n int) [][]rec {
	parts := make([][]rec, n)
	for p := range parts {
		ts := int64(r.IntN(20))
		for i := range r.IntN(60) {
			ts += int64(r.IntN(10)) - 2
			parts[p] = append(parts[p], rec{p: int32(p), offset: i, ts: ts})
		}
	}
	return parts
}

// TestOrderIndependentOfFetches: however the partitions' records are cut
// into fetches and whenever the fetches arrive, as long as no wait runs
// out, the Merger gives the reference order.
func TestOrderIndependentOfFetches(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 1))
		parts := randomParts(r, 1+r.IntN(5))
		want := reference(parts)
		m := newMerger(t, len(parts), 10, 1<<40, nil)
		now := int64(0)
		next := make([]int, len(parts))
		var got []rec
		for len(got) < len(want) {
			now += int64(r.IntN(3)) // never past a wait
			// A random partition's next fetch arrives, or records are
			// taken.
			if p := r.IntN(len(parts) + 1); p < len(parts) && next[p] <= len(parts[p]) {
				if next[p] == len(parts[p]) {
					m.Done(int32(p))
					next[p]++
					continue
				}
				n := 1 + r.IntN(len(parts[p])-next[p])
				m.Push(int32(p), slices.Clone(parts[p][next[p]:next[p]+n]), true, now)
				next[p] += n
				continue
			}
			for {
				x, p, ok := m.Pop(now)
				if !ok {
					break
				}
				if x.p != p {
					t.Fatalf("seed %d: record of partition %d popped as %d", seed, x.p, p)
				}
				got = append(got, x)
			}
			if len(got) < len(want) && m.Len() == 0 && allPushed(next, parts) {
				t.Fatalf("seed %d: %d of %d records, nothing buffered", seed, len(got), len(want))
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d:\n got %v\nwant %v", seed, got, want)
		}
	}
}

func allPushed(next []int, parts [][]rec) bool {
	for p := range parts {
		if next[p] <= len(parts[p]) {
			return false
		}
	}
	return true
}

// TestCaughtUpPartitionWaitedFor: a partition that has read all the broker
// had holds a record of another back for at most Wait from the record's
// arrival; a record that reaches it within the wait still goes first; past
// the wait the others go on (counted once per silence); and a partition
// silent for long holds a new record back as one just drained does.
func TestCaughtUpPartitionWaitedFor(t *testing.T) {
	var timeouts []int32
	m := newMerger(t, 2, 100, 1000, &timeouts)
	m.Push(1, []rec{{1, 0, 5}}, false, 0)
	m.Push(0, []rec{{0, 0, 10}}, false, 1)
	// Both have a record: the smaller timestamp goes, then partition 0's,
	// which arrived at 1, waits for partition 1.
	if x, _, ok := m.Pop(2); !ok || x.p != 1 {
		t.Fatalf("first pop %v %v, want partition 1's", x, ok)
	}
	if _, _, ok := m.Pop(50); ok {
		t.Fatal("took partition 0's record while partition 1 was still waited for")
	}
	// A record with a smaller timestamp arrives within the wait: it goes
	// first.
	m.Push(1, []rec{{1, 1, 7}}, false, 60)
	if x, _, _ := m.Pop(60); x.p != 1 || x.ts != 7 {
		t.Fatalf("popped %v, want partition 1's record at 7", x)
	}
	// Partition 1 drained again at 60, but the record waiting since 1 is
	// held only until 101 in all.
	if _, _, ok := m.Pop(100); ok {
		t.Fatal("the wait ran out early")
	}
	if x, _, ok := m.Pop(101); !ok || x.p != 0 {
		t.Fatalf("after the wait: %v %v, want partition 0's record", x, ok)
	}
	if !slices.Equal(timeouts, []int32{1}) {
		t.Fatalf("timeouts %v, want one for partition 1", timeouts)
	}
	// Partition 1 has been silent for long: a new record of partition 0
	// waits for it all the same, and its timeout is not counted again in
	// the same silence.
	m.Push(0, []rec{{0, 1, 20}}, false, 500)
	if _, _, ok := m.Pop(599); ok {
		t.Fatal("a record went before the wait for a silent partition ran out")
	}
	if x, _, ok := m.Pop(600); !ok || x.ts != 20 {
		t.Fatalf("after the wait: %v %v", x, ok)
	}
	if len(timeouts) != 1 {
		t.Fatalf("timeouts %v: one silence counted twice", timeouts)
	}
	// Records again on partition 1 end the silence; drained, it is waited
	// for, and a timeout counted, again.
	m.Push(1, []rec{{1, 2, 30}}, false, 700)
	m.Push(0, []rec{{0, 2, 40}}, false, 700)
	if x, _, _ := m.Pop(700); x.ts != 30 {
		t.Fatalf("popped %v, want ts 30", x)
	}
	if _, _, ok := m.Pop(750); ok {
		t.Fatal("partition 1, drained at 700, was not waited for")
	}
	if _, _, ok := m.Pop(800); !ok || !slices.Equal(timeouts, []int32{1, 1}) {
		t.Fatalf("after the second silence's wait: %v, timeouts %v", ok, timeouts)
	}
}

// TestNoCascade: when the partitions fall silent one after the other (the
// end of the traffic), a record held for one of them is not held again for
// the next: each record waits at most Wait in all.
func TestNoCascade(t *testing.T) {
	m := newMerger(t, 3, 100, 1000, nil)
	m.Push(0, []rec{{0, 0, 1}}, false, 0)
	m.Push(1, []rec{{1, 0, 2}}, false, 0)
	m.Push(2, []rec{{2, 0, 3}}, false, 0)
	var took []int64
	for now := int64(0); now <= 300 && len(took) < 3; now++ {
		for _, _, ok := m.Pop(now); ok; _, _, ok = m.Pop(now) {
			took = append(took, now)
		}
	}
	// Partition 0 drains at 0 and holds the others until 100; partition 1
	// drains at 100, but partition 2's record arrived at 0 and has waited
	// its 100 already.
	if !slices.Equal(took, []int64{0, 100, 100}) {
		t.Fatalf("records taken at %v, want [0 100 100]", took)
	}
}

// TestFirstRecordsAfterSilence: when traffic starts again after every
// partition was silent, the first records are still taken in timestamp
// order if they arrive within the wait of each other, whichever arrives
// first.
func TestFirstRecordsAfterSilence(t *testing.T) {
	m := newMerger(t, 2, 100, 1000, nil)
	m.Push(0, nil, false, 0)
	m.Push(1, nil, false, 0)
	m.Push(0, []rec{{0, 0, 20}}, false, 10_000)
	if _, _, ok := m.Pop(10_050); ok {
		t.Fatal("the first record after a silence went without waiting for the other partition")
	}
	m.Push(1, []rec{{1, 0, 10}}, false, 10_060)
	if x, _, _ := m.Pop(10_060); x.ts != 10 {
		t.Fatalf("popped %v, want the earlier record of the partition heard from later", x)
	}
}

// TestBehindPartitionWaitedLonger: a partition known to have more to read
// (or not yet read at all) holds the others for BehindWait, not Wait, and
// a caught-up answer shortens that to Wait.
func TestBehindPartitionWaitedLonger(t *testing.T) {
	var timeouts []int32
	m := newMerger(t, 2, 100, 1000, &timeouts)
	m.Push(0, []rec{{0, 0, 10}}, false, 1)
	if _, _, ok := m.Pop(500); ok {
		t.Fatal("a partition never fetched was not waited for")
	}
	m.Push(1, nil, false, 600) // its first fetch: caught up, empty
	if _, _, ok := m.Pop(600); !ok {
		t.Fatal("a record held for longer than Wait for a caught-up partition")
	}
	// A fetch that fails marks it behind again.
	m.Push(0, []rec{{0, 1, 20}}, false, 700)
	m.Push(1, nil, true, 700)
	if _, _, ok := m.Pop(1699); ok {
		t.Fatal("a partition behind was waited for less than BehindWait")
	}
	if _, _, ok := m.Pop(1700); !ok {
		t.Fatal("a partition behind was waited for longer than BehindWait")
	}
	if !slices.Equal(timeouts, []int32{1, 1}) {
		t.Fatalf("timeouts %v, want two for partition 1", timeouts)
	}
}

// TestDoneNeverWaitedFor: a partition at its end does not hold the others
// back, and fetches are given back once taken.
func TestDoneNeverWaitedFor(t *testing.T) {
	var released int
	m, err := New(Options[rec]{Timestamp: func(r *rec) int64 { return r.ts }, Wait: 100,
		Release: func(r []rec) { released += len(r) }})
	if err != nil {
		t.Fatal(err)
	}
	m.AddPartition(0)
	m.AddPartition(1)
	m.Done(1)
	m.Push(0, []rec{{0, 0, 1}, {0, 1, 2}}, true, 0)
	for i := range 2 {
		if _, _, ok := m.Pop(0); !ok {
			t.Fatalf("pop %d: held back by a partition at its end", i)
		}
	}
	if released != 2 {
		t.Fatalf("released %d records, want 2", released)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Options[rec]{}); err == nil {
		t.Error("no Timestamp accepted")
	}
	if _, err := New(Options[rec]{Timestamp: func(r *rec) int64 { return r.ts }, Wait: -1}); err == nil {
		t.Error("a negative wait accepted")
	}
}

// TestFollowReproducesRuns: a merge whose waits run out at random takes
// records out of timestamp order; a second merge of the same partitions,
// started where the first was at a checkpoint and given the runs the
// first noted after it, takes the same records in the same order however
// its fetches arrive, without a wait running out.
func TestFollowReproducesRuns(t *testing.T) {
	offset := func(r *rec) int64 { return int64(r.offset) }
	deviated := 0
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 2))
		parts := randomParts(r, 2+r.IntN(4))
		total := 0
		for _, p := range parts {
			total += len(p)
		}
		if total == 0 {
			continue
		}
		live, err := New(Options[rec]{Timestamp: func(r *rec) int64 { return r.ts }, Wait: 100, BehindWait: 100, Offset: offset})
		if err != nil {
			t.Fatal(err)
		}
		for p := range parts {
			live.AddPartition(int32(p))
		}
		cut := r.IntN(total)
		var got []rec
		var from []Position
		var runs []Run
		now := int64(0)
		next := make([]int, len(parts))
		for len(got) < total {
			now += int64(r.IntN(150)) // waits run out now and then
			if p := r.IntN(len(parts) + 2); p < len(parts) {
				n := min(len(parts[p])-next[p], r.IntN(3))
				live.Push(int32(p), slices.Clone(parts[p][next[p]:next[p]+n]), false, now)
				next[p] += n
				continue
			}
			for len(got) < total {
				if len(got) == cut {
					live.TakeRuns()
					from = live.Positions()
				}
				x, _, ok := live.Pop(now)
				if !ok {
					break
				}
				got = append(got, x)
			}
		}
		if len(got) == cut {
			from = live.Positions()
		}
		runs = live.TakeRuns()
		if !slices.Equal(got, reference(parts)) {
			deviated++
		}

		// The second merge, from the positions at the cut.
		again, err := New(Options[rec]{Timestamp: func(r *rec) int64 { return r.ts }, Wait: 100, BehindWait: 100, Offset: offset})
		if err != nil {
			t.Fatal(err)
		}
		for _, pos := range from {
			again.AddPartitionAt(pos.Partition, pos.Next)
			next[pos.Partition] = int(max(pos.Next, 0))
		}
		again.Follow(runs)
		var took []rec
		for steps := 0; len(took) < total-cut; steps++ {
			if steps > 100000 {
				t.Fatalf("seed %d: stuck after %d of %d records", seed, len(took), total-cut)
			}
			if p := r.IntN(len(parts) + 1); p < len(parts) {
				n := min(len(parts[p])-next[p], r.IntN(4))
				again.Push(int32(p), slices.Clone(parts[p][next[p]:next[p]+n]), next[p]+n < len(parts[p]), 0)
				next[p] += n
				continue
			}
			for {
				x, _, ok := again.Pop(0) // no wait ever runs out
				if !ok {
					break
				}
				took = append(took, x)
			}
		}
		if !slices.Equal(took, got[cut:]) {
			t.Fatalf("seed %d, from record %d (%v), runs %v:\n took %v\nwant %v", seed, cut, from, runs, took, got[cut:])
		}
		if again.Missed() != 0 || len(again.Following()) != 0 {
			t.Fatalf("seed %d: %d runs missed, %d not taken", seed, again.Missed(), len(again.Following()))
		}
	}
	if deviated < 50 {
		t.Fatalf("only %d of 500 merges left timestamp order: the test does not test runs", deviated)
	}
}

// FuzzDecodeRun: any bytes decode to an error or to a run that encodes to
// bytes decoding to the same run (varints may be longer than needed);
// never a panic.
func FuzzDecodeRun(f *testing.F) {
	r := Run{From: []Position{{0, 17}, {3, -1}}, Without: []int32{3}, Picks: 12}
	f.Add(r.AppendBinary(nil))
	f.Add([]byte{runVersion, 0, 0, 1})
	f.Add([]byte{runVersion, 200, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRun(b)
		if err != nil {
			return
		}
		again, err := DecodeRun(r.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%x decodes to %+v, which encodes to %x: %+v, %v", b, r, r.AppendBinary(nil), again, err)
		}
	})
}

// TestOrderByPrefixMaximum: the merge's order is a sort of the records by
// their own key: the greatest timestamp of their partition up to them,
// then the partition, then the offset. So a record's place among those of
// other partitions follows from its partition's records before it alone,
// and a subset of the records (those one task of a distributed job holds,
// say) keeps its order when sorted by the keys the whole partitions give.
func TestOrderByPrefixMaximum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		parts := randomParts(r, 1+r.IntN(5))
		type keyed struct {
			rec
			key int64
		}
		var all []keyed
		for _, recs := range parts {
			top := int64(math.MinInt64)
			for _, x := range recs {
				top = max(top, x.ts)
				all = append(all, keyed{x, top})
			}
		}
		slices.SortFunc(all, func(a, b keyed) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.p, b.p), cmp.Compare(a.offset, b.offset))
		})
		want := reference(parts)
		if len(all) != len(want) {
			t.Fatalf("trial %d: %d records sorted, %d merged", trial, len(all), len(want))
		}
		for i := range want {
			if all[i].rec != want[i] {
				t.Fatalf("trial %d: record %d is %+v by the key, %+v by the merge", trial, i, all[i].rec, want[i])
			}
		}
	}
}

// TestPopAllocatesPerFetchNotPerRecord: taking a record allocates
// nothing; what a Merger allocates comes with fetches.
func TestPopAllocatesPerFetchNotPerRecord(t *testing.T) {
	const perFetch = 100
	m, err := New(Options[rec]{
		Timestamp: func(r *rec) int64 { return r.ts },
		Offset:    func(r *rec) int64 { return int64(r.offset) },
		Wait:      1 << 40, BehindWait: 1 << 40,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.AddPartition(0)
	m.AddPartition(1)
	// Two slices a partition, taken in turn: the records a fetch leaves
	// in the Merger are those of the last one.
	var fetches [2][2][]rec
	for p := range fetches {
		for k := range fetches[p] {
			fetches[p][k] = make([]rec, perFetch)
		}
	}
	round, ts := 0, int64(0)
	allocs := testing.AllocsPerRun(100, func() {
		for p := range fetches {
			f := fetches[p][round%2]
			for i := range f {
				f[i] = rec{p: int32(p), offset: round*perFetch + i, ts: ts + int64(i)}
			}
			m.Push(int32(p), f, false, 0)
		}
		round, ts = round+1, ts+perFetch
		taken := 0
		for _, _, ok := m.Pop(0); ok; _, _, ok = m.Pop(0) {
			taken++
		}
		if taken < 2*perFetch-2 {
			t.Fatalf("Pop took %d records of %d", taken, 2*perFetch)
		}
	})
	if allocs > 4 {
		t.Errorf("%.0f allocations for two fetches of %d records, want at most 4", allocs, perFetch)
	}
}

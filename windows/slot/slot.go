package slot

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
)

// NoTimer marks a slot without a pending timer.
const NoTimer = watermark.Max

// Win is one window's state in a slot. For tumbling and sliding specs it is
// a pane, a slice of the time axis gcd(size, slide) wide, and only start and
// acc are used (and end by count rules, below): every window is a union of
// whole panes, so an event updates one pane however many windows contain
// it. For session specs it is a
// session window; sessions of a slot never overlap or touch: those that
// would are merged into one. One type for both keeps a slot's inline window
// small.
//
// The panes of a count rule (spec.running) keep in end a running count: the
// events of the slot's panes up to and including this one,
// plus a base that purges leave alone. A window that holds panes lo to hi
// then counts panes[hi].end - panes[lo].end + panes[lo].n, reading two
// panes instead of all of them: an attacker's sliding minute holds sixty,
// and every one of its events is decided.
type Win struct {
	Start, End int64 // end: sessions, or a count rule's running count
	Rev        int32 // sessions only
	Fired      bool  // sessions only
	Acc
}

// firedWin remembers a pane-based heatmap window that fired and is kept for
// allowed lateness, so a late event re-fires it with the next revision.
type firedWin struct {
	Start int64
	rev   int32
}

// Slot is the state of one (rule or heatmap, key): its panes or sessions and
// its timer. Slots live in the cache and, when evicted, in the Backend.
//
// With hundreds of thousands of keys nearly every access to a slot is a
// cache miss, paid per cache line: what an event touches (the fields up to
// and including id, the inline window among them) fills the first two
// lines, and a slot is 192 bytes, a size class whose objects are 64-byte
// aligned, so those are exactly two lines. TestSlotLayout keeps it so.
type Slot struct {
	Spec *Spec
	Wins []Win // panes or sessions, sorted by start (sessions also by end)
	// purgeAt is at most the earliest cleanup time of anything in the slot,
	// so that purge, run on every access, mostly returns at once.
	purgeAt int64
	// TimerAt is the time of this slot's pending timer in the queue.
	TimerAt int64
	// FiredEnd is the end of the last pane-based window the watermark fired:
	// every window with content ending at or before it has fired.
	FiredEnd   int64
	RingIdx    int32 // position in the cache's ring, -1 when not cached
	Dirty      bool  // changed since last written to the Backend
	Persisted  bool  // the Backend may hold a copy
	Referenced bool  // used since the clock hand last passed
	Queued     bool  // listed in the cache's changed slots
	// Most keys have one session or pane at a time: keeping it in the slot
	// saves an allocation and, more to the point, a cache miss per access.
	Inline [1]Win
	ID     ID // the key's hash in the cache

	// Cold: firing with allowed lateness, a distinct rule's index, writing
	// back, timers of evicted slots.
	More *slotMore
	// Weight is what the cache counts s for beyond one slot: a distinct
	// rule's sets in slots' worth of bytes (cache.weigh).
	Weight int32
	_      [12]byte // keeps a slot 192 bytes (see above)
	Key    string
	// StoredTimer is the slot's TimerAt as last written to the cold store:
	// writing through, the time of the timer entry the Backend holds for
	// it (NoTimer: none; docs/format/state.md "Timers").
	StoredTimer int64
	// ColdLoc is the location of the slot's record in the cold store, 0
	// for none, while the slot is cached (see stateEntry).
	ColdLoc uint64
	Num     uint32 // in the cache's slotTable
	_       [4]byte
}

// slotMore holds what only some slots have, out of line.
type slotMore struct {
	// fired are a pane-based heatmap's windows that fired and are kept for
	// allowed lateness, by start.
	fired []firedWin
	// distinct indexes the values of a distinct rule's panes (see
	// DistinctIndex); nil until a decision needs it.
	distinct *DistinctIndex
	// InOrder screens the windows of an avg, ratio or quantile rule's
	// events in order.
	InOrder InOrderScreen
	// distinctLevel is how sparsely a distinct rule's values are sampled:
	// its sets keep the values whose hashes' top distinctLevel bits are
	// zero (CapDistinct); 0 keeps them all.
	distinctLevel uint8
}

// DistinctLevel returns s's sampling level (see slotMore).
func (s *Slot) DistinctLevel() uint8 {
	if s.More == nil {
		return 0
	}
	return s.More.distinctLevel
}

// FiredWins returns the fired windows of a pane-based heatmap's slot.
func (s *Slot) FiredWins() []firedWin {
	if s.More == nil {
		return nil
	}
	return s.More.fired
}

// Extra returns s.more, made if needed.
func (s *Slot) Extra() *slotMore {
	if s.More == nil {
		s.More = &slotMore{}
	}
	return s.More
}

// Reset makes s an empty slot of key. Field by field: assigning a whole
// slot built a copy on the stack, and the fresh slot (cache.load) is reset
// for most events' states when keys are millions. TestSlotReset checks
// that it leaves nothing of the slot's last use.
func (s *Slot) Reset(key string, sp *Spec) {
	s.Spec = sp
	s.Inline[0] = Win{}
	s.Wins = s.Inline[:0:1]
	s.purgeAt = watermark.Max
	s.TimerAt = NoTimer
	s.FiredEnd = watermark.Min
	s.RingIdx = -1
	s.Dirty, s.Persisted, s.Referenced, s.Queued = false, false, false, false
	s.ID = ID{}
	s.More, s.Weight = nil, 0
	s.Key = key
	s.StoredTimer = NoTimer
	s.ColdLoc = 0
}

// Events is how many events the windows of s hold.
func (s *Slot) Events() int64 {
	n := int64(0)
	for i := range s.Wins {
		n += s.Wins[i].Acc.N
	}
	return n
}

// Empty reports whether s holds no window, fired ones kept for lateness
// included.
func (s *Slot) Empty() bool {
	return len(s.Wins) == 0 && len(s.FiredWins()) == 0
}

// PaneAt returns the pane starting at start, creating it if needed. Events
// mostly arrive in order, so the last pane is checked first.
func (s *Slot) PaneAt(start int64) *Win {
	n := len(s.Wins)
	if n > 0 && s.Wins[n-1].Start == start {
		return &s.Wins[n-1]
	}
	if n == 0 || s.Wins[n-1].Start < start {
		s.Wins = append(s.Wins, Win{Start: start, End: s.runningBefore(n)})
		return &s.Wins[n]
	}
	i, found := slices.BinarySearchFunc(s.Wins, start, func(p Win, t int64) int { return cmp.Compare(p.Start, t) })
	if !found {
		s.Wins = slices.Insert(s.Wins, i, Win{Start: start, End: s.runningBefore(i)})
	}
	return &s.Wins[i]
}

// paneIndex returns the position of p, one of s.wins: mostly the last.
func (s *Slot) paneIndex(p *Win) int {
	if n := len(s.Wins); n > 0 && &s.Wins[n-1] == p {
		return n - 1
	}
	i, _ := slices.BinarySearchFunc(s.Wins, p.Start, func(w Win, t int64) int { return cmp.Compare(w.Start, t) })
	return i
}

// runningBefore is the running count (see win) of an empty pane placed
// before pane i: that of the pane before it, or the base. 0 unless the
// slot's spec keeps running counts.
func (s *Slot) runningBefore(i int) int64 {
	switch {
	case !s.Spec.Running || len(s.Wins) == 0:
		return 0
	case i > 0:
		return s.Wins[i-1].End
	default:
		return s.Wins[0].End - s.Wins[0].N
	}
}

// Counted adds an event of pane p, one of s.wins, to the running counts of
// p and the panes after it: mostly p is the last.
func (s *Slot) Counted(p *Win) {
	for i := len(s.Wins) - 1; i >= 0; i-- {
		s.Wins[i].End++
		if &s.Wins[i] == p {
			return
		}
	}
}

// countPanes sets the running counts of the panes of a count rule from
// their counts (base 0): the stored state does not hold them.
func (s *Slot) countPanes() {
	var c int64
	for i := range s.Wins {
		c += s.Wins[i].N
		s.Wins[i].End = c
	}
}

// Purge drops the windows whose state is due for cleanup at t.
func (s *Slot) Purge(t int64) {
	if t < s.purgeAt {
		return
	}
	sp := s.Spec
	s.purgeAt = watermark.Max
	if sp.WindowType == rules.Session {
		i := 0
		for i < len(s.Wins) && sp.Cleanup(s.Wins[i].End) <= t {
			i++
		}
		s.Wins = dropFront(s.Wins, i)
		if len(s.Wins) > 0 {
			s.purgeAt = sp.Cleanup(s.Wins[0].End) // ends are sorted too
		}
		return
	}
	i := 0
	for i < len(s.Wins) && sp.PaneCleanup(s.Wins[i].Start) <= t {
		i++
	}
	if x := s.DistinctIndex(); x != nil {
		for j := range i {
			x.forget(&s.Wins[j])
		}
	}
	s.Wins = dropFront(s.Wins, i)
	if len(s.Wins) > 0 {
		s.purgeAt = sp.PaneCleanup(s.Wins[0].Start)
	}
	if fired := s.FiredWins(); len(fired) > 0 {
		j := 0
		for j < len(fired) && sp.Cleanup(fired[j].Start+sp.Size) <= t {
			j++
		}
		fired = dropFront(fired, j)
		s.More.fired = fired
		if len(fired) > 0 {
			s.purgeAt = min(s.purgeAt, sp.Cleanup(fired[0].Start+sp.Size))
		}
	}
}

// Added lowers purgeAt for content that can be purged at cleanup.
func (s *Slot) Added(cleanup int64) {
	s.purgeAt = min(s.purgeAt, cleanup)
}

// dropFront removes the first n elements, reusing the backing array.
func dropFront[T any](xs []T, n int) []T {
	if n == 0 {
		return xs
	}
	m := copy(xs, xs[n:])
	clear(xs[m:])
	return xs[:m]
}

// BumpFired returns the revision for re-firing the window starting at start:
// one more than its last, or 0 when it never fired.
func (s *Slot) BumpFired(start int64) int32 {
	m := s.Extra()
	for i := range m.fired {
		if m.fired[i].Start == start {
			m.fired[i].rev++
			return m.fired[i].rev
		}
	}
	i, _ := slices.BinarySearchFunc(m.fired, start, func(f firedWin, t int64) int { return cmp.Compare(f.Start, t) })
	m.fired = slices.Insert(m.fired, i, firedWin{Start: start})
	s.Added(s.Spec.Cleanup(start + s.Spec.Size))
	return 0
}

// ID is the hash a slot is found by in the cache.
type ID [2]uint64

// HashText is the 128-bit hash states are found by (see stateIndex): the hash
// of their key's HashedText.
func HashText(seeds [2]maphash.Seed, text []byte) ID {
	return ID{maphash.Bytes(seeds[0], text), maphash.Bytes(seeds[1], text)}
}

// HashKey is the hash of a whole slot key held as a string (a timer's):
// the same as HashText's of its HashedText.
func HashKey(seeds [2]maphash.Seed, key string) ID {
	text := HashedText(key)
	return ID{maphash.String(seeds[0], text), maphash.String(seeds[1], text)}
}

// HashedText is the part of a slot key its hash covers: the key attributes'
// texts and the 0 bytes between them, without the spec index (each spec has
// an index of its own) or the last 0 byte. A one-attribute key's is the
// attribute's text itself.
func HashedText[K string | []byte](key K) K {
	if len(key) <= 2 {
		return key[len(key):]
	}
	return key[2 : len(key)-1]
}

// HotSlotBytes is what a decoded slot is taken to cost in memory: the
// slot, its key, its index and ring entries, and out-of-line panes
// (docs/format/state.md "Memory").
const HotSlotBytes = 512

// FirstFrom returns the position of the first of panes that starts at or
// after t.
func FirstFrom(panes []Win, t int64) int {
	i := 0
	for i < len(panes) && panes[i].Start < t {
		i++
	}
	return i
}

// InOrderScreen is what bestInOrder's screen found over the windows of an
// avg, ratio or quantile rule's slot whose events come in order: the
// extreme, over the windows, of the quantity that rules a window out
// (quantile: below − q·(n−1), its least, out above 0.5; avg and ratio:
// sum − threshold·n, its greatest, out below 0). Each event added to the
// last pane is in every one of those windows and moves each one's
// quantity alike, so the extreme follows the events (moved) and rules
// them all out, or not, without a pass over the panes, until a pane is
// added or the first window changes.
type InOrderScreen struct {
	First    int64 // the first window's start
	LastPane int64 // the last pane's start
	Panes    int   // the slot's panes; 0 for none
	Gen      int32 // the spec's screenGen: a Reload may change the threshold
	// Bound is the extreme, and slack the rounding its float sums may
	// have gathered.
	Bound, Slack float64
}

// Current reports whether x, if not nil, holds the screen of sp's windows
// over panes panes from first.
func (x *InOrderScreen) Current(sp *Spec, panes []Win, first int64) bool {
	return x != nil && x.Panes == len(panes) && x.Panes > 0 && x.LastPane == panes[len(panes)-1].Start &&
		x.First == first && x.Gen == sp.ScreenGen
}

// RulesOut reports whether no window may exceed the threshold.
func (x *InOrderScreen) RulesOut(sp *Spec) bool {
	if sp.Agg == rules.Quantile {
		return x.Bound > 0.5+x.Slack
	}
	return x.Bound < -x.Slack
}

// Moved follows an event added to p, one of s's panes, that moved the
// quantity of every window holding p by d; a pane added or purged since,
// or an event in another pane, makes x no longer current.
func (x *InOrderScreen) Moved(s *Slot, p *Win, d float64) {
	if x.Panes != len(s.Wins) || p != &s.Wins[len(s.Wins)-1] || p.Start != x.LastPane {
		x.Panes = 0
		return
	}
	x.Bound += d
	x.Slack += 1e-9 * (math.Abs(d) + 1)
}

package windows

import (
	"cmp"
	"hash/maphash"
	"math"
	"slices"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
)

// noTimer marks a slot without a pending timer.
const noTimer = watermark.Max

// win is one window's state in a slot. For tumbling and sliding specs it is
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
type win struct {
	start, end int64 // end: sessions, or a count rule's running count
	rev        int32 // sessions only
	fired      bool  // sessions only
	acc
}

// firedWin remembers a pane-based heatmap window that fired and is kept for
// allowed lateness, so a late event re-fires it with the next revision.
type firedWin struct {
	start int64
	rev   int32
}

// slot is the state of one (rule or heatmap, key): its panes or sessions and
// its timer. Slots live in the cache and, when evicted, in the Backend.
//
// With hundreds of thousands of keys nearly every access to a slot is a
// cache miss, paid per cache line: what an event touches (the fields up to
// and including id, the inline window among them) fills the first two
// lines, and a slot is 192 bytes, a size class whose objects are 64-byte
// aligned, so those are exactly two lines. TestSlotLayout keeps it so.
type slot struct {
	sp   *spec
	wins []win // panes or sessions, sorted by start (sessions also by end)
	// purgeAt is at most the earliest cleanup time of anything in the slot,
	// so that purge, run on every access, mostly returns at once.
	purgeAt int64
	// timerAt is the time of this slot's pending timer in the queue.
	timerAt int64
	// firedEnd is the end of the last pane-based window the watermark fired:
	// every window with content ending at or before it has fired.
	firedEnd   int64
	ringIdx    int32 // position in the cache's ring, -1 when not cached
	dirty      bool  // changed since last written to the Backend
	persisted  bool  // the Backend may hold a copy
	referenced bool  // used since the clock hand last passed
	queued     bool  // listed in the cache's changed slots
	// Most keys have one session or pane at a time: keeping it in the slot
	// saves an allocation and, more to the point, a cache miss per access.
	inline [1]win
	id     slotID // the key's hash in the cache

	// Cold: firing with allowed lateness, a distinct rule's index, writing
	// back, timers of evicted slots.
	more *slotMore
	// weight is what the cache counts s for beyond one slot: a distinct
	// rule's sets in slots' worth of bytes (cache.weigh).
	weight int32
	_      [12]byte // keeps a slot 192 bytes (see above)
	key    string
	// storedTimer is the slot's timerAt as last written to the cold store:
	// writing through, the time of the timer entry the Backend holds for
	// it (noTimer: none; docs/format/state.md "Timers").
	storedTimer int64
	// coldLoc is the location of the slot's record in the cold store, 0
	// for none, while the slot is cached (see stateEntry).
	coldLoc uint64
	num     uint32 // in the cache's slotTable
	_       [4]byte
}

// slotMore holds what only some slots have, out of line.
type slotMore struct {
	// fired are a pane-based heatmap's windows that fired and are kept for
	// allowed lateness, by start.
	fired []firedWin
	// distinct indexes the values of a distinct rule's panes (see
	// distinctIndex); nil until a decision needs it.
	distinct *distinctIndex
	// inOrder screens the windows of an avg, ratio or quantile rule's
	// events in order.
	inOrder inOrderScreen
	// distinctLevel is how sparsely a distinct rule's values are sampled:
	// its sets keep the values whose hashes' top distinctLevel bits are
	// zero (capDistinct); 0 keeps them all.
	distinctLevel uint8
}

// distinctLevel returns s's sampling level (see slotMore).
func (s *slot) distinctLevel() uint8 {
	if s.more == nil {
		return 0
	}
	return s.more.distinctLevel
}

// firedWins returns the fired windows of a pane-based heatmap's slot.
func (s *slot) firedWins() []firedWin {
	if s.more == nil {
		return nil
	}
	return s.more.fired
}

// extra returns s.more, made if needed.
func (s *slot) extra() *slotMore {
	if s.more == nil {
		s.more = &slotMore{}
	}
	return s.more
}

// reset makes s an empty slot of key. Field by field: assigning a whole
// slot built a copy on the stack, and the fresh slot (cache.load) is reset
// for most events' states when keys are millions. TestSlotReset checks
// that it leaves nothing of the slot's last use.
func (s *slot) reset(key string, sp *spec) {
	s.sp = sp
	s.inline[0] = win{}
	s.wins = s.inline[:0:1]
	s.purgeAt = watermark.Max
	s.timerAt = noTimer
	s.firedEnd = watermark.Min
	s.ringIdx = -1
	s.dirty, s.persisted, s.referenced, s.queued = false, false, false, false
	s.id = slotID{}
	s.more, s.weight = nil, 0
	s.key = key
	s.storedTimer = noTimer
	s.coldLoc = 0
}

// events is how many events the windows of s hold.
func (s *slot) events() int64 {
	n := int64(0)
	for i := range s.wins {
		n += s.wins[i].acc.n
	}
	return n
}

func (s *slot) empty() bool {
	return len(s.wins) == 0 && len(s.firedWins()) == 0
}

// paneAt returns the pane starting at start, creating it if needed. Events
// mostly arrive in order, so the last pane is checked first.
func (s *slot) paneAt(start int64) *win {
	n := len(s.wins)
	if n > 0 && s.wins[n-1].start == start {
		return &s.wins[n-1]
	}
	if n == 0 || s.wins[n-1].start < start {
		s.wins = append(s.wins, win{start: start, end: s.runningBefore(n)})
		return &s.wins[n]
	}
	i, found := slices.BinarySearchFunc(s.wins, start, func(p win, t int64) int { return cmp.Compare(p.start, t) })
	if !found {
		s.wins = slices.Insert(s.wins, i, win{start: start, end: s.runningBefore(i)})
	}
	return &s.wins[i]
}

// paneIndex returns the position of p, one of s.wins: mostly the last.
func (s *slot) paneIndex(p *win) int {
	if n := len(s.wins); n > 0 && &s.wins[n-1] == p {
		return n - 1
	}
	i, _ := slices.BinarySearchFunc(s.wins, p.start, func(w win, t int64) int { return cmp.Compare(w.start, t) })
	return i
}

// runningBefore is the running count (see win) of an empty pane placed
// before pane i: that of the pane before it, or the base. 0 unless the
// slot's spec keeps running counts.
func (s *slot) runningBefore(i int) int64 {
	switch {
	case !s.sp.running || len(s.wins) == 0:
		return 0
	case i > 0:
		return s.wins[i-1].end
	default:
		return s.wins[0].end - s.wins[0].n
	}
}

// counted adds an event of pane p, one of s.wins, to the running counts of
// p and the panes after it: mostly p is the last.
func (s *slot) counted(p *win) {
	for i := len(s.wins) - 1; i >= 0; i-- {
		s.wins[i].end++
		if &s.wins[i] == p {
			return
		}
	}
}

// countPanes sets the running counts of the panes of a count rule from
// their counts (base 0): the stored state does not hold them.
func (s *slot) countPanes() {
	var c int64
	for i := range s.wins {
		c += s.wins[i].n
		s.wins[i].end = c
	}
}

// purge drops the windows whose state is due for cleanup at t.
func (s *slot) purge(t int64) {
	if t < s.purgeAt {
		return
	}
	sp := s.sp
	s.purgeAt = watermark.Max
	if sp.wtype == rules.Session {
		i := 0
		for i < len(s.wins) && sp.cleanup(s.wins[i].end) <= t {
			i++
		}
		s.wins = dropFront(s.wins, i)
		if len(s.wins) > 0 {
			s.purgeAt = sp.cleanup(s.wins[0].end) // ends are sorted too
		}
		return
	}
	i := 0
	for i < len(s.wins) && sp.paneCleanup(s.wins[i].start) <= t {
		i++
	}
	if x := s.distinctIndex(); x != nil {
		for j := range i {
			x.forget(&s.wins[j])
		}
	}
	s.wins = dropFront(s.wins, i)
	if len(s.wins) > 0 {
		s.purgeAt = sp.paneCleanup(s.wins[0].start)
	}
	if fired := s.firedWins(); len(fired) > 0 {
		j := 0
		for j < len(fired) && sp.cleanup(fired[j].start+sp.size) <= t {
			j++
		}
		fired = dropFront(fired, j)
		s.more.fired = fired
		if len(fired) > 0 {
			s.purgeAt = min(s.purgeAt, sp.cleanup(fired[0].start+sp.size))
		}
	}
}

// added lowers purgeAt for content that can be purged at cleanup.
func (s *slot) added(cleanup int64) {
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

// bumpFired returns the revision for re-firing the window starting at start:
// one more than its last, or 0 when it never fired.
func (s *slot) bumpFired(start int64) int32 {
	m := s.extra()
	for i := range m.fired {
		if m.fired[i].start == start {
			m.fired[i].rev++
			return m.fired[i].rev
		}
	}
	i, _ := slices.BinarySearchFunc(m.fired, start, func(f firedWin, t int64) int { return cmp.Compare(f.start, t) })
	m.fired = slices.Insert(m.fired, i, firedWin{start: start})
	s.added(s.sp.cleanup(start + s.sp.size))
	return 0
}

// slotID is the hash a slot is found by in the cache.
type slotID [2]uint64

// hashKey is the 128-bit hash states are found by (see stateIndex): the hash
// of their key's hashedText.
func hashKey(seeds [2]maphash.Seed, text []byte) slotID {
	return slotID{maphash.Bytes(seeds[0], text), maphash.Bytes(seeds[1], text)}
}

// hashSlotKey is the hash of a whole slot key held as a string (a timer's):
// the same as hashKey's of its hashedText.
func hashSlotKey(seeds [2]maphash.Seed, key string) slotID {
	text := hashedText(key)
	return slotID{maphash.String(seeds[0], text), maphash.String(seeds[1], text)}
}

// hashedText is the part of a slot key its hash covers: the key attributes'
// texts and the 0 bytes between them, without the spec index (each spec has
// an index of its own) or the last 0 byte. A one-attribute key's is the
// attribute's text itself.
func hashedText[K string | []byte](key K) K {
	if len(key) <= 2 {
		return key[len(key):]
	}
	return key[2 : len(key)-1]
}

// HotSlotBytes is what a decoded slot is taken to cost in memory: the
// slot, its key, its index and ring entries, and out-of-line panes
// (docs/format/state.md "Memory").
const HotSlotBytes = 512

// firstFrom returns the position of the first of panes that starts at or
// after t.
func firstFrom(panes []win, t int64) int {
	i := 0
	for i < len(panes) && panes[i].start < t {
		i++
	}
	return i
}

// inOrderScreen is what bestInOrder's screen found over the windows of an
// avg, ratio or quantile rule's slot whose events come in order: the
// extreme, over the windows, of the quantity that rules a window out
// (quantile: below − q·(n−1), its least, out above 0.5; avg and ratio:
// sum − threshold·n, its greatest, out below 0). Each event added to the
// last pane is in every one of those windows and moves each one's
// quantity alike, so the extreme follows the events (moved) and rules
// them all out, or not, without a pass over the panes, until a pane is
// added or the first window changes.
type inOrderScreen struct {
	first    int64 // the first window's start
	lastPane int64 // the last pane's start
	panes    int   // the slot's panes; 0 for none
	gen      int32 // the spec's screenGen: a Reload may change the threshold
	// bound is the extreme, and slack the rounding its float sums may
	// have gathered.
	bound, slack float64
}

// current reports whether x, if not nil, holds the screen of sp's windows
// over panes panes from first.
func (x *inOrderScreen) current(sp *spec, panes []win, first int64) bool {
	return x != nil && x.panes == len(panes) && x.panes > 0 && x.lastPane == panes[len(panes)-1].start &&
		x.first == first && x.gen == sp.screenGen
}

// rulesOut reports whether no window may exceed the threshold.
func (x *inOrderScreen) rulesOut(sp *spec) bool {
	if sp.agg == rules.Quantile {
		return x.bound > 0.5+x.slack
	}
	return x.bound < -x.slack
}

// moved follows an event added to p, one of s's panes, that moved the
// quantity of every window holding p by d; a pane added or purged since,
// or an event in another pane, makes x no longer current.
func (x *inOrderScreen) moved(s *slot, p *win, d float64) {
	if x.panes != len(s.wins) || p != &s.wins[len(s.wins)-1] || p.start != x.lastPane {
		x.panes = 0
		return
	}
	x.bound += d
	x.slack += 1e-9 * (math.Abs(d) + 1)
}

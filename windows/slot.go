package windows

import (
	"cmp"
	"slices"

	"github.com/riskstream/riskstream/rules"
)

// noTimer marks a slot without a pending timer.
const noTimer = MaxWatermark

// pane is a slice of a tumbling or sliding window's time axis, gcd(size,
// slide) wide: every window is a union of whole panes, so an event updates
// one pane however many windows contain it.
type pane struct {
	start int64
	acc
}

// session is one session window of a key. Sessions of a slot never overlap
// or touch: those that would are merged into one.
type session struct {
	start, end int64
	fired      bool
	rev        int32
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
type slot struct {
	// Hot fields first, then the inline storage they usually point into,
	// so that an access touches as few cache lines as possible.
	sp       *spec
	panes    []pane    // tumbling and sliding, sorted by start
	sessions []session // session windows, sorted by start (and so by end)
	// purgeAt is at most the earliest cleanup time of anything in the slot,
	// so that purge, run on every access, mostly returns at once.
	purgeAt int64
	// timerAt is the time of this slot's pending timer in the queue.
	timerAt int64
	// firedEnd is the end of the last pane-based window the watermark fired:
	// every window with content ending at or before it has fired.
	firedEnd int64
	fired    []firedWin

	dirty      bool // changed since last written to the Backend
	persisted  bool // the Backend may hold a copy
	referenced bool // used since the clock hand last passed
	ringIdx    int  // position in the cache's ring, -1 when not cached
	key        string
	id         slotID // the key's hash in the cache

	// Most keys have one session or pane at a time: keeping it in the slot
	// saves an allocation and, more to the point, a cache miss per access.
	inlineSession [1]session
	inlinePane    [1]pane
}

func newSlot(key string, sp *spec) *slot {
	s := &slot{key: key, sp: sp, firedEnd: MinWatermark, timerAt: noTimer, purgeAt: MaxWatermark, ringIdx: -1}
	s.panes, s.sessions = s.inlinePane[:0:1], s.inlineSession[:0:1]
	return s
}

func (s *slot) empty() bool {
	return len(s.panes) == 0 && len(s.sessions) == 0 && len(s.fired) == 0
}

// paneAt returns the pane starting at start, creating it if needed. Events
// mostly arrive in order, so the last pane is checked first.
func (s *slot) paneAt(start int64) *pane {
	n := len(s.panes)
	if n > 0 && s.panes[n-1].start == start {
		return &s.panes[n-1]
	}
	if n == 0 || s.panes[n-1].start < start {
		s.panes = append(s.panes, pane{start: start})
		return &s.panes[n]
	}
	i, found := slices.BinarySearchFunc(s.panes, start, func(p pane, t int64) int { return cmp.Compare(p.start, t) })
	if !found {
		s.panes = slices.Insert(s.panes, i, pane{start: start})
	}
	return &s.panes[i]
}

// purge drops the windows whose state is due for cleanup at t.
func (s *slot) purge(t int64) {
	if t < s.purgeAt {
		return
	}
	sp := s.sp
	s.purgeAt = MaxWatermark
	if sp.wtype == rules.Session {
		i := 0
		for i < len(s.sessions) && sp.cleanup(s.sessions[i].end) <= t {
			i++
		}
		s.sessions = dropFront(s.sessions, i)
		if len(s.sessions) > 0 {
			s.purgeAt = sp.cleanup(s.sessions[0].end) // ends are sorted too
		}
		return
	}
	i := 0
	for i < len(s.panes) && sp.paneCleanup(s.panes[i].start) <= t {
		i++
	}
	s.panes = dropFront(s.panes, i)
	j := 0
	for j < len(s.fired) && sp.cleanup(s.fired[j].start+sp.size) <= t {
		j++
	}
	s.fired = dropFront(s.fired, j)
	if len(s.panes) > 0 {
		s.purgeAt = sp.paneCleanup(s.panes[0].start)
	}
	if len(s.fired) > 0 {
		s.purgeAt = min(s.purgeAt, sp.cleanup(s.fired[0].start+sp.size))
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
	for i := range s.fired {
		if s.fired[i].start == start {
			s.fired[i].rev++
			return s.fired[i].rev
		}
	}
	i, _ := slices.BinarySearchFunc(s.fired, start, func(f firedWin, t int64) int { return cmp.Compare(f.start, t) })
	s.fired = slices.Insert(s.fired, i, firedWin{start: start})
	s.added(s.sp.cleanup(start + s.sp.size))
	return 0
}

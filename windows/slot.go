package windows

import (
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
	key      string
	sp       *spec
	panes    []pane    // tumbling and sliding, sorted by start
	sessions []session // session windows, sorted by start (and so by end)
	fired    []firedWin
	// firedEnd is the end of the last pane-based window the watermark fired:
	// every window with content ending at or before it has fired.
	firedEnd int64
	// timerAt is the time of this slot's pending timer in the queue.
	timerAt int64

	dirty      bool // changed since last written to the Backend
	persisted  bool // the Backend may hold a copy
	referenced bool // used since the clock hand last passed
	ringIdx    int  // position in the cache's ring, -1 when not cached
}

func newSlot(key string, sp *spec) *slot {
	return &slot{key: key, sp: sp, firedEnd: MinWatermark, timerAt: noTimer, ringIdx: -1}
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
	i, found := slices.BinarySearchFunc(s.panes, start, func(p pane, t int64) int {
		switch {
		case p.start < t:
			return -1
		case p.start > t:
			return 1
		}
		return 0
	})
	if !found {
		s.panes = slices.Insert(s.panes, i, pane{start: start})
	}
	return &s.panes[i]
}

// purge drops the windows whose state is due for cleanup at t.
func (s *slot) purge(t int64) {
	sp := s.sp
	if sp.wtype == rules.Session {
		i := 0
		for i < len(s.sessions) && sp.cleanup(s.sessions[i].end) <= t {
			i++
		}
		s.sessions = dropFront(s.sessions, i)
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
	i, _ := slices.BinarySearchFunc(s.fired, start, func(f firedWin, t int64) int {
		switch {
		case f.start < t:
			return -1
		case f.start > t:
			return 1
		}
		return 0
	})
	s.fired = slices.Insert(s.fired, i, firedWin{start: start})
	return 0
}

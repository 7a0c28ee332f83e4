package gen

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"time"
)

// Bursts and scrapes are the anomalies the example rules look for. Their
// sizes are drawn so that each one breaks its rule on its own:
//   - a burst is 6–15 /pay requests of one user within 1–8 s (the rule:
//     more than 5 payments in 60 s);
//   - a scrape is 220–400 /search or /profile requests from a fresh device,
//     20–100 ms apart (the rule: a session, gap 30 s, of more than 200).
const (
	minBurstEvents, maxBurstEvents = 6, 15
	minBurstSpan, maxBurstSpan     = int64(time.Second), int64(8 * time.Second)

	minScrapeEvents, maxScrapeEvents = 220, 400
	minScrapeGap, maxScrapeGap       = int64(20 * time.Millisecond), int64(100 * time.Millisecond)

	meanBurstEvents  = (minBurstEvents + maxBurstEvents) / 2.0
	meanScrapeEvents = (minScrapeEvents + maxScrapeEvents) / 2.0
)

// session is a burst or a scrape in progress: the requests it has yet to
// make, and the identity they share.
type session struct {
	next   int64 // true time of the next request, ns since Start
	id     int64 // start order, to break ties deterministically
	left   int   // requests still to make, the next one included
	first  bool  // no request made yet: the session is not counted yet
	scrape bool
	user   int32
	// device is the user's device for a burst, the scraper number for a
	// scrape (scrapers use devices of their own).
	device  int32
	channel uint8
	// offsets are a burst's remaining request times, ascending, relative to
	// its start; next already includes offsets[0].
	offsets []int64
	start   int64 // a burst's start, ns since Start
}

// advance moves s to its next request; it returns false when s is done.
func (s *session) advance(r *rand.Rand) bool {
	s.left--
	if s.left == 0 {
		return false
	}
	if s.scrape {
		s.next += minScrapeGap + r.Int64N(maxScrapeGap-minScrapeGap+1)
	} else {
		s.offsets = s.offsets[1:]
		s.next = s.start + s.offsets[0]
	}
	return true
}

// newBurst starts a burst at true time t: a user chosen uniformly rather than
// by the Zipf law (so that the burst, not a hot user's usual traffic, is what
// trips the rule) paying from one of their devices through one channel.
func newBurst(r *rand.Rand, m *model, users int, t int64) *session {
	n := minBurstEvents + r.IntN(maxBurstEvents-minBurstEvents+1)
	span := minBurstSpan + r.Int64N(maxBurstSpan-minBurstSpan+1)
	offsets := make([]int64, n)
	for i := range offsets {
		offsets[i] = r.Int64N(span)
	}
	slices.Sort(offsets)
	user := int32(r.IntN(users))
	_, devices := m.userTraits(user)
	return &session{
		next:    t + offsets[0],
		left:    n,
		first:   true,
		user:    user,
		device:  r.Int32N(devices),
		channel: uint8(m.channels.pick(r)),
		offsets: offsets,
		start:   t,
	}
}

// newScrape starts a scrape at true time t from a scraper's own device,
// logged in as a uniformly chosen user.
func newScrape(r *rand.Rand, users int, t int64, scraper int32) *session {
	return &session{
		next:   t,
		left:   minScrapeEvents + r.IntN(maxScrapeEvents-minScrapeEvents+1),
		first:  true,
		scrape: true,
		user:   int32(r.IntN(users)),
		device: scraper,
	}
}

// sessions is a min-heap of sessions by their next request time.
type sessions []*session

// Len, Less, Swap, Push and Pop implement heap.Interface.

func (h sessions) Len() int { return len(h) }
func (h sessions) Less(i, j int) bool {
	if h[i].next != h[j].next {
		return h[i].next < h[j].next
	}
	return h[i].id < h[j].id
}
func (h sessions) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *sessions) Push(x any)   { *h = append(*h, x.(*session)) }
func (h *sessions) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return s
}

// peek returns the time of the earliest pending session request, or
// never when there is none.
func (h sessions) peek() int64 {
	if len(h) == 0 {
		return never
	}
	return h[0].next
}

// advanceTop moves the earliest session to its next request, dropping it
// when it is done.
func (h *sessions) advanceTop(r *rand.Rand) {
	if (*h)[0].advance(r) {
		heap.Fix(h, 0)
	} else {
		heap.Pop(h)
	}
}

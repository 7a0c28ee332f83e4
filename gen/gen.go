// Package gen writes a deterministic synthetic workload for riskstream: JSONL
// request events, as gateways would publish them, with the anomalies the
// rules look for (payment bursts, device scraping), skewed clocks, late and
// invalid records. Options shape it further for measurements: users drawn
// uniformly instead of by a Zipf law, a fixed number of devices per user
// and amounts on every request (so that the keys a workload touches, and the
// states rules keep for them, are known), and an attack phase in
// which most requests are payments of a few users, so that most events get
// a decision.
//
// # Time model
//
// Every request has a true time t, when it really happened. True times form a
// Poisson process at Options.Rate (background traffic) merged with the
// requests of bursts and scrapes, which start as Poisson processes of their
// own and then follow their own schedules. Each request is handled by a
// source (gateway) chosen uniformly, and two clocks look at it:
//
//   - ts, the source's clock reading of t: t plus the source's injected
//     error, if any (see Clock). This is the event time a consumer windows by.
//   - ingest_ts, the broker's append time: t, plus the wait for the source's
//     next producer flush (Options.Batching), plus a transport delay uniform
//     in [0, Options.Jitter). The broker's clock is the reference, so clock
//     errors do not affect it.
//
// A late record is a background request that was held up 35–90 s on its
// way: it is delivered at its place among the requests of now, but it
// happened that long before (its true time, and so its ts, may precede
// Start). Late records are thus spread over the whole workload, each behind
// the traffic it arrives with, and the file ends with the traffic, not with
// a trail of late arrivals that would make every source's clock look 35–90 s
// behind.
//
// Records are written in delivery order, by ingest_ts (ties by generation
// order). Since no request is delivered before it is drawn, a record can be
// written as soon as the true time of the next request reaches its
// ingest_ts; a min-heap holds the records still in flight, so memory stays
// bounded by the delivery delays, not by Options.Events.
//
// All randomness comes from one PCG stream seeded by Options.Seed, and times
// are integer nanoseconds since Options.Start, so the same Options give the
// same bytes.
package gen

import (
	"bufio"
	"container/heap"
	"io"
	"math"
	"math/rand/v2"
	"time"
)

// Stats summarizes what Generate wrote.
type Stats struct {
	// Records is the number of lines written.
	Records int
	// Invalid is the number of lines a consumer must reject.
	Invalid int
	// Late is the number of valid records delivered 35–90 s after their true
	// time.
	Late int
	// Bursts and Scrapes count the payment bursts and scraping sessions that
	// made at least one request (the last ones may be cut short by the end
	// of the workload).
	Bursts, Scrapes int
	// Attack is the number of attack payments (Options.AttackStart).
	Attack int
	// FirstTS and LastTS are the smallest and largest ts of valid records,
	// in epoch ms (0 when there are none).
	FirstTS, LastTS int64
}

const (
	// pcgStream fixes the second PCG seed word, so that Options.Seed alone
	// selects the workload.
	pcgStream = 0x5851f42d4c957f2d
	// never is a time after every request.
	never = math.MaxInt64

	minLateDelay, maxLateDelay = int64(35 * time.Second), int64(90 * time.Second)
	nsPerMs                    = int64(time.Millisecond)
)

// Generate writes o.Events records to w, one JSON object per line, in
// delivery order (ascending ingest_ts). The same Options give the same bytes.
// It returns the first error from o.Validate or from w.
func Generate(w io.Writer, o Options) (Stats, error) {
	if err := o.Validate(); err != nil {
		return Stats{}, err
	}
	g := newGenerator(w, o)
	err := g.run()
	return g.stats, err
}

// generator is the state of one Generate call.
type generator struct {
	o      Options
	r      *rand.Rand
	m      *model
	clocks []clockError
	phases []int64 // each source's first producer flush, ns since Start

	// bgMean, burstMean and scrapeMean are the mean ns between background
	// requests, burst starts and scrape starts.
	bgMean, burstMean, scrapeMean float64
	pending                       sessions
	started                       int64 // sessions started, for their ids
	scrapers                      int32 // scrapes started, for their devices

	queue    deliveryQueue
	out      *bufio.Writer
	render   renderer
	buf      []byte
	stats    Stats
	anyValid bool // stats.FirstTS and LastTS are set
}

func newGenerator(w io.Writer, o Options) *generator {
	r := rand.New(rand.NewPCG(o.Seed, pcgStream))
	g := &generator{
		o:      o,
		r:      r,
		m:      newModel(r, o),
		clocks: clockErrors(o),
		bgMean: 1e9 / (o.Rate - o.specialRate()),
		out:    bufio.NewWriterSize(w, 256<<10),
		buf:    make([]byte, 0, 512),
	}
	if o.Batching > 0 {
		g.phases = make([]int64, o.Sources)
		for i := range g.phases {
			g.phases[i] = r.Int64N(int64(o.Batching))
		}
	}
	if o.BurstRate > 0 {
		g.burstMean = 1e9 / o.BurstRate
	}
	if o.ScrapeRate > 0 {
		g.scrapeMean = 1e9 / o.ScrapeRate
	}
	return g
}

// gap draws the time to the next event of a Poisson process with the given
// mean gap in ns; a zero mean is a process that never fires.
func (g *generator) gap(mean float64) int64 {
	if mean == 0 {
		return never
	}
	return int64(math.Round(g.r.ExpFloat64() * mean))
}

func (g *generator) run() error {
	nextBg := g.gap(g.bgMean)
	nextBurst := g.gap(g.burstMean)
	nextScrape := g.gap(g.scrapeMean)
	for seq := int64(1); seq <= int64(g.o.Events); seq++ {
		// Start the sessions due before the next request, so that their
		// first requests compete for it.
		for {
			t := min(nextBg, g.pending.peek())
			if nextBurst <= t && nextBurst <= nextScrape {
				g.start(newBurst(g.r, g.m, g.o.Users, nextBurst))
				nextBurst = addTime(nextBurst, g.gap(g.burstMean))
			} else if nextScrape <= t {
				g.start(newScrape(g.r, g.o.Users, nextScrape, g.scrapers))
				g.scrapers++
				nextScrape = addTime(nextScrape, g.gap(g.scrapeMean))
			} else {
				break
			}
		}
		var s *session
		t := nextBg
		if g.pending.peek() < nextBg {
			s = g.pending[0]
			t = s.next
		} else {
			nextBg += g.gap(g.bgMean)
		}
		// Every later request is delivered at or after t, and after every
		// queued record of the same ms by sequence: those can go now.
		if err := g.deliver(g.o.Start + floorDiv(t, nsPerMs)); err != nil {
			return err
		}
		g.queue.push(g.draw(seq, t, s))
		if s != nil {
			g.pending.advanceTop(g.r)
		}
	}
	if err := g.deliver(never); err != nil {
		return err
	}
	return g.out.Flush()
}

// start schedules the requests of a new session.
func (g *generator) start(s *session) {
	s.id = g.started
	g.started++
	heap.Push(&g.pending, s)
}

// deliver writes the queued records with ingest_ts <= limit.
func (g *generator) deliver(limit int64) error {
	var r record
	for len(g.queue) > 0 && g.queue[0].ingestMs <= limit {
		g.queue.pop(&r)
		g.buf = g.render.append(g.buf[:0], &r)
		if _, err := g.out.Write(g.buf); err != nil {
			return err
		}
		g.stats.Records++
	}
	return nil
}

// draw makes the request with sequence number seq at true time t, from
// session s or, when s is nil, from the background traffic.
func (g *generator) draw(seq, t int64, s *session) record {
	r, o := g.r, &g.o
	rec := record{seq: seq}
	late := false
	switch u := r.Float64(); {
	case u < o.InvalidFraction:
		rec.invalid = invalidKind(1 + r.IntN(numInvalidKinds))
		rec.cut = r.Uint32()
		g.stats.Invalid++
	case u < o.InvalidFraction+o.LateFraction && s == nil:
		// Only background requests are held up: a burst or scrape keeps
		// all its requests together.
		late = true
		g.stats.Late++
	}
	rec.source = r.Int32N(int32(o.Sources))
	attack := false
	if s == nil && !late && o.attacking() && t >= int64(o.AttackStart) && t-int64(o.AttackStart) < int64(o.AttackDuration) {
		attack = r.Float64() < o.AttackShare
	}

	switch {
	case attack:
		rec.user = attacker(r.IntN(o.AttackUsers), o.Users, o.AttackUsers)
		var devices int32
		rec.region, devices = g.m.userTraits(rec.user)
		rec.device = r.Int32N(devices)
		rec.api = apiPay
		g.stats.Attack++
	case s == nil:
		rec.user = g.m.user(r)
		var devices int32
		rec.region, devices = g.m.userTraits(rec.user)
		rec.device = r.Int32N(devices)
		rec.api = uint8(g.m.apis.pick(r))
	case s.scrape:
		rec.user = s.user
		rec.region, _ = g.m.userTraits(rec.user)
		rec.device = s.device
		rec.flags |= flagBot
		rec.api = apiSearch
		if r.IntN(2) == 1 {
			rec.api = apiProfile
		}
	default:
		rec.user = s.user
		rec.region, _ = g.m.userTraits(rec.user)
		rec.device = s.device
		rec.api = apiPay
		rec.channel = s.channel
	}
	if s != nil && s.first {
		s.first = false
		if s.scrape {
			g.stats.Scrapes++
		} else {
			g.stats.Bursts++
		}
	}
	if rec.invalid == userObject {
		// Only /pay needs user (as the pay-burst key), and a field no rule
		// needs is never checked: elsewhere the object would pass.
		rec.api = apiPay
	}
	if rec.api == apiPay {
		if s == nil || s.scrape {
			rec.channel = uint8(g.m.channels.pick(r))
		}
		rec.amount = amount(r)
	} else if o.AmountShare > 0 && r.Float64() < o.AmountShare {
		rec.flags |= flagAmount
		rec.amount = amount(r)
	}
	if rec.api == apiPay || rec.api == apiCart {
		rec.merchant = int16(g.m.merchants.Uint64())
	}
	rec.latency = latency(r, rec.api)
	rec.status = statuses[g.m.statuses.pick(r)].code

	if rec.invalid == valid && r.Float64() < o.RFC3339Fraction {
		rec.flags |= flagRFC3339
	}
	// A late request is delivered now, but happened 35–90 s ago.
	happened, ingest := t, t
	if late {
		happened -= minLateDelay + r.Int64N(maxLateDelay-minLateDelay)
	} else {
		if g.phases != nil {
			// Wait for the source's next flush, at phase + k·Batching.
			b, p := int64(o.Batching), g.phases[rec.source]
			ingest = p + (t-p+b-1)/b*b
		}
		if o.Jitter > 0 {
			ingest += r.Int64N(int64(o.Jitter))
		}
	}
	rec.tsMs = o.Start + floorDiv(happened+g.clocks[rec.source].at(happened), nsPerMs)
	if rec.invalid == valid {
		if !g.anyValid {
			g.anyValid = true
			g.stats.FirstTS, g.stats.LastTS = rec.tsMs, rec.tsMs
		}
		g.stats.FirstTS = min(g.stats.FirstTS, rec.tsMs)
		g.stats.LastTS = max(g.stats.LastTS, rec.tsMs)
	}
	rec.ingestMs = o.Start + floorDiv(ingest, nsPerMs)
	return rec
}

// attacker returns the user id of attacker i of n, spread evenly over the
// users.
func attacker(i, users, n int) int32 {
	return int32(i * (users / n))
}

// floorDiv divides rounding toward minus infinity, so that a clock running
// behind at the very start still maps to the right ms.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// addTime adds a gap to a time without overflowing past never.
func addTime(t, gap int64) int64 {
	if gap > never-t {
		return never
	}
	return t + gap
}

package gen

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Options describe a workload. The zero value is not valid: start from
// DefaultOptions and change what you need.
type Options struct {
	// Seed selects the workload: the same Options (Seed included) always
	// produce the same bytes.
	Seed uint64
	// Events is the number of records written, valid and invalid alike,
	// bursts and scrapes included.
	Events int
	// Users is the population size. User ids are u0..u{Users-1}; normal
	// traffic picks them by UserDist.
	Users int
	// UserDist is how normal traffic picks its users: ZipfUsers (s = 1.1,
	// v = Users/20, so u0, u1, ... are hot) or UniformUsers (every user
	// equally likely, so the number of distinct users seen grows with
	// Users, as when measuring state at a given key count). The default
	// value is ZipfUsers.
	UserDist UserDist
	// DevicesPerUser is how many devices each user has (device ids
	// d{user}-0..d{user}-{N-1}). 0 gives each user 1 to 3, fixed per user by
	// a hash of the seed and the user. The default value is 0.
	DevicesPerUser int
	// Sources is the number of gateway nodes gw-0..gw-{Sources-1} that stamp
	// ts. Each event is stamped by a source chosen uniformly.
	Sources int
	// Start is the true time of the workload's origin, in epoch ms. Late
	// records delivered early in the workload happened before it.
	Start int64
	// Rate is the total number of events per second of true event time,
	// bursts and scrapes included.
	Rate float64
	// Jitter is the upper bound of the transport delay between a source and
	// the broker; each record's delay is uniform in [0, Jitter).
	Jitter time.Duration
	// Batching is the producer's linger: a source's records wait until its
	// next flush, every Batching, before transport. Each source has its own
	// phase. 0 sends each record at once.
	Batching time.Duration
	// LateFraction is the share of background records delivered 35–90 s
	// after their true time: beyond a 2 s out-of-orderness bound, so a
	// watermark has passed them by the time they arrive. They arrive among
	// the other records throughout the workload (see the package doc).
	LateFraction float64
	// InvalidFraction is the share of records that a consumer must reject
	// (truncated JSON, a missing or mistyped required field, non-JSON text).
	InvalidFraction float64
	// BurstRate is the number of payment bursts started per second of event
	// time. A burst is 6–15 /pay requests of one user within 1–8 s, enough to
	// break "more than 5 payments in 60 s".
	BurstRate float64
	// ScrapeRate is the number of scraping sessions started per second of
	// event time. A session is 220–400 /search or /profile requests from a
	// fresh device, 20–100 ms apart: a session (gap 30 s) of more than 200.
	ScrapeRate float64
	// AmountShare is the share of requests other than /pay that carry an
	// amount too (an order or basket value, drawn as a payment's), so that
	// a sum:amount rule without a filter keeps a state for every user, not
	// only for paying ones. Every /pay has an amount whatever it is. The
	// default value is 0.
	AmountShare float64
	// RFC3339Fraction is the share of valid records whose ts is written as
	// an RFC 3339 string (UTC, ms precision) instead of integer ms.
	RFC3339Fraction float64
	// Clocks inject clock errors into some sources' ts (skew). Sources
	// without an entry have a perfect clock.
	Clocks []Clock

	// AttackStart and AttackDuration place an attack phase, in true time
	// after Start: [AttackStart, AttackStart+AttackDuration). During it,
	// each background request is, with probability AttackShare, a /pay of
	// one of AttackUsers attacking users (chosen uniformly among them),
	// from one of the attacker's devices; the rate stays Rate. At
	// AttackShare × Rate / AttackUsers payments per second, an attacker
	// soon passes "more than 5 payments in 60 s", and every further payment
	// trips that rule: with AttackShare 0.8 most events get a decision.
	// Attack requests are never late (they may be invalid). A zero
	// AttackDuration, the default, means no attack.
	AttackStart, AttackDuration time.Duration
	// AttackShare is the share of background requests in the attack phase
	// that are attack payments. The default value is 0.8.
	AttackShare float64
	// AttackUsers is the number of attacking users: u0, u{k}, u{2k}, ...
	// with k = Users/AttackUsers, spread over the population. It must not
	// exceed Users when there is an attack phase. The default value is 100.
	AttackUsers int
}

// UserDist is a distribution of users over normal traffic.
type UserDist string

// The user distributions.
const (
	// ZipfUsers makes a few users hot and most rare (s = 1.1).
	ZipfUsers UserDist = "zipf"
	// UniformUsers makes every user equally likely.
	UniformUsers UserDist = "uniform"
)

// DefaultOptions returns a realistic mid-size workload: 100,000 events at
// 20,000 events/s (5 s of event time) from 10,000 users through 4 gateways,
// with a few late and invalid records and perfect clocks.
func DefaultOptions() Options {
	return Options{
		Seed:            1,
		Events:          100_000,
		Users:           10_000,
		UserDist:        ZipfUsers,
		Sources:         4,
		Start:           1732150000000,
		Rate:            20_000,
		Jitter:          5 * time.Millisecond,
		LateFraction:    0.0005,
		InvalidFraction: 0.0005,
		BurstRate:       2,
		ScrapeRate:      0.05,
		RFC3339Fraction: 0.01,
		AttackShare:     0.8,
		AttackUsers:     100,
	}
}

// attacking reports whether the workload has an attack phase.
func (o Options) attacking() bool { return o.AttackDuration > 0 }

// specialRate is the expected number of events per second that bursts and
// scrapes add; the background traffic makes up the rest of Rate.
func (o Options) specialRate() float64 {
	return o.BurstRate*meanBurstEvents + o.ScrapeRate*meanScrapeEvents
}

// Validate reports every bad option at once, so that a command line with
// several mistakes is fixed in one go.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	if o.Events < 0 {
		bad("events must be >= 0, got %d", o.Events)
	}
	if o.Users < 1 || o.Users > math.MaxInt32 {
		bad("users must be in [1, %d], got %d", math.MaxInt32, o.Users)
	}
	if o.UserDist != ZipfUsers && o.UserDist != UniformUsers {
		bad("user distribution must be %q or %q, got %q", ZipfUsers, UniformUsers, o.UserDist)
	}
	if o.DevicesPerUser < 0 || o.DevicesPerUser > math.MaxInt32 {
		bad("devices per user must be in [0, %d], got %d", math.MaxInt32, o.DevicesPerUser)
	}
	if o.Sources < 1 || o.Sources > math.MaxInt32 {
		bad("sources must be in [1, %d], got %d", math.MaxInt32, o.Sources)
	}
	if !(o.Rate > 0) || math.IsInf(o.Rate, 0) {
		bad("rate must be a positive number of events per second, got %v", o.Rate)
	}
	if o.Jitter < 0 {
		bad("jitter must be >= 0, got %v", o.Jitter)
	}
	if o.Batching < 0 {
		bad("batching must be >= 0, got %v", o.Batching)
	}
	fractions := []struct {
		name string
		v    float64
	}{
		{"late fraction", o.LateFraction},
		{"invalid fraction", o.InvalidFraction},
		{"rfc3339 fraction", o.RFC3339Fraction},
		{"attack share", o.AttackShare},
		{"amount share", o.AmountShare},
	}
	for _, f := range fractions {
		if !(f.v >= 0 && f.v <= 1) {
			bad("%s must be in [0, 1], got %v", f.name, f.v)
		}
	}
	if o.LateFraction+o.InvalidFraction > 1 {
		bad("late fraction + invalid fraction must be <= 1, got %v", o.LateFraction+o.InvalidFraction)
	}
	rates := []struct {
		name string
		v    float64
	}{
		{"burst rate", o.BurstRate},
		{"scrape rate", o.ScrapeRate},
	}
	for _, r := range rates {
		if !(r.v >= 0) || math.IsInf(r.v, 0) {
			bad("%s must be a number >= 0 per second, got %v", r.name, r.v)
		}
	}
	if sr := o.specialRate(); o.Rate > 0 && sr >= o.Rate {
		bad("bursts and scrapes alone average %.4g events/s, which leaves no room under rate %v: raise rate or lower burst/scrape rate", sr, o.Rate)
	}
	if o.AttackStart < 0 {
		bad("attack start must be >= 0, got %v", o.AttackStart)
	}
	if o.AttackDuration < 0 {
		bad("attack duration must be >= 0, got %v", o.AttackDuration)
	}
	if o.attacking() && (o.AttackUsers < 1 || o.AttackUsers > o.Users) {
		bad("attack users must be in [1, users = %d], got %d", o.Users, o.AttackUsers)
	}
	seen := make(map[string]bool, len(o.Clocks))
	for _, c := range o.Clocks {
		if i, ok := sourceIndex(c.Source); !ok || i >= o.Sources {
			bad("clock for unknown source %q: sources are gw-0..gw-%d", c.Source, o.Sources-1)
		}
		if seen[c.Source] {
			bad("clock for %s given twice: combine them as %s:offset=...,step=...,drift=...", c.Source, c.Source)
		}
		seen[c.Source] = true
		if c.StepAt < 0 {
			bad("clock %s: step time must be >= 0, got %v", c.Source, c.StepAt)
		}
		if math.IsNaN(c.DriftPPM) || math.Abs(c.DriftPPM) >= 1e6 {
			bad("clock %s: drift must be within ±1e6 ppm, got %v", c.Source, c.DriftPPM)
		}
	}
	return errors.Join(errs...)
}

// sourceIndex parses a source name gw-N.
func sourceIndex(name string) (int, bool) {
	const prefix = "gw-"
	if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
		return 0, false
	}
	n, err := strconv.Atoi(name[len(prefix):])
	if err != nil || n < 0 || strconv.Itoa(n) != name[len(prefix):] {
		return 0, false
	}
	return n, true
}

package gen

import (
	"math"
	"math/rand/v2"
)

// api describes one endpoint: how often it is called and how long it takes.
// Latency is lognormal (median·e^(sigma·N(0,1))): most requests are quick
// and a few take seconds, which is what a P99 heatmap is for.
type api struct {
	path   string
	weight float64
	median float64 // ms
	sigma  float64
}

// apis are the endpoints of normal traffic; weights sum to 1.
var apis = [...]api{
	{"/search", 0.22, 40, 0.9},
	{"/pay", 0.15, 35, 0.8},
	{"/profile", 0.14, 10, 0.7},
	{"/home", 0.12, 8, 0.6},
	{"/cart", 0.12, 15, 0.7},
	{"/orders", 0.12, 20, 0.8},
	{"/login", 0.10, 25, 0.6},
	{"/refund", 0.03, 30, 0.9},
}

// Indexes into apis of the endpoints that bursts, scrapes and invalid records
// single out.
const (
	apiSearch  = 0
	apiPay     = 1
	apiProfile = 2
	apiCart    = 4
)

// channels are the payment channels of /pay, with their shares.
var channels = [...]struct {
	name   string
	weight float64
}{
	{"alipay", 0.35},
	{"wechat", 0.30},
	{"card", 0.25},
	{"paypal", 0.10},
}

// regions are fixed per user.
var regions = [...]string{"cn-east", "cn-north", "cn-south", "us-west", "eu-central", "ap-southeast"}

// statuses are the response codes, with their shares: mostly 200, a few
// client errors and a thin layer of server errors.
var statuses = [...]struct {
	code   int16
	weight float64
}{
	{200, 0.955},
	{400, 0.015},
	{401, 0.008},
	{404, 0.007},
	{429, 0.005},
	{500, 0.006},
	{502, 0.003},
	{503, 0.001},
}

const (
	numMerchants = 200
	// zipfS is the skew of users and merchants: s slightly above 1 gives a
	// long tail with a handful of very hot keys, like real traffic.
	zipfS = 1.1
	// amountMedian and amountSigma shape /pay amounts, in dollars.
	amountMedian = 30.0
	amountSigma  = 1.0
)

// cumulative is a table for picking an index by weight with one uniform draw.
type cumulative []float64

func newCumulative(weights []float64) cumulative {
	c := make(cumulative, len(weights))
	sum := 0.0
	for i, w := range weights {
		sum += w
		c[i] = sum
	}
	for i := range c {
		c[i] /= sum
	}
	return c
}

// pick returns an index with probability proportional to its weight.
func (c cumulative) pick(r *rand.Rand) int {
	u := r.Float64()
	for i, v := range c[:len(c)-1] {
		if u < v {
			return i
		}
	}
	return len(c) - 1
}

// model holds the weighted choices of a workload.
type model struct {
	apis, channels, statuses cumulative
	users, merchants         *rand.Zipf
	uniform                  bool  // users are picked uniformly, not by users
	numUsers                 int   // Options.Users
	devices                  int32 // Options.DevicesPerUser
	seed                     uint64
}

func newModel(r *rand.Rand, o Options) *model {
	m := &model{
		seed:     o.Seed,
		uniform:  o.UserDist == UniformUsers,
		numUsers: o.Users,
		devices:  int32(o.DevicesPerUser),
	}
	var w []float64
	for _, a := range apis {
		w = append(w, a.weight)
	}
	m.apis = newCumulative(w)
	w = w[:0]
	for _, c := range channels {
		w = append(w, c.weight)
	}
	m.channels = newCumulative(w)
	w = w[:0]
	for _, s := range statuses {
		w = append(w, s.weight)
	}
	m.statuses = newCumulative(w)
	// The offset v = Users/20 flattens the head: with 100,000 users the
	// hottest makes about 0.008% of requests (with v = 1 it made 15%, which
	// no real population does), yet power users still trip the burst rule on
	// their own.
	m.users = rand.NewZipf(r, zipfS, max(1, float64(o.Users)/20), uint64(o.Users-1))
	m.merchants = rand.NewZipf(r, zipfS, 1, numMerchants-1)
	return m
}

// user picks the user of a background request.
func (m *model) user(r *rand.Rand) int32 {
	if m.uniform {
		return int32(r.IntN(m.numUsers))
	}
	return int32(m.users.Uint64())
}

// userTraits derives a user's fixed traits from a hash of the seed and the
// user, so that they need no table however many users there are.
func (m *model) userTraits(user int32) (region uint8, devices int32) {
	h := splitmix64(m.seed ^ uint64(user)*0x9e3779b97f4a7c15)
	region = uint8(h % uint64(len(regions)))
	if m.devices > 0 {
		return region, m.devices
	}
	return region, int32(1 + (h>>32)%3)
}

// latency draws a response time for an endpoint, in tenths of ms (at least
// 0.1 ms, so that no request is free).
func latency(r *rand.Rand, a uint8) int32 {
	p := apis[a]
	ms := p.median * math.Exp(p.sigma*r.NormFloat64())
	return max(1, int32(math.Round(ms*10)))
}

// amount draws a payment amount in cents (at least one cent).
func amount(r *rand.Rand) int64 {
	d := amountMedian * math.Exp(amountSigma*r.NormFloat64())
	return max(1, int64(math.Round(d*100)))
}

// splitmix64 is a fast, well-mixing hash of a 64-bit value.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

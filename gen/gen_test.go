package gen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// line is one output line as a consumer would see it.
type line struct {
	raw    string
	reason string // why a consumer must reject it; "" when valid
	wire
	ts int64 // valid records only
}

// wire is a record's fields; those that the generator breaks on purpose are
// left untyped.
type wire struct {
	ID       *string  `json:"id"`
	TS       any      `json:"ts"`
	Source   string   `json:"source"`
	User     any      `json:"user"`
	Device   string   `json:"device"`
	API      string   `json:"api"`
	Channel  *string  `json:"channel"`
	Merchant *string  `json:"merchant"`
	Region   string   `json:"region"`
	Latency  any      `json:"latency_ms"`
	Status   *int     `json:"status"`
	Amount   *float64 `json:"amount"`
	Ingest   *int64   `json:"ingest_ts"`
}

// user returns the user of a valid record.
func (l *line) user() string { return l.User.(string) }

// parse reads every line of data and classifies it independently of the
// generator's own bookkeeping.
func parse(t *testing.T, data []byte) []line {
	t.Helper()
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		l := line{raw: sc.Text()}
		if err := json.Unmarshal(sc.Bytes(), &l.wire); err != nil {
			l.reason = "not json"
			if !errors.As(err, new(*json.SyntaxError)) {
				l.reason = err.Error()
			}
		} else {
			l.reason, l.ts = l.classify()
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

func (l *line) classify() (reason string, ts int64) {
	if l.ID == nil {
		return "missing id", 0
	}
	switch v := l.TS.(type) {
	case nil:
		return "missing ts", 0
	case float64:
		ts = int64(v)
	case string:
		tt, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return "bad ts string", 0
		}
		ts = tt.UnixMilli()
	default:
		return "ts not a time", 0
	}
	if _, ok := l.User.(string); !ok {
		return "user not a string", 0
	}
	if _, ok := l.Latency.(float64); !ok {
		return "latency not a number", 0
	}
	if l.Status == nil || l.Ingest == nil || l.Source == "" || l.Device == "" || l.API == "" || l.Region == "" {
		return "missing field", 0
	}
	return "", ts
}

func generate(t testing.TB, o Options) ([]byte, Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := Generate(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), st
}

func TestDeterministic(t *testing.T) {
	o := DefaultOptions()
	o.Events = 20_000
	o.Batching = 10 * time.Millisecond
	o.InvalidFraction = 0.01
	o.Clocks = []Clock{{Source: "gw-1", Offset: 20 * time.Millisecond, DriftPPM: 30}}
	a, _ := generate(t, o)
	b, _ := generate(t, o)
	if !bytes.Equal(a, b) {
		t.Fatal("same options, different bytes")
	}
	o.Seed = 2
	c, _ := generate(t, o)
	if bytes.Equal(a, c) {
		t.Fatal("seeds 1 and 2 gave the same bytes")
	}
	o.Seed = 1
	o.UserDist, o.DevicesPerUser = UniformUsers, 1
	u1, _ := generate(t, o)
	u2, _ := generate(t, o)
	if !bytes.Equal(u1, u2) {
		t.Fatal("uniform users: same options, different bytes")
	}
	if bytes.Equal(a, u1) {
		t.Fatal("zipf and uniform users gave the same bytes")
	}
}

func TestRecords(t *testing.T) {
	o := DefaultOptions()
	o.Events = 100_000
	o.InvalidFraction = 0.01
	o.LateFraction = 0.002
	o.Batching = 20 * time.Millisecond
	data, st := generate(t, o)
	lines := parse(t, data)
	n := len(lines)
	if n != o.Events || st.Records != n {
		t.Fatalf("%d lines, Stats.Records %d, want %d", n, st.Records, o.Events)
	}

	ids := make(map[string]bool, n)
	reasons := map[string]int{}
	var invalid, late, rfc, valid, pays int
	var minTS, maxTS int64 = math.MaxInt64, math.MinInt64
	var minOnTime, maxOnTime int64 = math.MaxInt64, math.MinInt64
	var lastIngest int64
	bound := (o.Jitter + o.Batching).Milliseconds()
	regionOf := map[string]string{}
	for i, l := range lines {
		if l.Ingest != nil {
			if *l.Ingest < lastIngest {
				t.Fatalf("line %d: ingest_ts %d after %d", i+1, *l.Ingest, lastIngest)
			}
			lastIngest = *l.Ingest
		}
		if l.ID != nil {
			if ids[*l.ID] {
				t.Fatalf("line %d: duplicate id %s", i+1, *l.ID)
			}
			ids[*l.ID] = true
		}
		if l.reason != "" {
			invalid++
			reasons[l.reason]++
			continue
		}
		valid++
		if len(*l.ID) != len("r-000000001") || !strings.HasPrefix(*l.ID, "r-") {
			t.Fatalf("line %d: id %q is not r- and 9 digits", i+1, *l.ID)
		}
		if !strings.HasPrefix(l.raw, `{"id":`) || !strings.Contains(l.raw, `,"ingest_ts":`) {
			t.Fatalf("line %d: fields out of order: %s", i+1, l.raw)
		}
		if _, ok := l.TS.(string); ok {
			rfc++
		}
		minTS, maxTS = min(minTS, l.ts), max(maxTS, l.ts)
		switch d := *l.Ingest - l.ts; {
		case d >= 35000 && d <= 90000:
			late++
		case d < 0 || d > bound:
			t.Fatalf("line %d: ingest_ts - ts = %d ms, want within [0, %d] or late: %s", i+1, d, bound, l.raw)
		default:
			minOnTime, maxOnTime = min(minOnTime, l.ts), max(maxOnTime, l.ts)
		}
		user := l.user()
		if r, ok := regionOf[user]; ok && r != l.Region {
			t.Fatalf("user %s in regions %s and %s", user, r, l.Region)
		}
		regionOf[user] = l.Region
		api := l.API
		hasChannel, hasMerchant, hasAmount := l.Channel != nil, l.Merchant != nil, l.Amount != nil
		if api == "/pay" {
			pays++
		}
		if hasChannel != (api == "/pay") || hasAmount != (api == "/pay") || hasMerchant != (api == "/pay" || api == "/cart") {
			t.Fatalf("line %d: wrong optional fields for %s: %s", i+1, api, l.raw)
		}
		dev := l.Device
		if !strings.HasPrefix(dev, "dbot-") && !strings.HasPrefix(dev, "d"+user[1:]+"-") {
			t.Fatalf("line %d: device %s is not %s's", i+1, dev, user)
		}
	}
	t.Logf("stats %+v, invalid reasons %v", st, reasons)

	if invalid != st.Invalid {
		t.Errorf("parsed %d invalid lines, Stats.Invalid %d", invalid, st.Invalid)
	}
	within(t, "invalid", invalid, o.InvalidFraction*float64(n))
	for _, r := range []string{"not json", "missing id", "missing ts", "ts not a time", "user not a string", "latency not a number"} {
		if reasons[r] == 0 {
			t.Errorf("no invalid record of kind %q", r)
		}
	}
	if late != st.Late || late == 0 {
		t.Errorf("parsed %d late records, Stats.Late %d", late, st.Late)
	}
	within(t, "late", late, o.LateFraction*float64(n))
	within(t, "rfc3339", rfc, o.RFC3339Fraction*float64(valid))
	within(t, "/pay", pays, apis[apiPay].weight*float64(valid))
	if st.FirstTS != minTS || st.LastTS != maxTS {
		t.Errorf("Stats ts range [%d, %d], parsed [%d, %d]", st.FirstTS, st.LastTS, minTS, maxTS)
	}
	// 100,000 events at 20,000/s span about 5 s of event time; late
	// records happened 35–90 s before they arrive.
	if span := maxOnTime - minOnTime; span < 4500 || span > 5500 {
		t.Errorf("ts span of records on time %d ms, want about 5 s", span)
	}
	if minTS < minOnTime-90_000 || minTS > minOnTime-35_000 || maxTS != maxOnTime {
		t.Errorf("ts range [%d, %d], on time [%d, %d]: late records must precede it by 35-90 s",
			minTS, maxTS, minOnTime, maxOnTime)
	}
}

// TestLateRecordsWithinSpan: late records arrive among the traffic, not
// after it. Every ingest_ts is within the on-time traffic's, and every
// source still sends records on time at the end, so nothing looks like a
// clock 35-90 s behind.
func TestLateRecordsWithinSpan(t *testing.T) {
	o := DefaultOptions()
	o.Events, o.Rate, o.LateFraction = 20_000, 200, 0.01 // 100 s
	lines := parse(t, mustGenerate(t, o))
	var lastOnTime, lastIngest int64
	late := 0
	lastOfSource := map[string]int64{}
	for _, l := range lines {
		if l.reason != "" {
			continue
		}
		lastIngest = max(lastIngest, *l.Ingest)
		if *l.Ingest-l.ts >= 35_000 {
			late++
			continue
		}
		lastOnTime = max(lastOnTime, *l.Ingest)
		lastOfSource[l.Source] = *l.Ingest
	}
	if late < 100 {
		t.Fatalf("%d late records, want about 200", late)
	}
	if lastIngest != lastOnTime {
		t.Errorf("the last record arrives at %d, %d ms after the last one on time", lastIngest, lastIngest-lastOnTime)
	}
	for src, last := range lastOfSource {
		if last < lastOnTime-1000 {
			t.Errorf("%s's last record on time arrives %d ms before the end", src, lastOnTime-last)
		}
	}
}

// within fails unless got is within 5 standard deviations (binomial, at least
// 5) of want.
func within(t *testing.T, what string, got int, want float64) {
	t.Helper()
	if tol := max(5, 5*math.Sqrt(want)); math.Abs(float64(got)-want) > tol {
		t.Errorf("%d %s records, want %.0f ± %.0f", got, what, want, tol)
	}
}

// payBursters counts the users with more than 5 valid /pay events within
// 60 s of ts, by brute force.
func payBursters(lines []line) int {
	pays := map[string][]int64{}
	for _, l := range lines {
		if l.reason == "" && l.API == "/pay" {
			pays[l.user()] = append(pays[l.user()], l.ts)
		}
	}
	n := 0
	for _, ts := range pays {
		slices.Sort(ts)
		for i := 0; i+5 < len(ts); i++ {
			if ts[i+5]-ts[i] < 60_000 {
				n++
				break
			}
		}
	}
	return n
}

func TestAnomalies(t *testing.T) {
	o := DefaultOptions()
	o.Rate = 1_000
	o.Events = 60_000 // 60 s
	o.ScrapeRate = 0.2
	data, st := generate(t, o)
	lines := parse(t, data)

	// Hot users trip the burst rule on their own; bursts must add their
	// (mostly cold) users on top.
	quiet := o
	quiet.BurstRate = 0
	quietData, _ := generate(t, quiet)
	with, without := payBursters(lines), payBursters(parse(t, quietData))
	t.Logf("%d bursts; %d users over the burst threshold, %d without bursts", st.Bursts, with, without)
	if st.Bursts < 80 || with-without < st.Bursts*3/4 {
		t.Errorf("%d bursts made only %d more users over the threshold", st.Bursts, with-without)
	}

	events := map[string][]int64{}
	for _, l := range lines {
		if l.reason == "" {
			if d := l.Device; strings.HasPrefix(d, "dbot-") {
				events[d] = append(events[d], l.ts)
			}
		}
	}
	if len(events) != st.Scrapes || st.Scrapes == 0 {
		t.Fatalf("%d scraping devices, Stats.Scrapes %d", len(events), st.Scrapes)
	}
	long, finished := 0, 0
	for _, ts := range events {
		slices.Sort(ts)
		// A scrape lasts at most 400 requests × 100 ms: one that began
		// later than that before the end was cut short by the event budget.
		if ts[0] > st.LastTS-40_000 {
			continue
		}
		finished++
		run, best := 1, 1
		for i := 1; i < len(ts); i++ {
			if ts[i]-ts[i-1] < 30_000 {
				run++
			} else {
				run = 1
			}
			best = max(best, run)
		}
		if best > 200 {
			long++
		}
	}
	if finished == 0 || long < finished {
		t.Errorf("only %d of %d finished scrapes have a session of more than 200 events", long, finished)
	}
}

func TestEdgeCases(t *testing.T) {
	o := DefaultOptions()
	o.Events = 0
	data, st := generate(t, o)
	if len(data) != 0 || st != (Stats{}) {
		t.Errorf("0 events: wrote %q, %+v", data, st)
	}

	o = DefaultOptions()
	o.Events = 1000
	o.Users, o.Sources = 1, 1
	o.Jitter = 0
	for _, l := range parse(t, mustGenerate(t, o)) {
		late := l.reason == "" && *l.Ingest-l.ts >= 35000
		if l.reason == "" && !late && (l.user() != "u0" || l.Source != "gw-0" || *l.Ingest != l.ts) {
			t.Fatalf("one user, one source, no jitter: %s", l.raw)
		}
	}

	if _, err := Generate(&bytes.Buffer{}, Options{}); err == nil {
		t.Error("zero Options accepted")
	}
	o = DefaultOptions()
	o.Events = 10_000
	if _, err := Generate(failingWriter{}, o); !errors.Is(err, errWrite) {
		t.Errorf("write error not returned: %v", err)
	}
}

func mustGenerate(t *testing.T, o Options) []byte {
	data, _ := generate(t, o)
	return data
}

var errWrite = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

func BenchmarkGenerate(b *testing.B) {
	o := DefaultOptions()
	o.Events = 200_000
	o.Batching = 5 * time.Millisecond
	var bytes int64
	for b.Loop() {
		st, err := Generate(countingWriter{&bytes}, o)
		if err != nil || st.Records != o.Events {
			b.Fatal(st, err)
		}
	}
	b.ReportMetric(float64(b.N*o.Events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(b.N*o.Events), "B/event")
}

type countingWriter struct{ n *int64 }

func (w countingWriter) Write(p []byte) (int, error) {
	*w.n += int64(len(p))
	return len(p), nil
}

func TestUserDist(t *testing.T) {
	o := DefaultOptions()
	o.Events, o.Users = 100_000, 1000
	o.BurstRate, o.ScrapeRate, o.InvalidFraction = 0, 0, 0
	counts := func(o Options) []int {
		t.Helper()
		data, _ := generate(t, o)
		c := make([]int, o.Users)
		for _, l := range parse(t, data) {
			var u int
			if _, err := fmt.Sscanf(l.user(), "u%d", &u); err != nil {
				t.Fatal(err)
			}
			c[u]++
		}
		return c
	}
	zipf := counts(o)
	o.UserDist = UniformUsers
	uniform := counts(o)
	// Uniform: about 100 requests each (Poisson, sd 10); no user far off,
	// none unseen.
	for u, n := range uniform {
		if n < 50 || n > 160 {
			t.Errorf("uniform: u%d made %d requests, want about 100", u, n)
		}
	}
	// Zipf: the head is hot and the tail cold.
	if zipf[0] < 3*zipf[len(zipf)/2] {
		t.Errorf("zipf: u0 made %d requests, the median user %d; want a hot head", zipf[0], zipf[len(zipf)/2])
	}
	if uniform[0] > 2*uniform[len(uniform)/2]+50 {
		t.Errorf("uniform: u0 made %d requests, the median user %d", uniform[0], uniform[len(uniform)/2])
	}
}

func TestDevicesPerUser(t *testing.T) {
	for _, n := range []int{0, 1, 2} {
		o := DefaultOptions()
		o.Events, o.Users, o.DevicesPerUser = 50_000, 500, n
		data, _ := generate(t, o)
		devices := map[string]map[string]bool{}
		for _, l := range parse(t, data) {
			if l.reason != "" || strings.HasPrefix(l.Device, "dbot-") {
				continue
			}
			if !strings.HasPrefix(l.Device, "d"+l.user()[1:]+"-") {
				t.Fatalf("device %s of user %s", l.Device, l.user())
			}
			if devices[l.user()] == nil {
				devices[l.user()] = map[string]bool{}
			}
			devices[l.user()][l.Device] = true
		}
		most := 0
		for _, d := range devices {
			most = max(most, len(d))
		}
		want := n
		if n == 0 {
			want = 3 // 1 to 3 per user
		}
		if most != want {
			t.Errorf("devices per user %d: a user has up to %d devices, want %d", n, most, want)
		}
	}
}

func TestAttack(t *testing.T) {
	o := DefaultOptions()
	o.Events, o.Users = 60_000, 100_000 // 3 s of traffic
	o.AttackStart, o.AttackDuration = time.Second, time.Second
	o.AttackShare, o.AttackUsers = 0.8, 50
	data, st := generate(t, o)
	attackers := map[string]bool{}
	for i := range o.AttackUsers {
		attackers["u"+strconv.Itoa(i*(o.Users/o.AttackUsers))] = true
	}
	var inPhase, pays, attackPays, outside, outsideAttack int
	start := o.Start + o.AttackStart.Milliseconds()
	end := start + o.AttackDuration.Milliseconds()
	for _, l := range parse(t, data) {
		if l.reason != "" {
			continue
		}
		// Late records and jitter blur the edges: look 10 ms inside.
		switch {
		case l.ts >= start+10 && l.ts < end-10:
			inPhase++
			if l.API == "/pay" {
				pays++
				if attackers[l.user()] {
					attackPays++
				}
			}
		case l.ts < start-10 || l.ts >= end+10:
			outside++
			if l.API == "/pay" && attackers[l.user()] {
				outsideAttack++
			}
		}
	}
	// 80% attack payments plus 15% of the other 20% normal payments.
	if got := float64(pays) / float64(inPhase); got < 0.80 || got > 0.86 {
		t.Errorf("/pay is %.3f of the attack phase's records, want about 0.83", got)
	}
	if got := float64(attackPays) / float64(inPhase); got < 0.77 || got > 0.83 {
		t.Errorf("attack payments are %.3f of the attack phase's records, want about 0.80", got)
	}
	if outsideAttack > outside/1000 {
		t.Errorf("%d payments of attackers among %d records outside the phase", outsideAttack, outside)
	}
	within(t, "Stats.Attack", st.Attack, 0.8*20_000)

	// Deterministic, and the default (no attack) is untouched by the
	// attack's other options.
	again, _ := generate(t, o)
	if !bytes.Equal(data, again) {
		t.Fatal("same options, different bytes")
	}
	d := DefaultOptions()
	d.Events = 20_000
	plain, _ := generate(t, d)
	d.AttackShare, d.AttackUsers = 0.3, 7
	if other, _ := generate(t, d); !bytes.Equal(plain, other) {
		t.Fatal("attack options changed a workload without an attack phase")
	}
}

func TestAmountShare(t *testing.T) {
	o := DefaultOptions()
	o.Events, o.InvalidFraction = 20_000, 0
	count := func(o Options) (other, withAmount int) {
		data, _ := generate(t, o)
		for _, l := range parse(t, data) {
			if l.API == "/pay" {
				if l.Amount == nil || *l.Amount <= 0 {
					t.Fatalf("a /pay without a positive amount: %s", l.raw)
				}
				continue
			}
			other++
			if l.Amount != nil {
				withAmount++
				if *l.Amount <= 0 {
					t.Fatalf("amount not positive: %s", l.raw)
				}
			}
		}
		return other, withAmount
	}
	if _, n := count(o); n != 0 {
		t.Errorf("default: %d requests other than /pay have an amount", n)
	}
	o.AmountShare = 1
	if other, n := count(o); n != other {
		t.Errorf("amount share 1: %d of %d requests other than /pay have an amount", n, other)
	}
	o.AmountShare = 0.25
	other, n := count(o)
	within(t, "non-/pay with an amount", n, 0.25*float64(other))
}

package sink

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// TestDecisionFormat: docs/outputs.md's decision example, field for field.
func TestDecisionFormat(t *testing.T) {
	r := &rules.Rule{Name: "pay-burst", Action: "deny", Key: []string{"user"}, Threshold: 5}
	d := &windows.Decision{Rule: r, EventID: []byte(`"r-000007"`), EventTS: 1732150000999,
		Key: "\"u42\"\x00", Start: 1732149941000, End: 1732150001000, Value: 6}
	got := string(NewEncoder().AppendDecision(nil, d))
	want := `{"id":"r-000007/pay-burst","event_id":"r-000007","event_ts":1732150000999,` +
		`"rule":"pay-burst","action":"deny","key":{"user":"u42"},` +
		`"window":{"start":1732149941000,"end":1732150001000},"value":6,"threshold":5,` +
		`"time_domain":"event"}` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	d.Processing, d.Rule.Name = true, `we"ird`
	var v map[string]any
	if err := json.Unmarshal([]byte(NewEncoder().AppendDecision(nil, d)), &v); err != nil {
		t.Fatal(err)
	}
	if v["id"] != `r-000007/we"ird` || v["time_domain"] != "processing" {
		t.Fatalf("escaping or time domain wrong: %v", v)
	}
}

func TestHeatmapFormat(t *testing.T) {
	h := &rules.Heatmap{Name: "api-latency", Key: []string{"api", "region"}, Buckets: []float64{1, 2}}
	a := heatmap.New(2)
	for _, v := range []float64{0.8, 1.5, 240.1} {
		a.Add(v, v > 200, h.Buckets, nil)
	}
	hw := &windows.HeatmapWindow{Heatmap: h, Key: "\"/pay\"\x00\"cn\"\x00", Start: 1, End: 11, Revision: 2, Acc: a}
	var v struct {
		Heatmap  string
		Key      map[string]string
		Window   struct{ Start, End int64 }
		Revision int
		Count    int
		Min, Max float64
		P99      float64
		Buckets  []struct {
			Le    any
			Count int
		}
		DegradedEvents int `json:"degraded_events"`
	}
	if err := json.Unmarshal(NewEncoder().AppendHeatmap(nil, hw), &v); err != nil {
		t.Fatal(err)
	}
	if v.Heatmap != "api-latency" || v.Key["api"] != "/pay" || v.Key["region"] != "cn" || v.Window.End != 11 ||
		v.Revision != 2 || v.Count != 3 || v.Min != 0.8 || v.Max != 240.1 || v.DegradedEvents != 1 ||
		len(v.Buckets) != 3 || v.Buckets[2].Le != "+Inf" || v.Buckets[0].Count != 1 || v.Buckets[2].Count != 1 {
		t.Fatalf("heatmap record wrong: %+v", v)
	}
}

func TestSideOutputs(t *testing.T) {
	p := &event.Provenance{File: "in.jsonl", Line: 3}
	late := string(AppendLate(nil, []byte(" {\"id\":\"a\",\"ts\":1} \r"), 99, p))
	if late != `{"event":{"id":"a","ts":1},"watermark":99,"reason":"late","file":"in.jsonl","line":3}`+"\n" {
		t.Fatalf("late: %s", late)
	}
	dlq := string(AppendDLQ(nil, []byte{0xff, 'x'}, "bad", &event.Provenance{Partition: 2, Offset: 7}))
	if !strings.Contains(dlq, `"raw_base64":"/3g="`) || !strings.Contains(dlq, `"partition":2,"offset":7`) {
		t.Fatalf("dlq: %s", dlq)
	}
	if !json.Valid([]byte(dlq)) {
		t.Fatal("dlq record is not JSON")
	}
}

func TestAppendNumber(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 6: "6", 100.5: "100.5", 1e21: "1e+21", 1e-7: "1e-7", -2.25: "-2.25", math.Inf(1): "null"} {
		if got := string(AppendNumber(nil, v)); got != want {
			t.Errorf("AppendNumber(%v) = %s, want %s", v, got, want)
		}
	}
}

// TestAppendNumberAsJSON checks AppendNumber against encoding/json around
// its fast path for whole numbers: at and past its bounds, negative zero,
// and random whole and fractional numbers.
func TestAppendNumberAsJSON(t *testing.T) {
	vs := []float64{math.Copysign(0, -1), 1e15, -1e15, 1e15 + 2, -1e15 - 2, 1 << 53, 1<<53 + 2, 1e20, 0.5, -0.5, 999999999999999.9}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vs = append(vs, float64(r.Int64N(2e15)-1e15), (r.Float64()-0.5)*math.Pow(10, float64(r.IntN(30))))
	}
	for _, v := range vs {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendNumber(nil, v); string(got) != string(want) {
			t.Errorf("AppendNumber(%v) = %s, want %s", v, got, want)
		}
	}
}

// TestAppendNumberCents checks the path for numbers with at most two
// decimals against AppendFloat: amounts in cents of every size up to and
// past its bound, their neighbouring doubles, random fractions, and
// quarters where doubles are that far apart.
func TestAppendNumberCents(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var vs []float64
	for _, c := range []int64{1, -1, 5, 10, 99, 101, -250, 100<<33 - 1, 100<<33 + 1, -(100<<33 - 1), 1 << 50} {
		vs = append(vs, float64(c)/100)
	}
	// Where doubles are 1/64 to 1/4 apart, numbers with two decimals have
	// a shorter text than their cents.
	for k := 44; k <= 50; k++ {
		vs = append(vs, float64(int64(1)<<k)+0.25, -float64(int64(1)<<k)-0.75, float64(int64(1)<<k)+3.0/32)
	}
	for range 200_000 {
		plus, minus := r.Int64N(1<<(1+r.IntN(46))), r.Int64N(1<<(1+r.IntN(46)))
		c := plus - minus
		v := float64(c) / 100
		vs = append(vs, v, math.Nextafter(v, math.Inf(1)), math.Nextafter(v, math.Inf(-1)), r.Float64()*float64(c))
	}
	cents := 0
	for _, v := range vs {
		want := strconv.AppendFloat(nil, v, 'f', -1, 64)
		if math.Trunc(v) == v || math.Abs(v) < 1e-6 {
			continue // the whole-number and exponent paths
		}
		if c := math.Round(v * 100); c/100 == v && math.Abs(v) < 1<<33 {
			cents++
		}
		if got := AppendNumber(nil, v); string(got) != string(want) {
			t.Fatalf("AppendNumber(%v) = %s, want %s", v, got, want)
		}
	}
	// That the path is taken is for BenchmarkAppendDecision to show; this
	// checks that the inputs reach it often enough to test its text.
	if cents < 100_000 {
		t.Fatalf("only %d of the numbers are in the range of the path for cents", cents)
	}
}

// BenchmarkAppendDecision encodes a decision of the shape an attack
// produces most: a count rule keyed by user.
func BenchmarkAppendDecision(b *testing.B) {
	r := &rules.Rule{Name: "pay-burst", Action: "deny", Key: []string{"user"}, Threshold: 5}
	d := &windows.Decision{Rule: r, EventID: []byte(`"r-000000907"`), EventTS: 1732150000048,
		Key: "\"u65570\"\x00", Start: 1732149941000, End: 1732150001000, Value: 17}
	e := NewEncoder()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = e.AppendDecision(buf[:0], d)
	}
	b.SetBytes(int64(len(buf)))
}

// TestAppendMillis: as strconv.AppendInt, around and between the bounds
// of 13 digits.
func TestAppendMillis(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	cases := []int64{0, -1, 1e12 - 1, 1e12, 1e12 + 1, 1e13 - 1, 1e13, math.MinInt64, math.MaxInt64, 1732150000048}
	for range 100_000 {
		cases = append(cases, 1e12+r.Int64N(9e12), r.Int64())
	}
	for _, v := range cases {
		if got, want := string(appendMillis([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Fatalf("appendMillis(%d) = %s, want %s", v, got, want)
		}
	}
}

// TestEncoderCaches: one Encoder, as a sink keeps, encodes each decision
// as its fields say, whichever rule and time domain came before, shadow
// rules included, and after its caches were emptied for being full.
func TestEncoderCaches(t *testing.T) {
	e := NewEncoder()
	rs := make([]*rules.Rule, maxRuleTexts+10)
	for i := range rs {
		rs[i] = &rules.Rule{Name: fmt.Sprintf("rule-%d", i), Action: []string{"deny", "review"}[i%2],
			Key: []string{"user"}, Threshold: float64(i)}
		if i%3 == 0 {
			rs[i].Mode = rules.Shadow
		}
	}
	for round := range 2 {
		for i, r := range rs {
			d := &windows.Decision{Rule: r, EventID: []byte(`"r-1"`), EventTS: 1732150000999,
				Key: "\"u1\"\x00", Start: 1732149941000, End: 1732150001000, Value: 1, Processing: (i+round)%2 == 1}
			var v map[string]any
			if err := json.Unmarshal(e.AppendDecision(nil, d), &v); err != nil {
				t.Fatal(err)
			}
			domain := map[bool]string{false: "event", true: "processing"}[d.Processing]
			if v["id"] != "r-1/"+r.Name || v["rule"] != r.Name || v["action"] != r.Action || v["threshold"] != r.Threshold ||
				v["time_domain"] != domain || (v["mode"] == "shadow") != (r.Mode == rules.Shadow) {
				t.Fatalf("round %d, rule %d (%s, processing %v): %v", round, i, r.Action, d.Processing, v)
			}
		}
	}
}

package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows"
)

// What the console adds to the job, per decision and per fired window
// (on the job's loop), and per drawing (on the HTTP server's goroutine, at
// most once a second). BENCHMARKS.md "Live: the console's cost".
//
//	go test ./console/ -run '^$' -bench . -benchtime 2s

// BenchmarkDecisionKeysAdd: a decision counted for the top keys, among
// 10,000 keys.
func BenchmarkDecisionKeysAdd(b *testing.B) {
	r := &rules.Rule{Name: "burst", Key: []string{"user"}}
	keys := make([]windows.Decision, 10_000)
	for i := range keys {
		keys[i] = windows.Decision{Rule: r, Key: fmt.Sprintf("\"u%d\"\x00", i)}
	}
	k := NewDecisionKeys(4096)
	i := 0
	for b.Loop() {
		k.Add(&keys[i%len(keys)])
		if i++; i%100_000 == 0 {
			k.Take(20)
		}
	}
}

// BenchmarkLiveHeatmap: a fired window kept, 13 buckets.
func BenchmarkLiveHeatmap(b *testing.B) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}}
	w := fired(hm, "\"/pay\"\x00", 0, 10_000, 0, 3, 7, 12, 40, 41, 90, 300)
	l := NewLive(LiveOptions{})
	for b.Loop() {
		w.Start += 10_000
		w.End += 10_000
		l.Heatmap(w)
	}
}

// BenchmarkDraw: the live page's parts at their fullest: 24 heatmap keys
// of 60 windows, 5 minutes of samples of 3 rules, 16 partitions and 16
// sources; all of them drawn anew, and as in a second when one key's
// window fired.
func BenchmarkDraw(b *testing.B) {
	hm := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}}
	now := time.UnixMilli(1_700_000_300_000)
	l := NewLive(LiveOptions{Now: func() time.Time { return now }})
	for k := range 24 {
		for i := range int64(60) {
			l.Heatmap(fired(hm, fmt.Sprintf("\"/api%d\"\x00", k), i*10_000, i*10_000+10_000, 0, 3, 7, 12, 40, 41, 90, 300))
		}
	}
	for at := int64(1_700_000_000_000); at <= now.UnixMilli(); at += 1000 {
		s := Sample{At: at, Records: at / 10, Watermark: at - 2000}
		for r := range 3 {
			s.Decisions = append(s.Decisions, RuleCount{fmt.Sprint("rule", r), "deny", at / 1000 * int64(r)})
		}
		for p := range int32(16) {
			s.Partitions = append(s.Partitions, PartitionSample{Partition: p, WatermarkLag: 2000 + int64(p), Known: true, ConsumerLag: int64(p)})
		}
		for src := range 16 {
			s.Sources = append(s.Sources, SourceSample{Source: fmt.Sprint("gw-", src), Skew: float64(src), Known: true, Degraded: src == 3})
		}
		for k := range 20 {
			s.TopKeys = append(s.TopKeys, KeyCount{"rule0", fmt.Sprint("user=u", k), int64(k)})
		}
		l.Add(s)
	}
	// drawAfter draws every part anew after changing the figures of n
	// keys, as in a second when n keys' windows fired.
	drawAfter := func(b *testing.B, n int) {
		for b.Loop() {
			l.mu.Lock()
			clear(l.drawn)
			changed := 0
			for _, s := range l.series {
				if changed == n {
					break
				}
				s.version++
				changed++
			}
			l.mu.Unlock()
			for _, part := range parts {
				l.draw(part)
			}
		}
	}
	b.Run("all", func(b *testing.B) { drawAfter(b, len(l.series)) })
	b.Run("steady", func(b *testing.B) { drawAfter(b, 1) })
}

// BenchmarkOutputFeedDecision: a decision record read back from the
// decisions topic counted for the whole job's console of a distributed
// instance (OutputFeed), among 5,000 keys: what each instance spends per
// decision of the whole job.
func BenchmarkOutputFeedDecision(b *testing.B) {
	enc := sink.NewEncoder()
	r := &rules.Rule{Name: "pay-burst", Action: "deny", Key: []string{"user"}, Threshold: 5}
	var recs [][]byte
	for i := range 1000 {
		d := &windows.Decision{Rule: r, EventID: fmt.Appendf(nil, `"r-%09d"`, i), EventTS: 1732150000999,
			Key: fmt.Sprintf("\"u%d\"\x00", i%5000), Start: 1732149941000, End: 1732150001000, Value: 6}
		recs = append(recs, enc.AppendDecision(nil, d))
	}
	feed := NewOutputFeed(NewLive(LiveOptions{}), 4096)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := feed.Decision(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
}

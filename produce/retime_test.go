package produce

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
)

// TestRetimer: the first line with a reference time fixes the offset that
// makes its reference now; every ts and ingest_ts after it moves by the
// same offset, whatever its form, and what is not a time stays as it is.
func TestRetimer(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	var r retimer
	for _, c := range []struct {
		line, want string
		ref        int64 // -1: none
	}{
		{`not json`, `not json`, -1},
		{`{"id":"x"}`, `{"id":"x"}`, -1},
		// ingest_ts is the reference: it becomes now, ts keeps its distance.
		{`{"id":"a","ts":1732150000000,"ingest_ts":1732150000005}`, `{"id":"a","ts":1799999999995,"ingest_ts":1800000000000}`, 1800000000000},
		// Without ingest_ts, ts is the reference; nested members stay.
		{`{"id":"b", "ts" : 1732150001000, "n":{"ts":5}}`, `{"id":"b", "ts" : 1800000000995, "n":{"ts":5}}`, 1800000000995},
		{`{"ts":"2024-11-21T00:46:41.005Z","id":"c"}`, `{"ts":"2027-01-15T08:00:01Z","id":"c"}`, 1800000001000},
		{`{"ts":"2024-11-21T08:46:41.5+08:00"}`, `{"ts":"2027-01-15T16:00:01.495+08:00"}`, 1800000001495},
		// Not times: left for the job's dlq.
		{`{"id":"d","ts":1.5,"ingest_ts":"soon"}`, `{"id":"d","ts":1.5,"ingest_ts":"soon"}`, -1},
		{`{"id":"e","ts":9223372036854775807}`, `{"id":"e","ts":9223372036854775807}`, -1},
		// A number of another length than its original.
		{`{"id":"f","ts":0,"ingest_ts":-67849999985}`, `{"id":"f","ts":67849999995,"ingest_ts":10}`, 10},
	} {
		out, ref, ok := r.retime([]byte(c.line), now)
		if string(out) != c.want || ok != (c.ref >= 0) || ok && ref != c.ref {
			t.Errorf("retime(%s) = %s, %d, %v; want %s, %d", c.line, out, ref, ok, c.want, c.ref)
		}
	}
}

// TestProduceRetime: with Retime, a capture recorded in 2024 arrives with
// its first record timestamp now and every ts and ingest_ts shifted by the
// same offset, at the pace it was recorded.
func TestProduceRetime(t *testing.T) {
	addr := startBroker(t, 1)
	lines := []string{
		`{"id":"a","ts":1732150000000,"ingest_ts":1732150000010,"api":"/pay"}`,
		`{"id":"b","ts":"2024-11-21T00:46:40.300Z","ingest_ts":1732150000320}`,
		`{"id":"c","ts":1732150000600}`, // no ingest_ts: sent at its ts, stamped with the send time
		`{"id":"d","ts":1732150000500,"ingest_ts":1732150000900}`,
	}
	start := time.Now()
	st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(strings.Join(lines, "\n")),
		Brokers: []string{addr}, Retime: true})
	if err != nil || st.Records != 4 {
		t.Fatalf("produce: %+v, %v", st, err)
	}
	if elapsed := time.Since(start); elapsed < 850*time.Millisecond {
		t.Errorf("sent in %v: the capture spans 890 ms of ingest time, to be kept", elapsed)
	}
	msgs := kafkatest.ReadMessages(t, nil, addr, "requests", 0, 4, time.Minute)
	offset := st.RetimedBy.Milliseconds()
	if first := msgs[0].Time.Sub(start); first < -5*time.Millisecond || first > 2*time.Second {
		t.Errorf("the first record is stamped %v after the start, want about now", first)
	}
	wantTS := []int64{1732150000000, 1732150000300, 1732150000600, 1732150000500}
	wantIngest := []int64{1732150000010, 1732150000320, -1, 1732150000900}
	for i, m := range msgs {
		var ev struct {
			TS       any   `json:"ts"`
			IngestTS int64 `json:"ingest_ts"`
		}
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			t.Fatalf("record %d: %v: %s", i, err, m.Value)
		}
		ts, _ := parseTS([]byte(mustJSON(t, ev.TS)))
		if ts != wantTS[i]+offset {
			t.Errorf("record %d: ts %d, want %d shifted by %d: %s", i, ts, wantTS[i], offset, m.Value)
		}
		if wantIngest[i] < 0 {
			// Stamped when sent, which is when its retimed ts came.
			if d := m.Time.UnixMilli() - ts; d < -5 || d > 300 {
				t.Errorf("record %d: stamped %d ms from its retimed ts", i, d)
			}
			continue
		}
		if ev.IngestTS != wantIngest[i]+offset || m.Time.UnixMilli() != ev.IngestTS {
			t.Errorf("record %d: ingest_ts %d, record time %d; want both %d", i, ev.IngestTS, m.Time.UnixMilli(), wantIngest[i]+offset)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestProduceHintsRetime: a capture stamped long ago is sent as it is, and
// Run says how to play it as live traffic; a recent one, or one
// retimed, goes without the hint.
func TestProduceHintsRetime(t *testing.T) {
	addr := startBroker(t, 1)
	for _, c := range []struct {
		ingest int64
		retime bool
		hint   bool
	}{
		{1732150000000, false, true},
		{time.Now().Add(-time.Minute).UnixMilli(), false, false},
		{1732150000000, true, false},
	} {
		var logs strings.Builder
		line := `{"id":"a","ts":` + strconv.FormatInt(c.ingest, 10) + `,"ingest_ts":` + strconv.FormatInt(c.ingest, 10) + "}\n"
		_, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(line), Brokers: []string{addr},
			Retime: c.retime, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(logs.String(), "--retime"); got != c.hint {
			t.Errorf("ingest_ts %d, retime %v: hint %v, want %v: %s", c.ingest, c.retime, got, c.hint, logs.String())
		}
	}
}

package produce

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/broker"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

func startBroker(t *testing.T, partitions int32) string {
	t.Helper()
	b, err := broker.Start(broker.Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": partitions}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addr()
}

func TestProduce(t *testing.T) {
	addr := startBroker(t, 1)
	lines := []string{
		`{"id":"r-1","ts":1732150000123,"ingest_ts":1732150000200,"user":"u1"}`,
		`{"id":"r-2","ts":1732150000300,"user":"u2"}`,
		`{"id":"r-3","ts":17321500`,                      // invalid: still sent, nil key
		``,                                               // blank: skipped
		`{"ts":1732150000400,"ingest_ts":1732150000401}`, // no key
		`{"nested":{"id":"no","ingest_ts":1},"id":"r\u002d5","ingest_ts":1732150000500}`,
	}
	// gzip covers the .jsonl.gz path as well.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(strings.Join(lines, "\r\n") + "\n"))
	zw.Close()
	file := filepath.Join(t.TempDir(), "in.jsonl.gz")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	before := time.Now().Add(-time.Second)
	st, err := Run(context.Background(), Options{File: file, Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second)
	if st.Records != 5 || st.Failed != 0 || st.WithIngestTS != 3 || st.Keyless != 2 {
		t.Errorf("stats = %+v, want 5 records, 3 with ingest_ts, 2 keyless", st)
	}

	got := kafkatest.ReadMessages(t, nil, addr, "requests", 0, 5, time.Minute)
	want := []struct {
		key string // "" means nil
		ts  int64  // 0 means the send time
	}{
		{"r-1", 1732150000200},
		{"r-2", 1732150000200}, // no ingest_ts: the one before
		{"", 1732150000200},
		{"", 1732150000401},
		{"r-5", 1732150000500},
	}
	valueLines := []string{lines[0], lines[1], lines[2], lines[4], lines[5]}
	for i, w := range want {
		m := got[i]
		if string(m.Value) != valueLines[i] {
			t.Errorf("message %d value = %q, want %q", i, m.Value, valueLines[i])
		}
		if w.key == "" && m.Key != nil || w.key != "" && string(m.Key) != w.key {
			t.Errorf("message %d key = %q, want %q", i, m.Key, w.key)
		}
		if w.ts != 0 {
			if m.Time.UnixMilli() != w.ts {
				t.Errorf("message %d time = %d, want ingest_ts %d", i, m.Time.UnixMilli(), w.ts)
			}
		} else if m.Time.Before(before) || m.Time.After(after) {
			t.Errorf("message %d time = %v, want the send time", i, m.Time)
		}
	}
}

func TestProduceKeyAttribute(t *testing.T) {
	addr := startBroker(t, 1)
	in := `{"id":"r-1","ts":1,"user":"u42"}` + "\n" + `{"id":"r-2","ts":2,"user":7}` + "\n" + `{"id":"r-3","ts":3,"user":null}`
	st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(in), Brokers: []string{addr}, Key: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 3 {
		t.Fatalf("records = %d, want 3", st.Records)
	}
	got := kafkatest.ReadMessages(t, nil, addr, "requests", 0, 3, time.Minute)
	if string(got[0].Key) != "u42" || string(got[1].Key) != "7" || got[2].Key != nil {
		t.Errorf("keys = %q %q %q, want u42 7 nil", got[0].Key, got[1].Key, got[2].Key)
	}
}

func TestProduceRate(t *testing.T) {
	addr := startBroker(t, 3)
	var sb strings.Builder
	for i := range 100 {
		fmt.Fprintf(&sb, `{"id":"r-%d","ts":%d}`+"\n", i, 1732150000000+i)
	}
	start := time.Now()
	st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(sb.String()), Brokers: []string{addr}, Rate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("100 records at rate 1000 took %v, want >= 80ms", d)
	}
	if st.Records != 100 {
		t.Errorf("records = %d, want 100", st.Records)
	}
}

func TestProduceMissingFile(t *testing.T) {
	_, err := Run(context.Background(), Options{File: "/nonexistent.jsonl", Brokers: []string{"127.0.0.1:1"}})
	if err == nil || !strings.Contains(err.Error(), "produce /nonexistent.jsonl") {
		t.Errorf("err = %v, want it to name the file", err)
	}
}

// TestProduceNoBroker: with nothing listening, produce names the address
// it tried, once per step, and says what to do: start the development
// broker when no --brokers was given, check them otherwise.
func TestProduceNoBroker(t *testing.T) {
	file := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(file, []byte(`{"id":"a","ts":1}`+"\n"), 0o644)
	_, err := Run(context.Background(), Options{File: file, Brokers: []string{"127.0.0.1:1"}})
	if err == nil {
		t.Fatal("produce without a broker succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"connect to 127.0.0.1:1: connection refused", "check --brokers"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "dial tcp") {
		t.Errorf("error %q repeats the dial step", msg)
	}
	if hint := kafkaconn.RefusedHint(err, DefaultBroker); !strings.Contains(hint, DefaultBroker) || !strings.Contains(hint, "riskstream run --rules FILE' (without --brokers)") {
		t.Errorf("hint for the default address = %q", hint)
	}
	if hint := kafkaconn.RefusedHint(errors.New("tls: bad certificate"), DefaultBroker); hint != "" {
		t.Errorf("hint for another error = %q, want none", hint)
	}
}

func TestScanEvent(t *testing.T) {
	for _, c := range []struct {
		line, key string
		wantKey   string // "-" means nil
		wantTS    int64  // -1 means unset
		ok        bool
	}{
		{`{"id":"a","ingest_ts":5}`, "id", "a", 5, true},
		{` { "id" : "a" , "ingest_ts" : 5 } `, "id", "a", 5, true},
		{`{"id":"a","ingest_ts":5.5}`, "id", "a", -1, true},
		{`{"id":"a","ingest_ts":"5"}`, "id", "a", -1, true},
		{`{"x":[1,{"id":"b"},"]"],"id":"a"}`, "id", "a", -1, true},
		{`{"i\u0064":"a\"b"}`, "id", `a"b`, -1, true},
		{`{"id":"a\\","x":"\\\""}`, "id", `a\`, -1, true},
		{`{"id":"x\\\"y"}`, "id", `x\"y`, -1, true},
		{`{"id":"a\"}`, "id", "-", -1, false},
		{`{"id":"a\`, "id", "-", -1, false},
		{`{}`, "id", "-", -1, true},
		{`[1]`, "id", "-", -1, false},
		{`{"id":"a"`, "id", "-", -1, false},
		{`{"id":"a"} x`, "id", "-", -1, false},
		{`{"id":tru}`, "id", "-", -1, false},
		{`{"id":1e}`, "id", "-", -1, false}, // not JSON: sent without a key, for the job's dlq
		{`not json`, "id", "-", -1, false},
	} {
		key, ts, ok := newKeyScanner(c.key).scanMembers([]byte(c.line))
		gotKey := "-"
		if key != nil {
			gotKey = string(key)
		}
		gotTS := int64(-1)
		if ts.set {
			gotTS = ts.ms
		}
		if ok != c.ok || (ok && (gotKey != c.wantKey || gotTS != c.wantTS)) {
			t.Errorf("scanMembers(%s) = %q, %d, %v; want %q, %d, %v", c.line, gotKey, gotTS, ok, c.wantKey, c.wantTS, c.ok)
		}
	}
}

// TestProduceSlowInput: a record read from a slow pipe is sent at once,
// not held back in a group waiting for more input.
func TestProduceSlowInput(t *testing.T) {
	addr := startBroker(t, 1)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), Options{File: "-", Stdin: pr, Brokers: []string{addr}})
		done <- err
	}()
	pw.Write([]byte(`{"id":"first","ts":1}` + "\n"))
	if got := kafkatest.ReadMessages(t, nil, addr, "requests", 0, 1, time.Minute); string(got[0].Key) != "first" {
		t.Fatalf("got %q", got[0].Key)
	}
	pw.Write([]byte(`{"id":"second","ts":2}` + "\n"))
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// countingMetadata answers every metadata request, counting them.
type countingMetadata struct {
	asked     int
	errorCode int16
}

func (c *countingMetadata) RoundTrip(context.Context, net.Addr, kafka.Request) (kafka.Response, error) {
	c.asked++
	return &metadata.Response{Topics: []metadata.ResponseTopic{{Name: "t", ErrorCode: c.errorCode}}}, nil
}

// TestMetadataCache: the writer's per-message metadata requests are
// answered from the last complete answer; an answer with a topic error is
// not kept.
func TestMetadataCache(t *testing.T) {
	inner := &countingMetadata{}
	c := &metadataCache{RoundTripper: inner, now: time.Now}
	req := &metadata.Request{TopicNames: []string{"t"}}
	for range 3 {
		if _, err := c.RoundTrip(context.Background(), nil, req); err != nil {
			t.Fatal(err)
		}
	}
	if inner.asked != 1 {
		t.Fatalf("asked the transport %d times, want 1", inner.asked)
	}
	c.RoundTrip(context.Background(), nil, &metadata.Request{TopicNames: []string{"u"}})
	if inner.asked != 2 {
		t.Fatalf("another topic's request was answered from the cache")
	}
	failing := &countingMetadata{errorCode: 3}
	c = &metadataCache{RoundTripper: failing, now: time.Now}
	c.RoundTrip(context.Background(), nil, req)
	c.RoundTrip(context.Background(), nil, req)
	if failing.asked != 2 {
		t.Fatalf("an answer with a topic error was kept")
	}
}

// BenchmarkScanEvent is the producer's per-line work besides kafka-go,
// with scanMembers alone and with the event decoder first (keyScanner):
// a scanner of its own, as scanMembers, was half of the producer's CPU at 200,000 records/s.
func BenchmarkScanEvent(b *testing.B) {
	line := []byte(`{"id":"r-000001","ts":1732150000123,"ingest_ts":1732150000131,"source":"gw-3","user":"u42","device":"d9","api":"/pay","channel":"alipay","merchant":"m7","region":"cn-east","latency_ms":12.5,"status":200,"amount":99.0,"ua":"okhttp/4.12.0 (Android 14; Pixel 8)"}`)
	for _, c := range []struct {
		name string
		scan func([]byte) ([]byte, optMillis, bool)
	}{
		{"scanMembers", newKeyScanner("user").scanMembers},
		{"keyScanner", newKeyScanner("user").scan},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			for b.Loop() {
				if key, ts, ok := c.scan(line); !ok || string(key) != "u42" || !ts.set {
					b.Fatal("scan failed")
				}
			}
		})
	}
}

// TestKeyScanner: the producer's fast path gives every bundled record, and
// every line of TestScanEvent, the key and ingest_ts scanMembers gives, for
// key attributes of every kind (strings, numbers, the reserved fields, a
// missing one).
func TestKeyScanner(t *testing.T) {
	data := testinput.Bundled(t)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	for _, l := range keyScannerSeeds {
		lines = append(lines, []byte(l))
	}
	for _, attr := range []string{"id", "user", "amount", "status", "source", "ts", "ingest_ts", "nope"} {
		k := newKeyScanner(attr)
		for _, line := range lines {
			checkKeyScanner(t, k, line)
		}
	}
}

// keyScannerSeeds are lines whose keys need care: escaped, invalid UTF-8,
// not strings, duplicated, absent.
var keyScannerSeeds = []string{
	`{"id":"r1","ts":1,"user":"u\u0034\"2","ingest_ts":5}`,
	"{\"id\":\"r1\",\"ts\":1,\"user\":\"\xff\xfe\",\"ingest_ts\":-0}",
	`{"id":"r1","ts":1,"user":"\ufffd"}`,
	`{"id":"r1","ts":1,"user":12.50,"user":true}`,
	`{"id":"r1","ts":1,"user":null,"ingest_ts":null}`,
	`{"id":"r1","ts":1,"user":{"a":1},"ingest_ts":99999999999999999999}`,
	`{"id":"r\\1","ts":"2024-11-21T00:00:00Z","user":""}`,
	`{"id":"","ts":1,"user":"u"}`,
}

func checkKeyScanner(t *testing.T, k *keyScanner, line []byte) {
	t.Helper()
	key, ts, ok := k.scan(line)
	wantKey, wantTS, wantOK := k.scanMembers(line)
	if ok != wantOK || !bytes.Equal(key, wantKey) || (key == nil) != (wantKey == nil) || ts != wantTS {
		t.Fatalf("key %q of %s: fast path gives %q %v %v, scanMembers %q %v %v",
			k.attr, line, key, ts, ok, wantKey, wantTS, wantOK)
	}
}

func FuzzKeyScanner(f *testing.F) {
	for _, l := range keyScannerSeeds {
		f.Add([]byte(l), "user")
	}
	f.Add([]byte(`{"id":"r1","ts":1,"amount":3}`), "amount")
	f.Fuzz(func(t *testing.T, line []byte, attr string) {
		if attr == "" {
			return
		}
		checkKeyScanner(t, newKeyScanner(attr), line)
	})
}

// TestProduceOversizedLine: a line larger than the maximum message size,
// in the middle of a file, is reported by file and line and not sent; the
// lines after it are, and Run fails at the end, naming the line.
func TestProduceOversizedLine(t *testing.T) {
	addr := startBroker(t, 1)
	lines := []string{
		`{"id":"r-1","ts":1}`,
		`{"id":"r-2","ts":2}`,
		`{"id":"r-3","ts":3,"pad":"` + strings.Repeat("x", 1_100_000) + `"}`, // over 1,000,000 and 1 MiB
		``,
		`{"id":"r-5","ts":5}`,
		`{"id":"r-6","ts":6}`,
	}
	file := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	st, err := Run(context.Background(), Options{File: file, Brokers: []string{addr},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), file+":3") {
		t.Errorf("err = %v, want it to name %s:3", err, file)
	}
	if st.Records != 4 || st.TooLarge != 1 || st.Failed != 0 {
		t.Errorf("stats = %+v, want 4 records and 1 too large", st)
	}
	if !strings.Contains(logs.String(), "line=3 bytes=1100031") {
		t.Errorf("the line is not reported:\n%s", logs.String())
	}
	var got []string
	for _, m := range kafkatest.ReadMessages(t, nil, addr, "requests", 0, 4, time.Minute) {
		got = append(got, string(m.Key))
	}
	if !slices.Equal(got, []string{"r-1", "r-2", "r-5", "r-6"}) {
		t.Errorf("sent %q", got)
	}
}

// TestProduceReportsLinesUpToACap: the first lines not sent are reported
// one by one, the others counted.
func TestProduceReportsLinesUpToACap(t *testing.T) {
	addr := startBroker(t, 1)
	var in strings.Builder
	for i := range 15 {
		pad := ""
		if i%5 != 0 {
			pad = strings.Repeat("x", 200)
		}
		fmt.Fprintf(&in, `{"id":"r-%d","ts":%d,"pad":%q}`+"\n", i, i, pad)
	}
	var logs bytes.Buffer
	st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(in.String()),
		Brokers: []string{addr}, MaxMessageBytes: 100, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if st.Records != 3 || st.TooLarge != 12 {
		t.Errorf("stats = %+v, want 3 records and 12 too large", st)
	}
	if err == nil || !strings.Contains(err.Error(), "12 lines too large for topic requests") ||
		!strings.Contains(err.Error(), "-:2, -:3, -:4, -:5, -:7") || !strings.Contains(err.Error(), "-:13 and 2 more") {
		t.Errorf("err = %v", err)
	}
	if n := strings.Count(logs.String(), `msg="line not sent"`); n != 10 || !strings.Contains(logs.String(), `msg="more lines not sent" file=- lines=2`) {
		t.Errorf("%d lines reported one by one, want 10, then a count:\n%s", n, logs.String())
	}
}

// TestProduceBrokerRefusesTooLarge: on a topic whose max.message.bytes is
// below the maximum message size, lines refused together are sent again
// one at a time, and a line the broker refuses alone is reported by line.
func TestProduceBrokerRefusesTooLarge(t *testing.T) {
	addr := startBroker(t, 1)
	client := kafkatest.Client(t, addr, 0)
	resp, err := client.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: "small", NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "2000"}},
	}}})
	if err == nil {
		err = resp.Errors["small"]
	}
	if err != nil {
		t.Fatal(err)
	}
	var in strings.Builder
	var want []string
	for i := range 20 {
		if i == 10 {
			fmt.Fprintf(&in, `{"id":"big","ts":1,"pad":%q}`+"\n", strings.Repeat("x", 3000))
		}
		fmt.Fprintf(&in, `{"id":"r-%02d","ts":1,"pad":%q}`+"\n", i, strings.Repeat("x", 300))
		want = append(want, fmt.Sprintf("r-%02d", i))
	}
	var logs bytes.Buffer
	st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(in.String()),
		Brokers: []string{addr}, Topic: "small", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), "-:11") {
		t.Errorf("err = %v, want it to name line 11", err)
	}
	if st.Records != 20 || st.TooLarge != 1 || st.Failed != 0 {
		t.Errorf("stats = %+v, want 20 records and 1 too large", st)
	}
	if !strings.Contains(logs.String(), "line=11") || !strings.Contains(logs.String(), "refused by the broker") {
		t.Errorf("the line the broker refused is not reported:\n%s", logs.String())
	}
	var got []string
	for _, m := range kafkatest.ReadMessages(t, nil, addr, "small", 0, 20, time.Minute) {
		got = append(got, string(m.Key))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("sent %q", got)
	}
}

// TestProduceSameTopicTwice: a file produced twice makes the same topic,
// keyless lines included (they go by their bytes' murmur2, not at random),
// and a line without ingest_ts after lines with it takes the last one's
// time, so that the topic stays in the capture's time.
func TestProduceSameTopicTwice(t *testing.T) {
	var in strings.Builder
	for i := range 400 {
		switch i % 10 {
		case 3:
			fmt.Fprintf(&in, "garbage %d\n", i) // keyless
		case 7:
			fmt.Fprintf(&in, `{"id":"r-%d","ts":%d}`+"\n", i, 1732150000000+int64(i)) // no ingest_ts
		default:
			fmt.Fprintf(&in, `{"id":"r-%d","ts":%d,"ingest_ts":%d}`+"\n", i, 1732150000000+int64(i), 1732150000000+int64(i))
		}
	}
	topic := func() [][]string {
		addr := startBroker(t, 4)
		st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(in.String()), Brokers: []string{addr}})
		if err != nil || st.Records != 400 || st.Keyless != 40 {
			t.Fatalf("produce: %+v, %v", st, err)
		}
		parts := make([][]string, 4)
		for p := range 4 {
			for _, m := range kafkatest.ReadPartition(t, addr, "requests", p, time.Minute) {
				parts[p] = append(parts[p], fmt.Sprintf("%d %s", m.Time.UnixMilli(), m.Value))
			}
		}
		return parts
	}
	first, second := topic(), topic()
	for p := range 4 {
		if !slices.Equal(first[p], second[p]) {
			t.Fatalf("partition %d differs between two produces of one file", p)
		}
		for _, rec := range first[p] {
			if ts, _, _ := strings.Cut(rec, " "); ts < "1732150000000" || ts > "1732150000399" {
				t.Fatalf("partition %d: a record stamped outside the capture's time: %s", p, rec)
			}
		}
	}
}

// TestOptions: EnsureDefaults fills what is not set, the batch timeout by
// the pace (large batches when unpaced or fast), and keeps what is;
// Validate reports every problem at once.
func TestOptions(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if !slices.Equal(o.Brokers, []string{DefaultBroker}) || o.Topic != DefaultTopic || o.Key != DefaultKey ||
		o.MaxMessageBytes <= 0 || o.Logger == nil || o.Stdin == nil || o.Now == nil || o.BatchTimeout != 5*time.Millisecond {
		t.Fatalf("defaults: %+v", o)
	}
	for _, c := range []struct {
		o    Options
		want time.Duration
	}{
		{Options{Rate: 1000}, time.Millisecond},
		{Options{Retime: true}, time.Millisecond},
		{Options{Rate: 100_000}, 5 * time.Millisecond},
		{Options{Rate: 1000, BatchTimeout: 3 * time.Millisecond}, 3 * time.Millisecond},
	} {
		c.o.EnsureDefaults()
		if c.o.BatchTimeout != c.want {
			t.Errorf("rate %v, retime %v: batch timeout %v, want %v", c.o.Rate, c.o.Retime, c.o.BatchTimeout, c.want)
		}
	}
	kept := Options{File: "in.jsonl", Brokers: []string{"b:9092"}, Topic: "t", Key: "user", MaxMessageBytes: 2048}
	kept.EnsureDefaults()
	if kept.File != "in.jsonl" || kept.Brokers[0] != "b:9092" || kept.Topic != "t" || kept.Key != "user" || kept.MaxMessageBytes != 2048 {
		t.Fatalf("set fields changed: %+v", kept)
	}
	if err := kept.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	bad := Options{Rate: -1, MaxMessageBytes: -5}
	err := bad.Validate()
	for _, want := range []string{"no input file", "negative rate -1", "negative maximum message size -5"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
}

// TestProduceClock: a record without ingest_ts is stamped by the clock the
// options give, and the time taken is that clock's.
func TestProduceClock(t *testing.T) {
	addr := startBroker(t, 1)
	at := time.UnixMilli(1_500_000_000_000)
	now := func() time.Time { at = at.Add(time.Millisecond); return at }
	st, err := Run(context.Background(), Options{File: "-", Stdin: strings.NewReader(`{"id":"r-1","ts":1}` + "\n"),
		Brokers: []string{addr}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	got := kafkatest.ReadMessages(t, nil, addr, "requests", 0, 1, time.Minute)
	if ms := got[0].Time.UnixMilli(); ms <= 1_500_000_000_000 || ms > 1_500_000_000_000+st.Elapsed.Milliseconds() {
		t.Fatalf("record stamped %d, want the given clock's time, from 1500000000000 within the %v it took", ms, st.Elapsed)
	}
	if st.Elapsed <= 0 || st.Elapsed > time.Second {
		t.Fatalf("elapsed %v by the given clock, which moves a millisecond a reading", st.Elapsed)
	}
}

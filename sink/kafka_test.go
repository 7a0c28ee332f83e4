package sink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaKeys: decisions are keyed by the event id as the producer sent
// it, unescaped; heatmaps by heatmap name and key. Values carry no newline.
func TestKafkaKeys(t *testing.T) {
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics)
	defer k.Close()
	r := &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}}
	for _, id := range []string{`"plain-1"`, `"tab\there"`} {
		k.DecisionAt(&windows.Decision{Rule: r, EventID: []byte(id), Key: "\"u\"\x00"}, DecisionTimes{Ref: 42})
	}
	if got := string(k.pending[0].Key); got != "plain-1" {
		t.Errorf("key %q, want plain-1", got)
	}
	if got := string(k.pending[1].Key); got != "tab\there" {
		t.Errorf("key %q, want an unescaped tab", got)
	}
	if v := k.pending[0].Value; v[len(v)-1] == '\n' || k.pending[0].Topic != "decisions" {
		t.Errorf("value %q on %s", v, k.pending[0].Topic)
	}
	if len(k.decisionTimes) != 2 || k.decisionTimes[1].Ref != 42 {
		t.Errorf("decision times %v", k.decisionTimes)
	}
	// Detach hands the pending messages over and starts afresh.
	b := k.Detach()
	if len(b.Messages) != 2 || len(b.Decisions) != 2 || k.Pending() != 0 || len(k.decisionTimes) != 0 {
		t.Errorf("detached %d messages, %d decision times; %d still pending", len(b.Messages), len(b.Decisions), k.Pending())
	}
}

// TestKafkaShadowTopic: a shadow rule's decisions go to the shadow topic
// when there is one, marked either way; an enforcing rule's stay where
// they were.
func TestKafkaShadowTopic(t *testing.T) {
	enforce := &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}}
	shadow := &rules.Rule{Name: "s", Action: "deny", Key: []string{"user"}, Mode: rules.Shadow}
	for _, tc := range []struct {
		shadowTopic, want string
		topics            int
	}{{"", "decisions", 4}, {"watched", "watched", 5}} {
		topics := DefaultTopics
		topics.Shadow = tc.shadowTopic
		k := NewKafka([]string{"127.0.0.1:1"}, topics)
		k.Decision(&windows.Decision{Rule: enforce, EventID: []byte(`"e"`), Key: "\"u\"\x00"})
		k.Decision(&windows.Decision{Rule: shadow, EventID: []byte(`"e"`), Key: "\"u\"\x00"})
		if got := k.pending[0]; got.Topic != "decisions" || bytes.Contains(got.Value, []byte(`"mode"`)) {
			t.Errorf("shadow topic %q: enforcing decision %s on %s", tc.shadowTopic, got.Value, got.Topic)
		}
		if got := k.pending[1]; got.Topic != tc.want || !bytes.HasSuffix(got.Value, []byte(`,"mode":"shadow"}`)) {
			t.Errorf("shadow topic %q: shadow decision %s on %s, want on %s", tc.shadowTopic, got.Value, got.Topic, tc.want)
		}
		if names := topics.Names(); !slices.Contains(names, tc.want) || len(names) != tc.topics {
			t.Errorf("shadow topic %q: Names %v", tc.shadowTopic, names)
		}
		k.Close()
	}
}

// TestKafkaWriteKeepsTheUnacknowledged: when the broker refuses the
// messages of one topic, Write reports it and keeps only those, so that
// writing the batch again sends no message twice.
func TestKafkaWriteKeepsTheUnacknowledged(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "decisions", "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first produce request to dlq is refused; kafka-go sends each
	// topic's batch in a request of its own.
	var refused atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) != 1 || pr.Topics[0].Topic != "dlq" || refused.Swap(true) {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "dlq"
		for _, p := range pr.Topics[0].Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	k := NewKafka(c.ListenAddrs(), DefaultTopics)
	defer k.Close()
	k.DecisionAt(&windows.Decision{Rule: &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}},
		EventID: []byte(`"e1"`), Key: "\"u\"\x00"}, DecisionTimes{Ref: 1})
	k.DLQ([]byte(`{"bad"`), "not JSON", &event.Provenance{Partition: 0, Offset: 7})
	b := k.Detach()

	err = k.Write(context.Background(), &b)
	if err == nil || !Permanent(err) {
		t.Fatalf("refused write: %v, permanent %v", err, Permanent(err))
	}
	if len(b.Messages) != 1 || b.Messages[0].Topic != "dlq" {
		t.Fatalf("kept %d messages after the refusal, want the dlq one", len(b.Messages))
	}
	if err := k.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Messages) != 0 {
		t.Fatalf("%d messages left after a write that succeeded", len(b.Messages))
	}
	for topic, want := range map[string]int64{"decisions": 1, "dlq": 1} {
		if n := endOffset(t, c, topic); n != want {
			t.Errorf("%s holds %d records, want %d", topic, n, want)
		}
	}
}

// TestPermanent: only errors about the messages themselves are permanent.
func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{kafka.TopicAuthorizationFailed, true},
		{kafka.MessageSizeTooLarge, true},
		{kafka.MessageTooLargeError{}, true},
		{kafka.WriteErrors{nil, kafka.NotEnoughReplicas}, false},
		{kafka.WriteErrors{nil, kafka.InvalidTopic}, true},
		{kafka.LeaderNotAvailable, false},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false},
		{io.ErrUnexpectedEOF, false},
	} {
		if got := Permanent(fmt.Errorf("wrapped: %w", tc.err)); got != tc.want {
			t.Errorf("Permanent(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// endOffset is the number of records of partition 0 of topic.
func endOffset(t *testing.T, c *kfake.Cluster, topic string) int64 {
	t.Helper()
	return kafkatest.EndOffset(t, c.ListenAddrs()[0], topic, 0)
}

// TestKafkaMessagesKeepTheirBytes: messages share chunks of memory; none is
// changed by the ones added after it, across chunks, records larger than a
// chunk's room and detaches included.
func TestKafkaMessagesKeepTheirBytes(t *testing.T) {
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics)
	defer k.Close()
	enc := NewEncoder()
	r := &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}}
	var want [][2]string // key, value
	var got []Batch
	for i := range 3000 {
		switch i % 3 {
		case 0:
			d := &windows.Decision{Rule: r, EventID: fmt.Appendf(nil, `"e-%d"`, i), Key: fmt.Sprintf("\"u%d\"\x00", i)}
			k.Decision(d)
			v := enc.AppendDecision(nil, d)
			want = append(want, [2]string{fmt.Sprintf("e-%d", i), string(v[:len(v)-1])})
		case 1:
			raw := fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, strings.Repeat("x", i)) // up to 3 KB
			k.DLQ(raw, "bad", &event.Provenance{Offset: int64(i)})
			v := AppendDLQ(nil, raw, "bad", &event.Provenance{Offset: int64(i)})
			want = append(want, [2]string{"", string(v[:len(v)-1])})
		case 2:
			k.Late([]byte(`{"late":true}`), int64(i), &event.Provenance{Offset: int64(i)})
			v := AppendLate(nil, []byte(`{"late":true}`), int64(i), &event.Provenance{Offset: int64(i)})
			want = append(want, [2]string{"", string(v[:len(v)-1])})
		}
		if i%100 == 99 {
			got = append(got, k.Detach())
		}
	}
	got = append(got, k.Detach())
	i := 0
	for _, b := range got {
		for _, m := range b.Messages {
			if string(m.Key) != want[i][0] || string(m.Value) != want[i][1] {
				t.Fatalf("message %d: key %q value %q, want %q %q", i, m.Key, m.Value, want[i][0], want[i][1])
			}
			i++
		}
	}
	if i != len(want) {
		t.Fatalf("%d messages, want %d", i, len(want))
	}
}

// newLimitedCluster starts a broker whose topics take messages of at most
// the given sizes (max.message.bytes, a record batch); 0 keeps the
// default.
func newLimitedCluster(t *testing.T, limits map[string]int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for topic, limit := range limits {
		var cfg map[string]string
		if limit > 0 {
			cfg = map[string]string{"max.message.bytes": strconv.Itoa(limit)}
		}
		if err := c.CreateTopic(topic, 1, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// readAll reads every message of partition 0 of topic.
func readAll(t *testing.T, c *kfake.Cluster, topic string) []string {
	t.Helper()
	return kafkatest.Values(kafkatest.ReadPartition(t, c.ListenAddrs()[0], topic, 0, 10*time.Second))
}

func counter(t *testing.T, reg *prometheus.Registry, name, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == topic {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{topic=%q}", name, topic)
	return 0
}

// TestKafkaWriteTooLarge: messages too large for their topic do not fail
// the write. One larger than the sink's limit, or refused by the broker on
// its own, goes to the dlq as a record naming the topic and why, with a
// prefix, the length and the hash of the message; messages refused only
// together (a batch over the topic's limit) are all written.
func TestKafkaWriteTooLarge(t *testing.T) {
	c := newLimitedCluster(t, map[string]int{"decisions": 0, "heatmaps": 3000, "late": 0, "dlq": 0})
	reg := prometheus.NewRegistry()
	k := NewKafka(c.ListenAddrs(), DefaultTopics, MaxMessageBytes(8192), Metrics(reg))
	defer k.Close()
	heatmap := func(i, size int) kafka.Message {
		v := fmt.Sprintf(`{"heatmap":"h","key":{"api":"%d"},"pad":"%s"}`, i, strings.Repeat("x", size))
		return kafka.Message{Topic: "heatmaps", Key: fmt.Appendf(nil, "h/%d", i), Value: []byte(v)}
	}
	// Five heatmaps of 700 bytes: alone each fits, together they do not.
	var msgs []kafka.Message
	var small []string
	for i := range 5 {
		msgs = append(msgs, heatmap(i, 700))
		small = append(small, string(msgs[i].Value))
	}
	big := heatmap(5, 5000)                                                           // refused by the broker
	huge := kafka.Message{Topic: "decisions", Value: bytes.Repeat([]byte("d"), 9000)} // over the sink's limit
	msgs = append(msgs, big, huge, kafka.Message{Topic: "decisions", Value: []byte(`{"id":"ok"}`)})
	b := Batch{Messages: msgs}
	if err := k.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Messages) != 0 {
		t.Fatalf("%d messages left to write again", len(b.Messages))
	}
	got := readAll(t, c, "heatmaps")
	slices.Sort(got)
	if !slices.Equal(got, small) {
		t.Errorf("heatmaps topic holds %d messages, want the 5 small ones", len(got))
	}
	if got := readAll(t, c, "decisions"); !slices.Equal(got, []string{`{"id":"ok"}`}) {
		t.Errorf("decisions topic: %.100q", got)
	}
	dlq := readAll(t, c, "dlq")
	if len(dlq) != 2 {
		t.Fatalf("dlq holds %d records, want 2", len(dlq))
	}
	for _, want := range []struct {
		topic, reason string
		value         []byte
	}{
		{"heatmaps", "refused by the broker", big.Value},
		{"decisions", "larger than the maximum message size of 8192 bytes", huge.Value},
	} {
		i := slices.IndexFunc(dlq, func(s string) bool { return strings.Contains(s, `"topic":"`+want.topic+`"`) })
		if i < 0 {
			t.Fatalf("no dlq record for the %s message: %.200q", want.topic, dlq)
		}
		var r struct {
			Reason       string `json:"reason"`
			Raw          string `json:"raw"`
			RawTruncated bool   `json:"raw_truncated"`
			RawBytes     int    `json:"raw_bytes"`
			RawSHA256    string `json:"raw_sha256"`
		}
		if err := json.Unmarshal([]byte(dlq[i]), &r); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(want.value)
		if !strings.Contains(r.Reason, want.reason) || !strings.HasPrefix(string(want.value), r.Raw) ||
			r.RawBytes != len(want.value) || r.RawSHA256 != hex.EncodeToString(sum[:]) || len(dlq[i]) > 8192 {
			t.Errorf("dlq record for the %s message: %.300s", want.topic, dlq[i])
		}
	}
	if n := counter(t, reg, "riskstream_output_refused_total", "heatmaps"); n != 1 {
		t.Errorf("refused heatmaps counted %v times, want 1", n)
	}
	if n := counter(t, reg, "riskstream_output_refused_total", "decisions"); n != 1 {
		t.Errorf("refused decisions counted %v times, want 1", n)
	}
}

// TestKafkaWriteDropsWhatTheDLQRefuses: a message too large for its topic
// whose dlq record the broker refuses too is logged at ERROR, counted as
// dropped, and not written again: the write succeeds.
func TestKafkaWriteDropsWhatTheDLQRefuses(t *testing.T) {
	c := newLimitedCluster(t, map[string]int{"heatmaps": 1000, "dlq": 1000})
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	k := NewKafka(c.ListenAddrs(), DefaultTopics, MaxMessageBytes(8192), Metrics(reg),
		Logger(slog.New(slog.NewTextHandler(&logs, nil))))
	defer k.Close()
	k.DLQ(bytes.Repeat([]byte("r"), 2000), "not JSON", &event.Provenance{Partition: 0, Offset: 41})
	b := k.Detach()
	b.Messages = append(b.Messages, kafka.Message{Topic: "heatmaps", Value: bytes.Repeat([]byte("h"), 3000)})
	done := make(chan error, 1)
	go func() { done <- k.Write(context.Background(), &b) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the write never ended")
	}
	if len(b.Messages) != 0 || endOffset(t, c, "dlq") != 0 || endOffset(t, c, "heatmaps") != 0 {
		t.Fatalf("%d messages left; dlq %d, heatmaps %d records", len(b.Messages), endOffset(t, c, "dlq"), endOffset(t, c, "heatmaps"))
	}
	for _, topic := range []string{"dlq", "heatmaps"} {
		if n := counter(t, reg, "riskstream_output_dropped_total", topic); n != 1 {
			t.Errorf("dropped %s messages counted %v times, want 1", topic, n)
		}
		if !strings.Contains(logs.String(), "level=ERROR msg=\"output message dropped") || !strings.Contains(logs.String(), "topic="+topic) {
			t.Errorf("no ERROR for the dropped %s message:\n%s", topic, logs.String())
		}
	}
}

// TestKafkaWriteErrorNamesTheTopic: a write that fails for good says for
// which topic.
func TestKafkaWriteErrorNamesTheTopic(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "decisions", "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) != 1 || pr.Topics[0].Topic != "dlq" {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = "dlq"
		rp := kmsg.NewProduceResponseTopicPartition()
		rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	k := NewKafka(c.ListenAddrs(), DefaultTopics)
	defer k.Close()
	b := Batch{Messages: []kafka.Message{{Topic: "decisions", Value: []byte("{}")}, {Topic: "dlq", Value: []byte("{}")}}}
	err = k.Write(context.Background(), &b)
	if err == nil || !Permanent(err) || !strings.Contains(err.Error(), "topic dlq") {
		t.Fatalf("refused write: %v", err)
	}
}

// TestKafkaPartitionsLikeJava: decisions go to the partition of their event
// id by murmur2, the Java client's default partitioner (kafka-go's Hash,
// FNV-1a, puts most of these ids elsewhere).
func TestKafkaPartitionsLikeJava(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "decisions"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k := NewKafka(c.ListenAddrs(), DefaultTopics)
	defer k.Close()
	r := &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}}
	want := map[int]int{}
	partitions := []int{0, 1, 2, 3, 4, 5, 6, 7}
	// Two writes: the second's offsets follow the first's.
	for _, ids := range [][2]int{{0, 40}, {40, 64}} {
		for i := ids[0]; i < ids[1]; i++ {
			id := fmt.Sprintf("e-%d", i)
			k.Decision(&windows.Decision{Rule: r, EventID: []byte(strconv.Quote(id)), Key: "\"u\"\x00"})
			want[kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(id)}, partitions...)]++
		}
		b := k.Detach()
		if err := k.Write(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
	// Where the sink's messages end, as the brokers acknowledged them: the
	// live job's checkpoints record it.
	acked := k.Acknowledged()
	for p := range 8 {
		if got := acked[Partition{"decisions", p}]; got != int64(want[p]) {
			t.Errorf("partition %d: acknowledged up to %d, want %d", p, got, want[p])
		}
	}
	for p := range 8 {
		if n := kafkatest.EndOffset(t, c.ListenAddrs()[0], "decisions", p); int(n) != want[p] {
			t.Errorf("partition %d holds %d decisions, want %d", p, n, want[p])
		}
	}
}

// TestKafkaSkipWritten: messages named by SkipWritten are left out once
// each, with their decision's latency reference; the others are written.
func TestKafkaSkipWritten(t *testing.T) {
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics)
	defer k.Close()
	r := &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}}
	decide := func(id string) {
		k.DecisionAt(&windows.Decision{Rule: r, EventID: []byte(strconv.Quote(id)), Key: "\"u\"\x00"}, DecisionTimes{Ref: int64(len(id))})
	}
	decide("a")
	decide("bb")
	k.DLQ([]byte(`{"bad`), "not JSON", &event.Provenance{Partition: 0, Offset: 7})
	first := k.Detach()
	w := NewWritten()
	for _, m := range first.Messages { // a, bb and the dlq record
		w.Add(m.Topic, m.Key, m.Value)
	}
	k.SkipWritten(w)
	decide("a")
	decide("a")
	decide("ccc")
	k.DLQ([]byte(`{"bad`), "not JSON", &event.Provenance{Partition: 0, Offset: 7})
	b := k.Detach()
	var ids []string
	for _, m := range b.Messages {
		ids = append(ids, m.Topic+":"+string(m.Key))
	}
	if got := strings.Join(ids, " "); got != "decisions:a decisions:ccc" {
		t.Errorf("written %q, want the second a and ccc", got)
	}
	if len(b.Decisions) != 2 || b.Decisions[0].Ref != 1 || b.Decisions[1].Ref != 3 {
		t.Errorf("latency references %v, want those of the decisions written", b.Decisions)
	}
	if w.Len() != 1 {
		t.Errorf("%d messages left to skip, want bb's", w.Len())
	}
	// What is left to make again, by topic, for the checkpoints' ends.
	if k.Unmade() != 1 || !k.UnmadeIn("decisions") || k.UnmadeIn("dlq") {
		t.Errorf("unmade %d, in decisions %v, in dlq %v: want bb's decision only", k.Unmade(), k.UnmadeIn("decisions"), k.UnmadeIn("dlq"))
	}
	if n := k.ForgetUnmade(); n != 1 || k.Unmade() != 0 || k.UnmadeIn("decisions") {
		t.Errorf("forgot %d, %d left", n, k.Unmade())
	}
	decide("bb")
	if b := k.Detach(); len(b.Messages) != 1 {
		t.Errorf("bb made again after it was forgotten: %d messages written, want 1", len(b.Messages))
	}
}

// TestKafkaSkipWrittenChanged: a message made again with another value than
// the one written (a decision's value, a heatmap record's counts, a late
// record's watermark) is recognised by what it is about and not written
// again; the written one stands and the change is counted. Messages about
// something else (another rule, another revision, another dlq record) are
// written.
func TestKafkaSkipWrittenChanged(t *testing.T) {
	reg := prometheus.NewRegistry()
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics, Metrics(reg))
	defer k.Close()
	r1 := &rules.Rule{Name: "r1", Action: "deny", Key: []string{"user"}}
	r2 := &rules.Rule{Name: "r2", Action: "deny", Key: []string{"user"}}
	h := &rules.Heatmap{Name: "lat", Key: []string{"api"}, Buckets: []float64{1, 2}}
	prov := &event.Provenance{Topic: "requests", Partition: 1, Offset: 9}
	emit := func(value float64, revision int32, wm int64, rule *rules.Rule, dlq string) {
		k.Decision(&windows.Decision{Rule: rule, EventID: []byte(`"e1"`), Key: "\"u\"\x00", Value: value, Source: prov})
		a := heatmap.New(2)
		a.Add(value, false, h.Buckets, nil)
		k.Heatmap(&windows.HeatmapWindow{Heatmap: h, Key: "\"/pay\"\x00", Start: 1, End: 11, Revision: revision, Acc: a})
		k.Late([]byte(`{"id":"e2","watermark":3}`), wm, prov)
		k.DLQ([]byte(`{"bad`), dlq, prov)
	}
	emit(1, 0, 100, r1, "not JSON")
	w := NewWritten()
	for _, m := range k.Detach().Messages {
		w.Add(m.Topic, m.Key, m.Value)
	}
	k.SkipWritten(w)
	// The same decision, heatmap window and late event, each with another
	// value; a dlq record for another reason.
	emit(2, 0, 200, r1, "too large")
	b := k.Detach()
	if len(b.Messages) != 1 || b.Messages[0].Topic != DefaultTopics.DLQ {
		t.Fatalf("written %d messages, want only the other dlq record: %v", len(b.Messages), topicsOf(b.Messages))
	}
	for topic, want := range map[string]float64{DefaultTopics.Decisions: 1, DefaultTopics.Heatmaps: 1, DefaultTopics.Late: 1, DefaultTopics.DLQ: 0} {
		if got := counter(t, reg, "riskstream_output_duplicates_changed_total", topic); got != want {
			t.Errorf("%s: %v changed, want %v", topic, got, want)
		}
	}
	if w.Len() != 1 || !w.LeftIn(DefaultTopics.DLQ) {
		t.Errorf("%d left, want the first dlq record", w.Len())
	}
	// Another rule's decision and a later revision are other messages.
	k.ForgetUnmade()
	k.SkipWritten(w)
	emit(2, 1, 200, r2, "not JSON")
	b = k.Detach()
	if got := topicsOf(b.Messages); got != "decisions heatmaps late" {
		t.Errorf("written %q, want the other rule's decision, the next revision and the late record", got)
	}
}

func topicsOf(ms []kafka.Message) string {
	var ts []string
	for _, m := range ms {
		ts = append(ts, m.Topic)
	}
	return strings.Join(ts, " ")
}

// TestKafkaStampsTheWriteTime: outputs, which carry no timestamp of their
// own, are written with the time of their write by the sink's clock, as
// the Java client stamps them, not 0 (1970), which time-based retention
// would delete at once; a message sent with a time keeps it.
func TestKafkaStampsTheWriteTime(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "decisions", "repartition"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	at, sent := time.UnixMilli(1_732_150_000_123), time.UnixMilli(1_700_000_000_456)
	k := NewKafka(c.ListenAddrs(), DefaultTopics, Clock(func() time.Time { return at }), DirectTopics("repartition"))
	defer k.Close()
	k.DecisionAt(&windows.Decision{Rule: &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}},
		EventID: []byte(`"e1"`), Key: "\"u\"\x00"}, DecisionTimes{Ref: 1})
	k.Send("repartition", 0, []byte("routed"), sent)
	b := k.Detach()
	if err := k.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]time.Time{"decisions": at, "repartition": sent} {
		msgs := kafkatest.ReadPartition(t, c.ListenAddrs()[0], topic, 0, 10*time.Second)
		if len(msgs) != 1 {
			t.Fatalf("%s: %d messages, want 1", topic, len(msgs))
		}
		if !msgs[0].Time.Equal(want) {
			t.Errorf("%s: a message at %v, want %v", topic, msgs[0].Time, want)
		}
	}
}

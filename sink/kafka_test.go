package sink

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/riskstream/riskstream/event"
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
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics, nil)
	defer k.Close()
	r := &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}}
	for _, id := range []string{`"plain-1"`, `"tab\there"`} {
		k.Ref = 42
		k.Decision(&windows.Decision{Rule: r, EventID: []byte(id), Key: "\"u\"\x00"})
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
	if len(k.DecisionRefs) != 2 || k.DecisionRefs[1] != 42 {
		t.Errorf("decision refs %v", k.DecisionRefs)
	}
	// Detach hands the pending messages over and starts afresh.
	b := k.Detach()
	if len(b.Messages) != 2 || len(b.DecisionRefs) != 2 || k.Pending() != 0 || len(k.DecisionRefs) != 0 {
		t.Errorf("detached %d messages, %d refs; %d still pending", len(b.Messages), len(b.DecisionRefs), k.Pending())
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
	k := NewKafka(c.ListenAddrs(), DefaultTopics, nil)
	defer k.Close()
	k.Ref = 1
	k.Decision(&windows.Decision{Rule: &rules.Rule{Name: "r", Action: "deny", Key: []string{"user"}},
		EventID: []byte(`"e1"`), Key: "\"u\"\x00"})
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
	conn, err := kafka.DialLeader(context.Background(), "tcp", c.ListenAddrs()[0], topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	n, err := conn.ReadLastOffset()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKafkaMessagesKeepTheirBytes: messages share chunks of memory; none is
// changed by the ones added after it, across chunks, records larger than a
// chunk's room and detaches included.
func TestKafkaMessagesKeepTheirBytes(t *testing.T) {
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics, nil)
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

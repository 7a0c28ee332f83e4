package broker

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// roundTrip writes msgs to topic and reads the same number back from
// partition 0 with kafka-go over TCP.
func roundTrip(t *testing.T, addr, topic string, msgs ...kafka.Message) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if len(msgs) > 0 {
		w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireAll}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("write: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("close writer: %v", err)
		}
	}
	return readN(t, addr, topic, 3)
}

func readN(t *testing.T, addr, topic string, n int) []kafka.Message {
	t.Helper()
	return kafkatest.ReadMessages(t, nil, addr, topic, 0, n, 20*time.Second)
}

func TestProduceConsume(t *testing.T) {
	b, err := Start(Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Addr() == "127.0.0.1:0" {
		t.Fatalf("Addr() = %s, want the actual port", b.Addr())
	}
	old := time.UnixMilli(1700000000123)
	got := roundTrip(t, b.Addr(), "requests",
		kafka.Message{Key: []byte("a"), Value: []byte("1"), Time: old},
		kafka.Message{Key: []byte("b"), Value: []byte("2"), Time: old.Add(time.Second)},
		kafka.Message{Value: []byte("3"), Time: old.Add(2 * time.Second)},
	)
	for i, want := range []string{"1", "2", "3"} {
		if string(got[i].Value) != want {
			t.Errorf("message %d value = %q, want %q", i, got[i].Value, want)
		}
		// CreateTime topic: the producer's timestamp is kept.
		if wantTS := old.Add(time.Duration(i) * time.Second); !got[i].Time.Equal(wantTS) {
			t.Errorf("message %d time = %v, want %v", i, got[i].Time, wantTS)
		}
	}
	if string(got[0].Key) != "a" || got[2].Key != nil {
		t.Errorf("keys = %q, %q, want a, nil", got[0].Key, got[2].Key)
	}
}

func TestLogAppendTime(t *testing.T) {
	b, err := Start(Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 2, "decisions": 1},
		LogAppendTime: []string{"requests"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	old := time.UnixMilli(1700000000123)
	before := time.Now().Add(-time.Second)
	msgs := []kafka.Message{{Value: []byte("1"), Time: old}, {Value: []byte("2"), Time: old}, {Value: []byte("3"), Time: old}}
	// All to partition 0, where readN reads; the default balancer would
	// spread them over both.
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "requests", BatchTimeout: 5 * time.Millisecond,
		Balancer: balancerFunc(func(kafka.Message, ...int) int { return 0 })}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for i, m := range readN(t, b.Addr(), "requests", 3) {
		if m.Time.Before(before) || m.Time.After(time.Now().Add(time.Second)) {
			t.Errorf("requests message %d time = %v, want the append time (now)", i, m.Time)
		}
	}
	// Other topics keep CreateTime.
	for i, m := range roundTrip(t, b.Addr(), "decisions", msgs...) {
		if !m.Time.Equal(old) {
			t.Errorf("decisions message %d time = %v, want %v", i, m.Time, old)
		}
	}
}

type balancerFunc func(kafka.Message, ...int) int

func (f balancerFunc) Balance(m kafka.Message, partitions ...int) int { return f(m, partitions...) }

func TestDataDirPersists(t *testing.T) {
	dir := t.TempDir()
	b, err := Start(Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 1}, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, b.Addr(), "requests", kafka.Message{Value: []byte("1")}, kafka.Message{Value: []byte("2")}, kafka.Message{Value: []byte("3")})
	b.Close()

	// Restart on the same directory: the topic already exists and the
	// records are still there.
	b, err = Start(Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 1}, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := roundTrip(t, b.Addr(), "requests")
	if string(got[0].Value) != "1" || string(got[2].Value) != "3" {
		t.Errorf("after restart read %q..%q, want 1..3", got[0].Value, got[2].Value)
	}
}

// TestAppending checks that the hook sees every record produced, by
// partition, both from kafka-go (topics by name) and from kgo (by topic
// ID on newer produce versions).
func TestAppending(t *testing.T) {
	var (
		mu  sync.Mutex
		got = map[string]map[int32]int{}
	)
	b, err := Start(Options{Addr: "127.0.0.1:0", Topics: map[string]int32{"requests": 2, "decisions": 1},
		Appending: func(topic string, partition int32, records int) {
			mu.Lock()
			defer mu.Unlock()
			if got[topic] == nil {
				got[topic] = map[int32]int{}
			}
			got[topic][partition] += records
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "requests", BatchTimeout: 5 * time.Millisecond,
		Balancer: balancerFunc(func(m kafka.Message, _ ...int) int { return int(m.Value[0] - '0') })}
	if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte("0")},
		kafka.Message{Value: []byte("1")}, kafka.Message{Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()), kgo.DefaultProduceTopic("decisions"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 5 {
		cl.Produce(context.Background(), &kgo.Record{Value: []byte("d")}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]map[int32]int{"requests": {0: 1, 1: 2}, "decisions": {0: 5}}
	if !maps.EqualFunc(got, want, maps.Equal) {
		t.Errorf("appended %v, want %v", got, want)
	}
}

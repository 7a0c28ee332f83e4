package kafkaio

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestFetcherRange: a fetcher with an end hands over the records before
// it, says Done and stops; one without reads on, past the records there
// were when it started, and says when it has caught up.
func TestFetcherRange(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	w := &kafka.Writer{Addr: kafka.TCP(addr), Topic: "requests", BatchSize: 1}
	defer w.Close()
	write := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := w.WriteMessages(context.Background(), kafka.Message{Value: fmt.Appendf(nil, "r%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(0, 5)
	// read takes fetches from out until want records came, or one is Done.
	read := func(out <-chan Fetch, want int) (values []string, done, caughtUp bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for len(values) < want || !caughtUp && !done {
			select {
			case f := <-out:
				for _, m := range f.Msgs {
					values = append(values, string(m.Value))
				}
				done, caughtUp = f.Done, !f.Behind
				if done {
					return values, done, caughtUp
				}
			case <-deadline:
				t.Fatalf("after %v: %d records, want %d", values, len(values), want)
			}
		}
		return values, done, caughtUp
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ranged := make(chan Fetch, 16)
	f := NewFetcher(FetcherOptions{Brokers: []string{addr}, Dialer: &kafka.Dialer{Timeout: 5 * time.Second},
		Topic: "requests", From: 1, End: 3, Out: ranged})
	stopped := make(chan struct{})
	go func() { f.Run(ctx); close(stopped) }()
	if got, done, _ := read(ranged, 2); fmt.Sprint(got) != "[r1 r2]" || !done {
		t.Fatalf("range [1, 3): %v, done %v; want [r1 r2], done", got, done)
	}
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the fetcher with an end did not stop at it")
	}

	open := make(chan Fetch, 16)
	g := NewFetcher(FetcherOptions{Brokers: []string{addr}, Dialer: &kafka.Dialer{Timeout: 5 * time.Second},
		Topic: "requests", From: kafka.FirstOffset, Out: open})
	go g.Run(ctx)
	if got, done, caughtUp := read(open, 5); len(got) != 5 || done || !caughtUp {
		t.Fatalf("without an end: %v, done %v, caught up %v; want 5 records, not done, caught up", got, done, caughtUp)
	}
	write(5, 7)
	if got, done, _ := read(open, 2); fmt.Sprint(got) != "[r5 r6]" || done {
		t.Fatalf("records written since: %v, done %v; want [r5 r6], not done", got, done)
	}
}

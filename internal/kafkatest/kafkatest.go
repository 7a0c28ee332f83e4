// Package kafkatest starts brokers for tests and reads topics back. It
// fetches on connections of its own to a partition's leader, so that a
// failed fetch returns its error to the test: kafka-go's Reader retries in
// the background and was seen, on a loaded CI machine, to read nothing for
// a minute from a partition that held the messages, saying no more than
// that its context expired.
package kafkatest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// LastOffset is the offset after the last message of one partition of a
// topic: how many it holds, from 0. An error (a broker restarting, a topic
// not yet made) comes with 0, for tests that poll until it grows.
func LastOffset(addr, topic string, partition int) (int64, error) {
	conn, err := kafka.DialLeader(context.Background(), "tcp", addr, topic, partition)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n, err := conn.ReadLastOffset()
	if err != nil {
		return 0, err
	}
	return n, nil
}

// EndOffset is LastOffset for a partition that must be there: an error
// fails the test.
func EndOffset(t testing.TB, addr, topic string, partition int) int64 {
	t.Helper()
	n, err := LastOffset(addr, topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// ReadPartition reads every message of one partition of a topic, up to its
// end when called (EndOffset), as ReadMessages does (plaintext).
func ReadPartition(t testing.TB, addr, topic string, partition int, wait time.Duration) []kafka.Message {
	t.Helper()
	return ReadMessages(t, nil, addr, topic, partition, int(EndOffset(t, addr, topic, partition)), wait)
}

// ReadMessages reads the first n messages of one partition of a topic,
// waiting about wait for them to arrive (a fetch under way when it passes
// may take 20 s more), through dialer (nil: plaintext). It fails the test,
// listing the failed fetches' errors (the first and last ten), when they
// do not.
func ReadMessages(t testing.TB, dialer *kafka.Dialer, addr, topic string, partition, n int, wait time.Duration) []kafka.Message {
	t.Helper()
	if dialer == nil {
		dialer = &kafka.Dialer{Timeout: 10 * time.Second}
	}
	var msgs []kafka.Message
	var failures []string
	var next int64
	for deadline := time.Now().Add(wait); len(msgs) < n; {
		got, err := fetch(dialer, addr, topic, partition, next)
		msgs = append(msgs, got...)
		if len(got) > 0 {
			next = got[len(got)-1].Offset + 1
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s at offset %d: %v", time.Now().Format("15:04:05.000"), next, err))
		}
		if len(msgs) < n && time.Now().After(deadline) {
			if len(failures) > 20 {
				failures = append(failures[:10:10], append([]string{"..."}, failures[len(failures)-10:]...)...)
			}
			t.Fatalf("reading %s back: %d messages of %d after %v; failed fetches:\n%s",
				topic, len(msgs), n, wait, strings.Join(failures, "\n"))
		}
		if err != nil || len(got) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return msgs[:n]
}

// Values returns the values of msgs as strings.
func Values(msgs []kafka.Message) []string {
	vals := make([]string, len(msgs))
	for i, m := range msgs {
		vals[i] = string(m.Value)
	}
	return vals
}

// fetch makes one fetch of a partition from offset on a new connection to
// its leader.
func fetch(dialer *kafka.Dialer, addr, topic string, partition int, offset int64) ([]kafka.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialer.DialLeader(ctx, "tcp", addr, topic, partition)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.Seek(offset, kafka.SeekAbsolute); err != nil {
		return nil, fmt.Errorf("seek: %w", err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 100 * time.Millisecond})
	var msgs []kafka.Message
	for {
		m, err := batch.ReadMessage()
		if err != nil {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs, batch.Close()
}

// Client returns a client of the broker at addr whose connections close
// with the test.
func Client(t testing.TB, addr string, timeout time.Duration) *kafka.Client {
	conns := &kafka.Transport{}
	t.Cleanup(conns.CloseIdleConnections)
	return &kafka.Client{Addr: kafka.TCP(addr), Transport: conns, Timeout: timeout}
}

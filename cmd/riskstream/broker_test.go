package main

import (
	"bytes"
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// lockedBuffer takes the command's log while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestBrokerCommand: the broker runs alone with the input and output
// topics, and stops cleanly when told to.
func TestBrokerCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCmd()
	logs := &lockedBuffer{}
	cmd.SetArgs([]string{"broker", "--addr", "127.0.0.1:0", "--partitions", "2"})
	cmd.SetErr(logs)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`addr=(\S+)`).FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("the broker never said where it listens: %s", logs)
	}
	conn, err := kafka.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for topic, want := range map[string]int{"requests": 2, "decisions": 1, "heatmaps": 1, "late": 1, "dlq": 1} {
		ps, err := conn.ReadPartitions(topic)
		if err != nil || len(ps) != want {
			t.Errorf("topic %s: %d partitions, %v; want %d", topic, len(ps), err, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/segmentio/kafka-go"
)

// TestBrokerCommand: the broker runs alone with the input and output
// topics, and stops cleanly when told to.
func TestBrokerCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newRootCmd()
	logs := &testinput.LockedBuffer{}
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

package stream

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/rules"
	"github.com/segmentio/kafka-go"
)

// TestLiveFutureTimestamp: one event stamped in the year 9999 goes to the
// dlq with a reason and does not move the watermark, so the events after
// it, before and after a restart from the checkpoint, are still decided
// and none goes to late.
func TestLiveFutureTimestamp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	cfg, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: every
    key: [user]
    window: {type: tumbling, size: 1m}
    aggregate: count
    threshold: 0
    action: alert
`))
	if err != nil {
		t.Fatal(err)
	}
	addr := testbroker.Start(t, 1)
	base := time.Now().Add(-time.Minute).UnixMilli()
	produce := func(from, to int, far bool) {
		t.Helper()
		var msgs []kafka.Message
		for i := from; i < to; i++ {
			ts := base + int64(i)
			msgs = append(msgs, kafka.Message{Value: fmt.Appendf(nil, `{"id":"e%d","ts":%d,"user":"u"}`, i, ts), Time: time.UnixMilli(ts)})
			if far && i == from {
				msgs = append(msgs, kafka.Message{Value: []byte(`{"id":"far","ts":253402300799000,"user":"u"}`), Time: time.UnixMilli(ts)})
			}
		}
		writeInput(t, addr, msgs...)
	}
	state := t.TempDir()
	run := func(decisions int) {
		t.Helper()
		stop := startJob(t, RunOptions{Config: cfg, Brokers: []string{addr}, StateDir: state, CheckpointInterval: 50 * time.Millisecond})
		readMessages(t, addr, "decisions", 0, decisions)
		stop()
	}
	produce(0, 10, true)
	run(10)
	produce(10, 20, false)
	run(20)

	if late := readPartition(t, addr, "late", 0); len(late) > 0 {
		t.Errorf("%d events went to late, the first %s", len(late), late[0].Value)
	}
	dlq := readPartition(t, addr, "dlq", 0)
	if len(dlq) != 1 || !strings.Contains(string(dlq[0].Value), `"reason":"ts 253402300799000 is more than watermark.max_ahead (1h0m0s) ahead of its record's reference time`) {
		t.Fatalf("dlq holds %d records, want the far one with its reason: %v", len(dlq), dlq)
	}
	if got := len(readPartition(t, addr, "decisions", 0)); got != 20 {
		t.Errorf("%d decisions, want 20 (one per event but the far one)", got)
	}
}

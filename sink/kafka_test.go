package sink

import (
	"testing"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// TestKafkaKeys: decisions are keyed by the event id as the producer sent
// it, unescaped; heatmaps by heatmap name and key. Values carry no newline.
func TestKafkaKeys(t *testing.T) {
	k := NewKafka([]string{"127.0.0.1:1"}, DefaultTopics)
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

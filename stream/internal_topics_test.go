package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/internal/testinput"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/segmentio/kafka-go"
)

// TestInternalTopicLayoutRefused: a job whose internal topics exist with
// another layout than it needs refuses to start, saying which and how.
func TestInternalTopicLayoutRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	ctx := context.Background()
	addr := testbroker.Start(t, 1)
	client := kafkatest.Client(t, addr, time.Minute)
	topics := kafkaio.InternalTopicsOf("riskstream")
	for _, again := range []string{"", " again"} {
		if err := kafkaio.EnsureInternalTopics(ctx, client, topics, 3); err != nil {
			t.Fatalf("the same layout%s: %v", again, err)
		}
	}
	err := Run(ctx, RunOptions{Config: testinput.Rules(t), Brokers: []string{addr}, StateDir: t.TempDir(),
		Distributed: true, RepartitionPartitions: 4})
	var layout *kafkaio.LayoutError
	if !errors.As(err, &layout) || layout.Topic != "riskstream-repartition" || layout.Have != "3" || layout.Want != "4" {
		t.Fatalf("Run = %v, want a kafkaio.LayoutError on riskstream-repartition, 3 partitions for 4", err)
	}
	// A changelog that is not compacted would lose state.
	other := kafkaio.InternalTopicsOf("other")
	if _, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: other.Changelog,
		NumPartitions: 3, ReplicationFactor: -1}}}); err != nil {
		t.Fatal(err)
	}
	err = kafkaio.EnsureInternalTopics(ctx, client, other, 3)
	if !errors.As(err, &layout) || layout.Topic != "other-changelog" || layout.What != "cleanup.policy" {
		t.Fatalf("ensureInternalTopics = %v, want a kafkaio.LayoutError on other-changelog's cleanup.policy", err)
	}
	t.Log(err)
}

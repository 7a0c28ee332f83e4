package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"
)

// InternalTopics are the topics a distributed job keeps for itself, named
// after its consumer group as Kafka Streams names them after its
// application.id (docs/distributed.md "Topics").
type InternalTopics struct {
	// Repartition carries records from the instances that read the input
	// to those that hold their keys' state.
	Repartition string
	// Changelog holds each repartition partition's window state, as of
	// its last checkpoint: compacted.
	Changelog string
	// Routers holds the router's checkpoint (its offsets and clocks) and
	// the journal of its merge: compacted, one partition.
	Routers string
	// RouterIDs holds the event ids the router's dedupe remembers, a blob
	// per generation of ids and checkpoint: compacted, one partition.
	RouterIDs string
	// Rules holds every version of the job's rules, in order: compacted
	// (each version its own key), one partition.
	Rules string
}

// InternalTopicsOf names the internal topics of the consumer group group.
func InternalTopicsOf(group string) InternalTopics {
	return InternalTopics{Repartition: group + "-repartition", Changelog: group + "-changelog", Routers: group + "-routers",
		RouterIDs: group + "-router-ids", Rules: group + "-rules"}
}

// minCompactionLag is the changelog's min.compaction.lag.ms: how long
// records stay uncompacted. The records of a checkpoint an instance did
// not finish (it died while writing them) sit after its last complete
// checkpoint's, and would make the log cleaner drop the values that
// checkpoint holds for their keys; the next owner writes those values
// again when it takes the partition over (changelog.restore), which it
// does well within this lag.
const minCompactionLag = 10 * 60 * 1000

// ChangelogMaxMessageBytes is the compacted topics' max.message.bytes:
// room for the state of one key (a long session's windows, a heatmap's
// sketches) and a router's skew estimators, which cannot be split.
const ChangelogMaxMessageBytes = 16 << 20

// topicLayout is what the job needs of one internal topic.
type topicLayout struct {
	topic      string
	partitions int
	compacted  bool
}

// layouts returns the layout of every internal topic for a repartition
// topic of the given partitions.
func (t InternalTopics) layouts(partitions int) []topicLayout {
	return []topicLayout{
		{t.Repartition, partitions, false},
		{t.Changelog, partitions, true},
		{t.Routers, 1, true},
		{t.RouterIDs, 1, true},
		{t.Rules, 1, true},
	}
}

// LayoutError is returned when an internal topic exists with another
// layout than the job needs: its records would be read with the wrong
// keys' state. The job refuses to start.
type LayoutError struct {
	Topic string
	What  string // what differs
	Have  string
	Want  string
}

func (e *LayoutError) Error() string {
	fix := "set it on the topic, or delete the topic to start afresh (its state is lost)"
	if e.What == "partitions" {
		fix = "run with --repartition-partitions " + e.Have + " to use the topics as they are, or delete them to start afresh (their state is lost)"
	}
	return fmt.Sprintf("internal topic %s has %s %s, the job needs %s: %s", e.Topic, e.What, e.Have, e.Want, fix)
}

// EnsureInternalTopics creates the internal topics that do not exist yet,
// with the layout the job needs, and checks the layout of those that do.
func EnsureInternalTopics(ctx context.Context, client *kafka.Client, t InternalTopics, partitions int) error {
	layouts := t.layouts(partitions)
	var create []kafka.TopicConfig
	for _, l := range layouts {
		cfg := kafka.TopicConfig{Topic: l.topic, NumPartitions: l.partitions, ReplicationFactor: -1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "delete"}}}
		if l.compacted {
			cfg.ConfigEntries = []kafka.ConfigEntry{
				{ConfigName: "cleanup.policy", ConfigValue: "compact"},
				{ConfigName: "min.compaction.lag.ms", ConfigValue: strconv.Itoa(minCompactionLag)},
				{ConfigName: "max.message.bytes", ConfigValue: strconv.Itoa(ChangelogMaxMessageBytes)},
			}
		}
		create = append(create, cfg)
	}
	resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: create})
	if err != nil {
		return fmt.Errorf("create internal topics: %w", err)
	}
	for topic, err := range resp.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create internal topic %s: %w", topic, err)
		}
	}
	return checkLayouts(ctx, client, layouts)
}

// checkLayouts returns a LayoutError for the first topic of layouts whose
// partitions or cleanup policy differ from what the job needs.
func checkLayouts(ctx context.Context, client *kafka.Client, layouts []topicLayout) error {
	names := make([]string, len(layouts))
	var resources []kafka.DescribeConfigRequestResource
	for i, l := range layouts {
		names[i] = l.topic
		resources = append(resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeTopic,
			ResourceName: l.topic, ConfigNames: []string{"cleanup.policy"}})
	}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return fmt.Errorf("internal topics: %w", err)
	}
	partitions := map[string]int{}
	for _, t := range meta.Topics {
		if t.Error != nil {
			return fmt.Errorf("internal topic %s: %w", t.Name, t.Error)
		}
		partitions[t.Name] = len(t.Partitions)
	}
	configs, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: resources})
	if err != nil {
		return fmt.Errorf("internal topics' configs: %w", err)
	}
	policy := map[string]string{}
	for _, r := range configs.Resources {
		if r.Error != nil {
			return fmt.Errorf("internal topic %s's config: %w", r.ResourceName, r.Error)
		}
		for _, c := range r.ConfigEntries {
			if c.ConfigName == "cleanup.policy" {
				policy[r.ResourceName] = c.ConfigValue
			}
		}
	}
	for _, l := range layouts {
		if have := partitions[l.topic]; have != l.partitions {
			return &LayoutError{Topic: l.topic, What: "partitions", Have: strconv.Itoa(have), Want: strconv.Itoa(l.partitions)}
		}
		want := "delete"
		if l.compacted {
			want = "compact"
		}
		// A policy of compact,delete keeps what compact keeps, for a
		// while: not a changelog, which must keep every key's last value.
		if have := policy[l.topic]; have != want && !(have == "" && want == "delete") {
			return &LayoutError{Topic: l.topic, What: "cleanup.policy", Have: strconv.Quote(have), Want: strconv.Quote(want)}
		}
	}
	return nil
}

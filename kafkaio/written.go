package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/sink"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/metadata"
)

// The outputs a job wrote after its last checkpoint are written again by
// the next run, which starts from that checkpoint: at least once. To make
// it effectively once with any broker (kafka-go has no transactions), each
// checkpoint also records where every output partition ends, once the
// outputs it covers are acknowledged; a restarted job reads what lies past
// those ends and its sink skips those messages when it makes them again
// (sink.Written).

// OutputEnd is where one output partition ended at a checkpoint.
type OutputEnd struct {
	sink.Partition
	Offset int64
}

// unlisted, as the partition of an output end, marks a topic whose
// partitions the list does not name held none of the job's outputs at the
// checkpoint: a broker creates an output topic on its first write, and a
// topic may gain partitions, so a restart reads those partitions from
// their start. A list without marks (an older checkpoint, or ends the
// brokers did not give) reads only the partitions it names.
const unlisted = -1

// OutputPartitions returns the partitions of each of topics that exists.
func OutputPartitions(ctx context.Context, client *kafka.Client, topics []string) (map[string][]int, error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("output topics: %w", err)
	}
	partitions := make(map[string][]int, len(meta.Topics))
	for _, t := range meta.Topics {
		if errors.Is(t.Error, kafka.UnknownTopicOrPartition) {
			continue // not created yet: nothing written to it
		}
		if t.Error != nil {
			return nil, fmt.Errorf("output topic %s: %w", t.Name, t.Error)
		}
		for _, p := range t.Partitions {
			partitions[t.Name] = append(partitions[t.Name], p.ID)
		}
	}
	return partitions, nil
}

// OffsetsAt returns, for each partition of partitions (by topic), the
// offset of its first record stamped at or after at, or
// kafka.LastOffset when it has none.
func OffsetsAt(ctx context.Context, client *kafka.Client, partitions map[string][]int, at time.Time) (map[string]map[int]int64, error) {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for topic, ps := range partitions {
		for _, p := range ps {
			req.Topics[topic] = append(req.Topics[topic], kafka.TimeOffsetOf(p, at))
		}
	}
	resp, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("offsets at %s: %w", at.UTC().Format(time.RFC3339), err)
	}
	offsets := make(map[string]map[int]int64, len(resp.Topics))
	for topic, ps := range resp.Topics {
		offsets[topic] = make(map[int]int64, len(ps))
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("offset of %s/%d at %s: %w", topic, p.Partition, at.UTC().Format(time.RFC3339), p.Error)
			}
			offsets[topic][p.Partition] = kafka.LastOffset
			for o := range p.Offsets {
				if o >= 0 {
					offsets[topic][p.Partition] = o
				}
			}
		}
	}
	return offsets, nil
}

// CheckOutputTopics makes sure every output topic exists before the job
// takes a record, asking the brokers to create any that does not as a
// producer's first write would (auto.create.topics.enable): a topic that
// neither exists nor is created would have the job retry its writes
// forever, healthy by every probe, while nothing reaches the topic.
func CheckOutputTopics(ctx context.Context, client *kafka.Client, topics sink.Topics) error {
	names := topics.Names()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := client.Transport.RoundTrip(ctx, client.Addr, &metadata.Request{TopicNames: names, AllowAutoTopicCreation: true})
	if err != nil {
		return fmt.Errorf("output topics %s: %w", strings.Join(names, ", "), err)
	}
	meta, ok := res.(*metadata.Response)
	if !ok {
		return fmt.Errorf("output topics: a metadata request was answered with %T", res)
	}
	for _, t := range meta.Topics {
		switch err := kafka.Error(t.ErrorCode); {
		case t.ErrorCode == 0, errors.Is(err, kafka.LeaderNotAvailable): // being created
		case errors.Is(err, kafka.UnknownTopicOrPartition):
			return fmt.Errorf("output topic %q does not exist, and the brokers do not create topics on first use: "+
				"create it, or name another with %s", t.Name, topics.Flag(t.Name))
		default:
			return fmt.Errorf("output topic %q (%s): %w", t.Name, topics.Flag(t.Name), err)
		}
	}
	return nil
}

// OutputEnds returns the end offset of every partition of topics.
func OutputEnds(ctx context.Context, client *kafka.Client, topics []string) ([]OutputEnd, error) {
	partitions, err := OutputPartitions(ctx, client, topics)
	if err != nil {
		return nil, err
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for topic, ps := range partitions {
		for _, p := range ps {
			req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
		}
	}
	resp, err := client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("output topics' ends: %w", err)
	}
	var ends []OutputEnd
	for topic, ps := range resp.Topics {
		for _, p := range ps {
			if p.Error != nil {
				return nil, fmt.Errorf("end of %s/%d: %w", topic, p.Partition, p.Error)
			}
			ends = append(ends, OutputEnd{sink.Partition{Topic: topic, Partition: p.Partition}, p.LastOffset})
		}
	}
	sortEnds(ends)
	return ends, nil
}

// withUnlisted returns ends without their marks, and with every partition
// of a marked topic that ends does not name, from its first offset
// (kafka.FirstOffset); partitions are the output topics' partitions now.
func withUnlisted(ends []OutputEnd, partitions map[string][]int) []OutputEnd {
	listed := make(map[sink.Partition]bool, len(ends))
	for _, e := range ends {
		listed[e.Partition] = true
	}
	out := make([]OutputEnd, 0, len(ends))
	for _, e := range ends {
		if e.Partition.Partition != unlisted {
			out = append(out, e)
			continue
		}
		for _, p := range partitions[e.Topic] {
			if part := (sink.Partition{Topic: e.Topic, Partition: p}); !listed[part] {
				out = append(out, OutputEnd{part, kafka.FirstOffset})
			}
		}
	}
	sortEnds(out)
	return out
}

// sortEnds orders ends by topic and partition.
func sortEnds(ends []OutputEnd) {
	slices.SortFunc(ends, func(a, b OutputEnd) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return a.Partition.Partition - b.Partition.Partition
	})
}

// EndOffsets returns output ends as a checkpoint records them.
func EndOffsets(ends []OutputEnd) []checkpoint.Offset {
	offs := make([]checkpoint.Offset, len(ends))
	for i, e := range ends {
		offs[i] = checkpoint.Offset{Topic: e.Topic, Partition: int32(e.Partition.Partition), Offset: e.Offset}
	}
	return offs
}

// EndsOf returns the output ends a checkpoint recorded.
func EndsOf(offs []checkpoint.Offset) []OutputEnd {
	var ends []OutputEnd
	for _, o := range offs {
		ends = append(ends, OutputEnd{sink.Partition{Topic: o.Topic, Partition: int(o.Partition)}, o.Offset})
	}
	return ends
}

// writtenSince reads every output message past ends, up to each partition's
// end now: what a run wrote after its last checkpoint.
func writtenSince(ctx context.Context, brokers []string, sec *kafkaconn.Security, ends []OutputEnd) (*sink.Written, error) {
	w := sink.NewWritten()
	dialer := sec.Dialer()
	for _, e := range ends {
		if err := readPartitionTail(ctx, dialer, brokers, e, w); err != nil {
			return nil, fmt.Errorf("outputs written after the checkpoint, %s/%d from %d: %w", e.Topic, e.Partition.Partition, e.Offset, err)
		}
	}
	return w, nil
}

// readPartitionTail adds to w the messages of one partition from e.offset
// to its end.
func readPartitionTail(ctx context.Context, dialer *kafka.Dialer, brokers []string, e OutputEnd, w *sink.Written) error {
	_, err := ReadRecords(ctx, dialer, brokers, e.Topic, e.Partition.Partition, e.Offset, func(m *kafka.Message) error {
		w.Add(e.Topic, m.Key, m.Value)
		return nil
	})
	return err
}

// ReadRecords calls fn with every record of a partition from offset from
// (kafka.FirstOffset: its first) to its end as of the call, and returns
// that end.
func ReadRecords(ctx context.Context, dialer *kafka.Dialer, brokers []string, topic string, partition int, from int64, fn func(m *kafka.Message) error) (int64, error) {
	conn, err := dialLeader(ctx, dialer, brokers, topic, partition)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(FetchTimeout))
	first, end, err := conn.ReadOffsets()
	if err != nil {
		return 0, err
	}
	next := from
	if next == kafka.FirstOffset {
		next = first
	}
	for next < end {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		conn.SetDeadline(time.Now().Add(FetchTimeout))
		if _, err := conn.Seek(next, kafka.SeekAbsolute); err != nil {
			return 0, err
		}
		batch := conn.ReadBatch(1, 16<<20)
		from := next
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			if m.Offset < next || m.Offset >= end {
				continue
			}
			next = m.Offset + 1
			if err := fn(&m); err != nil {
				batch.Close()
				return 0, err
			}
		}
		if err := batch.Close(); err != nil {
			return 0, err
		}
		if next == from {
			return 0, fmt.Errorf("no message at offset %d of %d", next, end)
		}
	}
	return end, nil
}

// TrackedOutputs is what an EndTracker asks of the outputs' sink
// (sink.Kafka).
type TrackedOutputs interface {
	SkipWritten(*sink.Written)
	Acknowledged() map[sink.Partition]int64
	Unmade() int
	UnmadeIn(topic string) bool
	ForgetUnmade() int
}

// EndTracker follows where the output partitions end. They are read from
// the brokers once (Metadata and ListOffsets), then followed from the
// acknowledgements of the sink's writes, so that a checkpoint waits for no
// round trip.
type EndTracker struct {
	client  *kafka.Client
	topics  []string
	out     TrackedOutputs
	log     *slog.Logger
	unknown bool // warned that reading the ends fails, until it works again
	// base are where the output partitions ended when first read, before
	// the sink's acknowledged writes.
	base map[sink.Partition]int64
	// held are where a restart read the outputs from (its checkpoint's
	// ends). While the sink has not made again all it read of a topic,
	// its partitions' ends stay there: a checkpoint that recorded the end
	// past them, with its input offsets before what makes them, would have
	// the next restart write them a second time.
	held map[sink.Partition]int64
	// unmade is the sink's count of outputs not made again at the last
	// checkpoint, processed the records processed by then, and quiet the
	// checkpoints in a row that made none of them (settle).
	unmade    int
	processed int64
	quiet     int
}

// NewEndTracker returns an EndTracker of the output topics, read through
// client, written by out.
func NewEndTracker(client *kafka.Client, topics []string, out TrackedOutputs, log *slog.Logger) *EndTracker {
	return &EndTracker{client: client, topics: topics, out: out, log: log}
}

// Client is the client t reads the brokers with.
func (t *EndTracker) Client() *kafka.Client { return t.client }

// Restore reads what the outputs hold past the ends of the checkpoints
// restored, the earliest of each partition over them (the distributed
// job restores several), and every partition a checkpoint does not name
// of a topic it marks from its start. The sink leaves those messages out
// when it makes them again, and until then checkpoints keep their ends
// (held). It returns how many messages it read.
func (t *EndTracker) Restore(ctx context.Context, brokers []string, sec *kafkaconn.Security, checkpoints [][]OutputEnd) (int, error) {
	t.held = nil
	if !slices.ContainsFunc(checkpoints, func(ends []OutputEnd) bool { return len(ends) > 0 }) {
		return 0, nil // nothing known of the outputs at the checkpoints
	}
	partitions, err := OutputPartitions(ctx, t.client, t.topics)
	if err != nil {
		return 0, err
	}
	lists := make([][]OutputEnd, len(checkpoints))
	for i, ends := range checkpoints {
		lists[i] = withUnlisted(ends, partitions)
	}
	readFrom := earliestEnds(lists)
	written, err := writtenSince(ctx, brokers, sec, readFrom)
	if err != nil {
		return 0, err
	}
	n := written.Len()
	t.out.SkipWritten(written)
	t.held = endsMap(readFrom)
	return n, nil
}

// earliestEnds returns, of several lists of output ends, the earliest end
// of each partition.
func earliestEnds(lists [][]OutputEnd) []OutputEnd {
	earliest := map[sink.Partition]int64{}
	for _, l := range lists {
		for _, e := range l {
			if o, ok := earliest[e.Partition]; !ok || e.Offset < o {
				earliest[e.Partition] = e.Offset
			}
		}
	}
	var out []OutputEnd
	for p, o := range earliest {
		out = append(out, OutputEnd{p, o})
	}
	sortEnds(out)
	return out
}

// endsMap indexes ends by partition.
func endsMap(ends []OutputEnd) map[sink.Partition]int64 {
	m := make(map[sink.Partition]int64, len(ends))
	for _, e := range ends {
		m[e.Partition] = e.Offset
	}
	return m
}

// giveUpAfter is how many checkpoints in a row, each with records
// processed since the one before, may find none of the outputs a restart
// read made again before the job stops waiting for the rest: outputs that
// depend on the wall clock (windows an idle partition fired) can come out
// different the second time and never be made again, and until they are
// given up every checkpoint holds their topics' ends back (held).
const giveUpAfter = 3

// settle notes how many records the job has processed at a checkpoint
// (engine.Stats.Records), and gives up on the outputs a restart read that
// are not made again (see giveUpAfter).
func (t *EndTracker) settle(processed int64) {
	n := t.out.Unmade()
	switch {
	case n == 0 || n != t.unmade:
		t.quiet = 0
	case processed > t.processed:
		t.quiet++
	}
	t.unmade, t.processed = n, processed
	if t.quiet >= giveUpAfter {
		t.log.Info("outputs written before the restart were not made again in the last checkpoints; the job stops waiting for them (made later, they would be written twice)",
			"messages", t.out.ForgetUnmade(), "checkpoints", giveUpAfter)
		t.quiet, t.unmade = 0, 0
	}
}

// AtCheckpoint is what a checkpoint records of the outputs: it settles
// the outputs a restart read, with the records the job has processed by
// now, then returns where the outputs end (now).
func (t *EndTracker) AtCheckpoint(processed int64) []OutputEnd {
	t.settle(processed)
	return t.now()
}

// now returns where the outputs end, once every output made so far is
// acknowledged. Unknown (the brokers did not answer yet) is an empty list:
// a restart then writes them again.
func (t *EndTracker) now() []OutputEnd {
	if t.base == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := OutputEnds(ctx, t.client, t.topics)
		if err != nil {
			if !t.unknown {
				t.log.Warn("reading where the outputs end; a restart from a checkpoint without it may write some outputs twice", "err", err)
				t.unknown = true
			}
			return nil
		}
		if t.unknown {
			t.log.Info("reading where the outputs end again")
			t.unknown = false
		}
		t.base = make(map[sink.Partition]int64, len(ends))
		for _, e := range ends {
			t.base[e.Partition] = e.Offset
		}
	}
	ends := maps.Clone(t.base)
	for p, off := range t.out.Acknowledged() {
		ends[p] = max(ends[p], off)
	}
	for p, off := range t.held {
		if t.out.UnmadeIn(p.Topic) {
			ends[p] = off
		}
	}
	list := make([]OutputEnd, 0, len(ends)+len(t.topics))
	for p, off := range ends {
		list = append(list, OutputEnd{p, off})
	}
	for _, topic := range t.topics {
		list = append(list, OutputEnd{sink.Partition{Topic: topic, Partition: unlisted}, kafka.FirstOffset})
	}
	sortEnds(list)
	return list
}

// Produce writes recs to a partition, acknowledged by every
// replica, and returns the offset of the first.
func Produce(ctx context.Context, client *kafka.Client, topic string, partition int, recs []kafka.Record) (int64, error) {
	resp, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: partition,
		RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
	if err == nil && resp.Error != nil {
		err = resp.Error
	}
	if err != nil {
		return 0, err
	}
	return resp.BaseOffset, nil
}

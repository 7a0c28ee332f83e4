package changelog

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/state"
	"github.com/segmentio/kafka-go"
)

// A distributed job copies each checkpoint of a repartition partition's
// state to that partition of the changelog topic, so that any instance can
// take the partition over (docs/distributed.md "Takeover"). A checkpoint is
// the store's writes since the last one (state.DB.Changes: slots and
// metadata, a deletion as a tombstone), followed by a marker record: only
// writes followed by their marker count. Every record carries the
// generation of the consumer group the writer held the partition in (the
// header "generation"), so that the writes of an instance that lost the
// partition without noticing, which come after a newer generation's, are
// left out.

// changelogMarker starts the key of the record that ends a checkpoint:
// the marker's key is it and the writer's generation (4 bytes, big-endian),
// so that the log cleaner, which keeps the last record of each key, keeps
// the last marker of every generation, and with it what that generation's
// checkpoints wrote. The store's own keys start with another byte.
const changelogMarker = "checkpoint"

// markerKey returns the key of a marker of generation.
func markerKey(generation int32) []byte {
	return binary.BigEndian.AppendUint32([]byte(changelogMarker), uint32(generation))
}

// isMarker reports whether key is a marker's.
func isMarker(key []byte) bool {
	return len(key) == len(changelogMarker)+4 && string(key[:len(changelogMarker)]) == changelogMarker
}

// changelogHeader is the header carrying the writer's generation.
const changelogHeader = "generation"

// changelogRequestBytes bounds the records of one produce request, well
// under Kafka's default max.message.bytes (1 MiB): a record batch counts
// each record's overhead and header too (changelogRecordOverhead). A
// record larger on its own goes alone, within the changelog topic's
// max.message.bytes.
const (
	changelogRequestBytes   = 256 << 10
	changelogRecordOverhead = 64
)

// Log is one partition of the changelog topic.
type Log struct {
	Client    *kafka.Client
	Brokers   []string
	Dialer    *kafka.Dialer
	Topic     string
	Partition int
}

// End returns the offset after the partition's last record.
func (c *Log) End(ctx context.Context) (int64, error) {
	resp, err := c.Client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		c.Topic: {kafka.LastOffsetOf(c.Partition)}}})
	if err != nil {
		return 0, fmt.Errorf("end of %s/%d: %w", c.Topic, c.Partition, err)
	}
	for _, p := range resp.Topics[c.Topic] {
		if p.Partition == c.Partition {
			if p.Error != nil {
				return 0, fmt.Errorf("end of %s/%d: %w", c.Topic, c.Partition, p.Error)
			}
			return p.LastOffset, nil
		}
	}
	return 0, fmt.Errorf("end of %s/%d: not in the answer", c.Topic, c.Partition)
}

// Write copies db's pending writes, the checkpoint its next commit makes
// durable, to the changelog, then the marker, and returns the log's end
// after the marker and the bytes written.
func (c *Log) Write(ctx context.Context, db *state.DB, generation int32) (end, bytes int64, err error) {
	header := []kafka.Header{{Key: changelogHeader, Value: binary.BigEndian.AppendUint32(nil, uint32(generation))}}
	var batch []kafka.Record
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		base, err := kafkaio.Produce(ctx, c.Client, c.Topic, c.Partition, batch)
		if err != nil {
			return fmt.Errorf("changelog %s/%d: %w", c.Topic, c.Partition, err)
		}
		end = base + int64(len(batch))
		batch, size = batch[:0], 0
		return nil
	}
	// The keys and values are the store's pending writes, which stay as
	// they are until it commits, after this returns: no copy.
	add := func(key, value []byte) error {
		n := len(key) + len(value) + changelogRecordOverhead
		if size+n > changelogRequestBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		r := kafka.Record{Key: kafka.NewBytes(key), Headers: header}
		if value != nil {
			r.Value = kafka.NewBytes(value)
		}
		batch = append(batch, r)
		size += n
		bytes += int64(len(key) + len(value))
		return nil
	}
	if err := db.Changes(add); err != nil {
		return 0, 0, err
	}
	if err := add(markerKey(generation), []byte{1}); err != nil {
		return 0, 0, err
	}
	return end, bytes, flush()
}

// RestoreStats say what a restore read.
type RestoreStats struct {
	Records, Bytes int64
	// Repaired counts the keys of unfinished checkpoints written again.
	Repaired int
}

// Position is where a store's checkpoint ends in its changelog
// partition, and the generation of the marker that ended it.
type Position struct {
	End   int64
	Epoch int32
}

// NoPosition is the position of a store that holds no checkpoint.
var NoPosition = Position{End: kafka.FirstOffset, Epoch: -1}

// metaChangelog is the meta key of where the changelog partition ended
// after the checkpoint the store holds: the store is current when the log
// still ends there (nobody wrote after it).
const metaChangelog = "changelog"

// ReadPosition returns the store's position in its changelog, or
// kafka.FirstOffset and -1 for a store that has none.
func ReadPosition(db *state.DB) (Position, error) {
	raw, ok, err := db.Meta(metaChangelog)
	if err != nil || !ok || len(raw) != 12 {
		return NoPosition, err
	}
	return Position{End: int64(binary.BigEndian.Uint64(raw)), Epoch: int32(binary.BigEndian.Uint32(raw[8:]))}, nil
}

// WritePosition stores p with the store's pending writes and
// commits them.
func WritePosition(db *state.DB, p Position) error {
	raw := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(nil, uint64(p.End)), uint32(p.Epoch))
	if err := db.SetMeta(metaChangelog, raw); err != nil {
		return err
	}
	return db.Commit(true)
}

// followed is what follow did.
type followed struct {
	// next is the position after the last checkpoint applied.
	next Position
	// end is the log's end, as far as it was read.
	end int64
	// left holds the keys of the writes left out that no later checkpoint
	// wrote.
	left map[string]bool
	// maxGen is the largest generation read.
	maxGen int32
	RestoreStats
}

// follow applies to db, which holds the checkpoint ending at at, the
// writes of every checkpoint finished after it (its marker written), in
// order, up to the log's end as of the call. It leaves out the writes
// after the last marker of their generation (the writer died while
// writing them, or is writing them now) and those of a generation older
// than one written before them (an instance that lost the partition).
//
// A standby copy follows the changelog so; the instance that holds the
// partition then repairs what was left out (restore).
func (c *Log) follow(ctx context.Context, db *state.DB, at Position) (f followed, err error) {
	type rec struct{ key, value []byte }
	var (
		tail   []rec
		loaded int
	)
	f = followed{next: at, left: map[string]bool{}, maxGen: at.Epoch}
	leaveOut := func(rs []rec) {
		for _, r := range rs {
			f.left[string(r.key)] = true
		}
	}
	apply := func(marker int64) error {
		for _, r := range tail {
			if err := db.Load(r.key, r.value); err != nil {
				return err
			}
			delete(f.left, string(r.key))
			loaded += len(r.key) + len(r.value)
		}
		tail = tail[:0]
		f.next = Position{End: marker + 1, Epoch: f.maxGen}
		if loaded >= 8<<20 { // keep the pending writes small
			loaded = 0
			return db.Commit(false)
		}
		return nil
	}
	f.end, err = c.readFrom(ctx, at.End, func(m *kafka.Message) error {
		f.Records++
		f.Bytes += int64(len(m.Key) + len(m.Value))
		g := int32(-1)
		for _, h := range m.Headers {
			if h.Key == changelogHeader && len(h.Value) == 4 {
				g = int32(binary.BigEndian.Uint32(h.Value))
			}
		}
		switch {
		case g < f.maxGen:
			if !isMarker(m.Key) {
				leaveOut([]rec{{key: m.Key}})
			}
			return nil
		case g > f.maxGen:
			leaveOut(tail)
			tail, f.maxGen = tail[:0], g
		}
		if isMarker(m.Key) {
			return apply(m.Offset)
		}
		tail = append(tail, rec{key: m.Key, value: m.Value})
		return nil
	})
	if err != nil {
		return f, err
	}
	leaveOut(tail)
	return f, db.Commit(true)
}

// Restore brings db, which holds the checkpoint ending at at (NoPosition
// for an empty store), up to the changelog's last finished checkpoint
// (follow), for the instance that now holds the partition. It then
// writes the keys follow left out again, with the values the restored
// checkpoint holds, and a marker: the log's last record of every key is
// then the checkpoint's, whatever the log cleaner keeps. Those writes, and
// the next checkpoints, are of generation epoch: generation, or more than
// any generation in the log (a group whose generations started over). It
// returns the store's position: the log's end.
func (c *Log) Restore(ctx context.Context, db *state.DB, at Position, generation int32) (Position, RestoreStats, error) {
	f, err := c.follow(ctx, db, at)
	if err != nil {
		return at, f.RestoreStats, err
	}
	epoch := max(generation, f.maxGen+1)
	if len(f.left) == 0 {
		// What follows the last checkpoint applied, if anything, is
		// markers of instances that lost the partition.
		return Position{f.end, epoch}, f.RestoreStats, nil
	}
	// Write the left-out keys again, with their restored values (or
	// deleted), then a marker, as a checkpoint of this epoch.
	for key := range f.left {
		v, found, err := db.Stored([]byte(key))
		if err != nil {
			return at, f.RestoreStats, err
		}
		if !found {
			v = nil
		}
		if err := db.Load([]byte(key), v); err != nil {
			return at, f.RestoreStats, err
		}
	}
	f.Repaired = len(f.left)
	end, _, err := c.Write(ctx, db, epoch)
	if err != nil {
		return at, f.RestoreStats, err
	}
	return Position{end, epoch}, f.RestoreStats, db.Commit(true)
}

// read calls fn with every record of the partition, from its first to its
// end as of the call, and returns that end.
func (c *Log) read(ctx context.Context, fn func(m *kafka.Message) error) (int64, error) {
	return c.readFrom(ctx, kafka.FirstOffset, fn)
}

// readFrom is read from offset from on.
func (c *Log) readFrom(ctx context.Context, from int64, fn func(m *kafka.Message) error) (int64, error) {
	end, err := kafkaio.ReadRecords(ctx, c.Dialer, c.Brokers, c.Topic, c.Partition, from, fn)
	if err != nil {
		return 0, fmt.Errorf("%s/%d: %w", c.Topic, c.Partition, err)
	}
	return end, nil
}

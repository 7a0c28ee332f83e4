package kafkaio

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/segmentio/kafka-go"
)

// Position is where a replay of a topic starts (--from) or ends (--to): an
// offset in every partition, offsets per partition, or a time (the first
// record at or after it). The zero value is the start of every partition
// as a start, and the end of the topic when the replay begins as an end.
type Position struct {
	// offsets are per partition; a partition not named keeps the default.
	offsets map[int32]int64
	// all, if set, is the offset in every partition.
	all *int64
	// at, if not zero, is a time.
	at time.Time
}

// ParsePosition parses a position: "" (the default), an offset for every
// partition ("1500"), offsets per partition ("0=1500,3=1720"), or an
// RFC 3339 time ("2026-11-24T10:00:00Z").
func ParsePosition(s string) (Position, error) {
	var p Position
	switch {
	case s == "":
		return p, nil
	case strings.Contains(s, "="):
		p.offsets = map[int32]int64{}
		for _, part := range strings.Split(s, ",") {
			ps, os, _ := strings.Cut(part, "=")
			id, err := strconv.ParseInt(strings.TrimSpace(ps), 10, 32)
			if err != nil || id < 0 {
				return p, fmt.Errorf("%q: want PARTITION=OFFSET, partition %q is not a partition number", part, ps)
			}
			off, err := strconv.ParseInt(strings.TrimSpace(os), 10, 64)
			if err != nil || off < 0 {
				return p, fmt.Errorf("%q: want PARTITION=OFFSET, offset %q is not an offset", part, os)
			}
			if _, dup := p.offsets[int32(id)]; dup {
				return p, fmt.Errorf("partition %d named twice", id)
			}
			p.offsets[int32(id)] = off
		}
	default:
		if off, err := strconv.ParseInt(s, 10, 64); err == nil {
			if off < 0 {
				return p, fmt.Errorf("%q: an offset is not negative", s)
			}
			p.all = &off
			return p, nil
		}
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return p, fmt.Errorf("%q: want an offset (1500), offsets per partition (0=1500,1=1720) or an RFC 3339 time (2026-11-24T10:00:00Z)", s)
		}
		p.at = at
	}
	return p, nil
}

// String is the position as ParsePosition reads it; "" for the default.
func (p Position) String() string {
	switch {
	case p.all != nil:
		return strconv.FormatInt(*p.all, 10)
	case !p.at.IsZero():
		return p.at.Format(time.RFC3339Nano)
	}
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(p.offsets)) {
		parts = append(parts, fmt.Sprintf("%d=%d", id, p.offsets[id]))
	}
	return strings.Join(parts, ",")
}

// resolve returns the position's offset in a partition whose records are
// first to last-1; def is the offset when the position does not name one.
func (p Position) resolve(conn *kafka.Conn, partition int32, first, last, def int64) (int64, error) {
	off := def
	switch {
	case p.all != nil:
		off = *p.all
	case !p.at.IsZero():
		conn.SetReadDeadline(time.Now().Add(FetchTimeout))
		o, err := conn.ReadOffset(p.at)
		if err != nil {
			return 0, fmt.Errorf("partition %d: offset at %v: %w", partition, p.at, err)
		}
		off = o
		if off < 0 { // no record at or after it
			off = last
		}
	default:
		if o, ok := p.offsets[partition]; ok {
			off = o
		}
	}
	return min(max(off, first), last), nil
}

// TopicRange is the part of one partition a replay reads: offsets from
// to end-1.
type TopicRange struct {
	Partition int32
	From, End int64
}

// TopicRanges resolves from and to in every partition of the topic.
func TopicRanges(ctx context.Context, brokers []string, sec *kafkaconn.Security, topic string, from, to Position) ([]TopicRange, error) {
	partitions, err := ReadPartitions(ctx, sec.Dialer(), brokers[0], topic)
	if err != nil {
		return nil, err
	}
	slices.Sort(partitions)
	for id := range from.offsets {
		if !slices.Contains(partitions, int(id)) {
			return nil, fmt.Errorf("--from names partition %d: topic %s has %d partitions", id, topic, len(partitions))
		}
	}
	for id := range to.offsets {
		if !slices.Contains(partitions, int(id)) {
			return nil, fmt.Errorf("--to names partition %d: topic %s has %d partitions", id, topic, len(partitions))
		}
	}
	var ranges []TopicRange
	for _, p := range partitions {
		r, err := partitionRange(ctx, brokers, sec, topic, int32(p), from, to)
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		ranges = append(ranges, r)
	}
	return ranges, nil
}

func partitionRange(ctx context.Context, brokers []string, sec *kafkaconn.Security, topic string, p int32, from, to Position) (TopicRange, error) {
	conn, err := dialLeader(ctx, sec.Dialer(), brokers, topic, int(p))
	if err != nil {
		return TopicRange{}, fmt.Errorf("partition %d: connect: %w", p, err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(FetchTimeout))
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return TopicRange{}, fmt.Errorf("partition %d: offsets: %w", p, err)
	}
	r := TopicRange{Partition: p}
	if r.From, err = from.resolve(conn, p, first, last, first); err != nil {
		return r, err
	}
	if r.End, err = to.resolve(conn, p, first, last, last); err != nil {
		return r, err
	}
	r.End = max(r.End, r.From)
	return r, nil
}

// ReadPartitions returns the ids of topic's partitions, asking the broker
// at addr.
func ReadPartitions(ctx context.Context, d *kafka.Dialer, addr, topic string) ([]int, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", addr, err)
	}
	defer conn.Close()
	// A broker that does not answer leaves a read waiting for good.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	conn.SetDeadline(time.Now().Add(FetchTimeout))
	ps, err := conn.ReadPartitions(topic)
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	ids := make([]int, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids, nil
}

package engine

import (
	"encoding/binary"
	"errors"
)

// Message is what the first stage of a distributed job sends a partition
// of the repartition topic: a record, timed, for the state of its keys
// that the partition holds, a mark of an input partition's progress, or
// the rules the input partition's records are routed by from then on
// (docs/format/repartition.md).
type Message struct {
	Kind MessageKind
	// Partition and Offset are the input record's, or for a mark those of
	// the last record routed before it (-1 before any).
	Partition int32
	Offset    int64
	// Watermark is, for a record, the job's watermark after it, and for a
	// mark or rules message the watermark now.
	Watermark int64
	// Before is the job's watermark before the record.
	Before int64
	// Time is the time that windows the record's event; Processing is set
	// when that is its reference time (its source's clock is skewed).
	Time       int64
	Processing bool
	// Decider is set on the one message of a record whose receiver writes
	// the record to the late output if no window of its takes the event.
	Decider bool
	// Idle is set on a mark of an input partition that has turned idle.
	Idle bool
	// Version is a rules message's: the version of the job's rules that
	// the input partition's records after it are routed by.
	Version int64
	// Value is the record's bytes, or a rules message's rules file.
	Value []byte
}

// MessageKind tells a record from a mark.
type MessageKind byte

const (
	// RecordMessage carries an input record.
	RecordMessage MessageKind = 1
	// MarkMessage carries the watermark.
	MarkMessage MessageKind = 2
	// RulesMessage carries the rules the input partition's records after
	// it are routed by: a reload of the job's rules (Task.Apply).
	RulesMessage MessageKind = 3
)

// messageVersion is the first byte of an encoded Message.
const messageVersion = 1

const (
	flagProcessing = 1 << iota
	flagDecider
	flagIdle
)

// AppendMessage appends m's encoding to dst.
func AppendMessage(dst []byte, m *Message) []byte {
	var flags byte
	if m.Processing {
		flags |= flagProcessing
	}
	if m.Decider {
		flags |= flagDecider
	}
	if m.Idle {
		flags |= flagIdle
	}
	dst = append(dst, messageVersion, byte(m.Kind), flags)
	dst = binary.AppendVarint(dst, int64(m.Partition))
	dst = binary.AppendVarint(dst, m.Offset)
	dst = binary.AppendVarint(dst, m.Watermark)
	switch m.Kind {
	case MarkMessage:
		return dst
	case RulesMessage:
		dst = binary.AppendVarint(dst, m.Version)
		return append(dst, m.Value...)
	}
	dst = binary.AppendVarint(dst, m.Before)
	dst = binary.AppendVarint(dst, m.Time)
	return append(dst, m.Value...)
}

// ErrBadMessage reports bytes that are not a Message.
var ErrBadMessage = errors.New("engine: not a repartition message")

// DecodeMessage decodes b into m. m.Value points into b.
func DecodeMessage(b []byte, m *Message) error {
	if len(b) < 3 || b[0] != messageVersion {
		return ErrBadMessage
	}
	*m = Message{Kind: MessageKind(b[1])}
	flags := b[2]
	m.Processing, m.Decider, m.Idle = flags&flagProcessing != 0, flags&flagDecider != 0, flags&flagIdle != 0
	if m.Kind < RecordMessage || m.Kind > RulesMessage || flags&^(flagProcessing|flagDecider|flagIdle) != 0 {
		return ErrBadMessage
	}
	b = b[3:]
	var p int64
	var ok bool
	if p, b, ok = varint(b); !ok || p < 0 || p > 1<<31-1 {
		return ErrBadMessage
	}
	m.Partition = int32(p)
	if m.Offset, b, ok = varint(b); !ok {
		return ErrBadMessage
	}
	if m.Watermark, b, ok = varint(b); !ok {
		return ErrBadMessage
	}
	switch m.Kind {
	case MarkMessage:
		if len(b) != 0 {
			return ErrBadMessage
		}
		return nil
	case RulesMessage:
		if m.Version, b, ok = varint(b); !ok || m.Version < 1 {
			return ErrBadMessage
		}
		m.Value = b
		return nil
	}
	if m.Before, b, ok = varint(b); !ok {
		return ErrBadMessage
	}
	if m.Time, b, ok = varint(b); !ok {
		return ErrBadMessage
	}
	m.Value = b
	return nil
}

func varint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

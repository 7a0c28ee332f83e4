package sink

import (
	"bytes"

	"github.com/cespare/xxhash/v2"
)

// Written is a multiset of output messages already in their topics: those
// a job wrote after its last checkpoint before it stopped without a final
// one. A sink told of them (Kafka.SkipWritten) does not write them again
// when it makes them again: effectively once, with any broker, without
// transactions.
//
// A message is recognised by what it is about, not by all its bytes: a
// decision by its id (event and rule), a heatmap record by its heatmap,
// key, window and revision, a late record by its event and where it was
// read, a dlq record whole. Given the same input from the same checkpoint
// the job makes the same messages byte for byte; where it could not (a
// value that depended on when records arrived, as the watermark of an idle
// partition does), the message already written stands, and no reader ever
// sees one decision with two values.
type Written struct {
	// m holds, by identity, the value hashes of the messages not met
	// again.
	m map[uint64][]uint64
	n int
	// topics counts the messages not yet met again by topic.
	topics map[string]int
	// changed counts the messages met again with another value.
	changed int
}

// NewWritten returns an empty set.
func NewWritten() *Written {
	return &Written{m: make(map[uint64][]uint64), topics: make(map[string]int)}
}

// Add notes one message as written.
func (w *Written) Add(topic string, key, value []byte) {
	id := identityHash(topic, key, value)
	w.m[id] = append(w.m[id], xxhash.Sum64(value))
	w.n++
	w.topics[topic]++
}

// Len is the number of messages noted and not yet met again.
func (w *Written) Len() int { return w.n }

// LeftIn reports whether messages of topic are noted and not yet met
// again.
func (w *Written) LeftIn(topic string) bool { return w.topics[topic] > 0 }

// Changed is the number of messages met again with another value than the
// one written.
func (w *Written) Changed() int { return w.changed }

// take reports whether a message is among those written, and forgets one
// of them if so; changed is set when the one written had another value.
func (w *Written) take(topic string, key, value []byte) (found, changed bool) {
	id := identityHash(topic, key, value)
	values := w.m[id]
	if len(values) == 0 {
		return false, false
	}
	i := 0
	if vh := xxhash.Sum64(value); values[0] != vh {
		for i = 1; i < len(values) && values[i] != vh; i++ {
		}
		if i == len(values) {
			i, changed = 0, true
			w.changed++
		}
	}
	if len(values) == 1 {
		delete(w.m, id)
	} else {
		w.m[id] = append(values[:i], values[i+1:]...)
	}
	w.n--
	if w.topics[topic]--; w.topics[topic] == 0 {
		delete(w.topics, topic)
	}
	return true, changed
}

// The members that follow what a message is about, in the records of
// docs/outputs.md: a decision's id comes first, a heatmap record's
// window and revision before its counts, and a late record's watermark
// sits between its event and its reason. They cannot occur earlier in a
// record: names and ids before them are JSON strings, whose quotes are
// escaped.
var (
	decisionPrefix  = []byte(`{"id":`)
	decisionIDEnd   = []byte(`,"event_id":`)
	heatmapPrefix   = []byte(`{"heatmap":`)
	heatmapEnd      = []byte(`,"count":`)
	lateWatermark   = []byte(`,"watermark":`)
	lateReasonAfter = []byte(`,"reason":"late"`)
)

// identity returns what a message value is about, in at most two parts
// (see Written).
func identity(value []byte) (head, tail []byte) {
	switch {
	case bytes.HasPrefix(value, decisionPrefix):
		if i := bytes.Index(value, decisionIDEnd); i > 0 {
			return value[:i], nil
		}
	case bytes.HasPrefix(value, heatmapPrefix):
		if i := bytes.Index(value, heatmapEnd); i > 0 {
			return value[:i], nil
		}
	default:
		// An event may hold members of any name: the late record's own
		// come last.
		if i := bytes.LastIndex(value, lateWatermark); i > 0 {
			if j := bytes.LastIndex(value, lateReasonAfter); j > i {
				return value[:i], value[j:]
			}
		}
	}
	return value, nil
}

// identityHash is xxhash64 of topic, key and the value's identity with
// their lengths, so that no two different messages hash the same by moving
// bytes between them; it is stable across processes, unlike maphash.
func identityHash(topic string, key, value []byte) uint64 {
	head, tail := identity(value)
	var d xxhash.Digest
	d.Reset()
	var n [8]byte
	for _, part := range [][]byte{[]byte(topic), key, head, tail} {
		l := len(part)
		n[0], n[1], n[2], n[3] = byte(l), byte(l>>8), byte(l>>16), byte(l>>24)
		d.Write(n[:4])
		d.Write(part)
	}
	return d.Sum64()
}

package sink

import "github.com/cespare/xxhash/v2"

// Written is a multiset of output messages already in their topics,
// identified by a hash of topic, key and value: those a job wrote after
// its last checkpoint before it stopped without a final one. Given the
// same input from the same checkpoint, the job makes the same messages
// byte for byte, and a sink told of them (Kafka.SkipWritten) does not write
// them again: effectively once, with any broker, without transactions.
type Written struct {
	m map[uint64]int32
	n int
	// topics counts the messages not yet met again by topic.
	topics map[string]int
}

// NewWritten returns an empty set.
func NewWritten() *Written { return &Written{m: make(map[uint64]int32), topics: make(map[string]int)} }

// Add notes one message as written.
func (w *Written) Add(topic string, key, value []byte) {
	w.m[messageHash(topic, key, value)]++
	w.n++
	w.topics[topic]++
}

// Len is the number of messages noted and not yet met again.
func (w *Written) Len() int { return w.n }

// LeftIn reports whether messages of topic are noted and not yet met
// again.
func (w *Written) LeftIn(topic string) bool { return w.topics[topic] > 0 }

// take reports whether a message is among those written, and forgets one
// of them if so.
func (w *Written) take(topic string, key, value []byte) bool {
	h := messageHash(topic, key, value)
	c := w.m[h]
	if c == 0 {
		return false
	}
	if c == 1 {
		delete(w.m, h)
	} else {
		w.m[h] = c - 1
	}
	w.n--
	if w.topics[topic]--; w.topics[topic] == 0 {
		delete(w.topics, topic)
	}
	return true
}

// messageHash is xxhash64 of topic, key and value with their lengths, so
// that no two different messages hash the same by moving bytes between
// them; it is stable across processes, unlike maphash.
func messageHash(topic string, key, value []byte) uint64 {
	var d xxhash.Digest
	d.Reset()
	var n [8]byte
	for _, part := range [][]byte{[]byte(topic), key, value} {
		l := len(part)
		n[0], n[1], n[2], n[3] = byte(l), byte(l>>8), byte(l>>16), byte(l>>24)
		d.Write(n[:4])
		d.Write(part)
	}
	return d.Sum64()
}

// Package watermark tracks event-time progress the way Flink does: one
// bounded-out-of-orderness generator per input partition, combined into the
// job's watermark as the minimum over partitions that are not idle. It is a
// pure state machine: time comes in as arguments (event times from records,
// processing time as now), so replay and live runs compute the same values.
package watermark

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/riskstream/riskstream/internal/corrupt"
)

// Min is the watermark before any event: nothing is late yet.
const Min int64 = math.MinInt64

// Max is the watermark at the end of input: every window fires.
const Max int64 = math.MaxInt64

// Generator is the bounded-out-of-orderness watermark of one partition:
// max event time seen - out_of_orderness - 1 ms (Flink's
// BoundedOutOfOrdernessWatermarks), updated on every event.
type Generator struct {
	ooo   int64
	maxTS int64
	seen  bool
}

// NewGenerator returns a generator allowing events outOfOrderness ms behind
// the largest timestamp seen.
func NewGenerator(outOfOrderness int64) Generator {
	return Generator{ooo: outOfOrderness}
}

// OnEvent observes an event time.
func (g *Generator) OnEvent(ts int64) {
	if !g.seen || ts > g.maxTS {
		g.maxTS, g.seen = ts, true
	}
}

// Current returns the watermark, Min before any event.
func (g *Generator) Current() int64 {
	if !g.seen {
		return Min
	}
	return g.maxTS - g.ooo - 1
}

// partition is one input's generator and activity.
type partition struct {
	id         int32
	gen        Generator
	lastActive int64 // processing time of the last event, or of registration
}

// Combined is the job's watermark over several partitions. A partition that
// has been silent for idleTimeout (processing time) stops holding the
// watermark back until it receives an event again; the combined watermark
// never goes back.
type Combined struct {
	ooo     int64
	idle    int64
	parts   []partition
	current int64
}

// NewCombined returns a combined watermark with the given out-of-orderness
// and idle timeout, in milliseconds.
func NewCombined(outOfOrderness, idleTimeout int64) *Combined {
	return &Combined{ooo: outOfOrderness, idle: idleTimeout, current: Min}
}

// AddPartition registers a partition before its first event, so that it
// holds the watermark back until it is idle; now is processing time in ms.
// Adding a known partition does nothing.
func (c *Combined) AddPartition(id int32, now int64) {
	c.part(id, now)
}

func (c *Combined) part(id int32, now int64) *partition {
	for i := range c.parts {
		if c.parts[i].id == id {
			return &c.parts[i]
		}
	}
	c.parts = append(c.parts, partition{id: id, gen: NewGenerator(c.ooo), lastActive: now})
	return &c.parts[len(c.parts)-1]
}

// OnEvent observes an event time ts on a partition at processing time now
// and returns the job's watermark.
func (c *Combined) OnEvent(id int32, ts, now int64) int64 {
	p := c.part(id, now)
	p.gen.OnEvent(ts)
	p.lastActive = now
	return c.Advance(now)
}

// Advance recomputes the watermark at processing time now, letting idle
// partitions go, and returns it. Call it periodically when no events come,
// so that idleness is noticed.
func (c *Combined) Advance(now int64) int64 {
	wm, active := Max, false
	for i := range c.parts {
		p := &c.parts[i]
		if now-p.lastActive >= c.idle {
			continue
		}
		active = true
		wm = min(wm, p.gen.Current())
	}
	if active && wm > c.current {
		c.current = wm
	}
	return c.current
}

// Current returns the job's watermark.
func (c *Combined) Current() int64 { return c.current }

// Idle reports whether partition id is idle at processing time now.
func (c *Combined) Idle(id int32, now int64) bool {
	for i := range c.parts {
		if c.parts[i].id == id {
			return now-c.parts[i].lastActive >= c.idle
		}
	}
	return false
}

// Partition returns the watermark of one partition.
func (c *Combined) Partition(id int32) int64 {
	for i := range c.parts {
		if c.parts[i].id == id {
			return c.parts[i].gen.Current()
		}
	}
	return Min
}

// Absorb adds o's partitions that c does not have, with their generators
// and activity, and lowers c's watermark to o's if it is behind: the
// watermarks of partitions kept apart become one job's. The settings are
// c's.
func (c *Combined) Absorb(o *Combined) {
	for _, p := range o.parts {
		if !slices.ContainsFunc(c.parts, func(q partition) bool { return q.id == p.id }) {
			p.gen.ooo = c.ooo
			c.parts = append(c.parts, p)
		}
	}
	c.current = min(c.current, o.current)
}

// MaxEventTime returns the largest event time any partition has seen, and
// false before the first event: the job's event-time progress, against
// which a record without a reference time is judged too far ahead.
func (c *Combined) MaxEventTime() (int64, bool) {
	maxTS, seen := Min, false
	for i := range c.parts {
		if g := &c.parts[i].gen; g.seen {
			maxTS, seen = max(maxTS, g.maxTS), true
		}
	}
	return maxTS, seen
}

// Finish moves the watermark to Max: the input has ended.
func (c *Combined) Finish() int64 {
	c.current = Max
	return Max
}

// combinedVersion is the first byte of an encoded Combined.
const combinedVersion = 1

// AppendBinary appends the watermark state (every partition's generator and
// activity, and the job's watermark) for a checkpoint.
func (c *Combined) AppendBinary(dst []byte) []byte {
	dst = append(dst, combinedVersion)
	dst = binary.AppendVarint(dst, c.current)
	dst = binary.AppendUvarint(dst, uint64(len(c.parts)))
	for _, p := range c.parts {
		dst = binary.AppendVarint(dst, int64(p.id))
		seen := byte(0)
		if p.gen.seen {
			seen = 1
		}
		dst = append(dst, seen)
		dst = binary.AppendVarint(dst, p.gen.maxTS)
		dst = binary.AppendVarint(dst, p.lastActive)
	}
	return dst
}

// errCorrupt reports a checkpoint that cannot be decoded.
var errCorrupt = corrupt.Errorf("watermark: corrupt checkpoint")

// DecodeCombined reads what AppendBinary wrote into a Combined with the
// given settings, and returns the rest of b.
func DecodeCombined(b []byte, outOfOrderness, idleTimeout int64) (*Combined, []byte, error) {
	c := NewCombined(outOfOrderness, idleTimeout)
	if len(b) == 0 || b[0] != combinedVersion {
		return nil, nil, errCorrupt
	}
	b = b[1:]
	var ok bool
	if c.current, b, ok = readVarint(b); !ok {
		return nil, nil, errCorrupt
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, nil, errCorrupt
	}
	b = b[k:]
	for range n {
		var id int64
		if id, b, ok = readVarint(b); !ok || len(b) == 0 {
			return nil, nil, errCorrupt
		}
		p := partition{id: int32(id), gen: NewGenerator(outOfOrderness)}
		p.gen.seen, b = b[0] == 1, b[1:]
		if p.gen.maxTS, b, ok = readVarint(b); !ok {
			return nil, nil, errCorrupt
		}
		if p.lastActive, b, ok = readVarint(b); !ok {
			return nil, nil, errCorrupt
		}
		c.parts = append(c.parts, p)
	}
	return c, b, nil
}

func readVarint(b []byte) (int64, []byte, bool) {
	v, n := binary.Varint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}

package watermark

import "encoding/binary"

// Valve combines watermarks computed elsewhere, one per input channel, as
// Flink's StatusWatermarkValve does downstream of a shuffle: the stage of a
// distributed job that holds window state receives each input partition's
// watermark with the records and marks the first stage sends it, and its
// own watermark is the minimum over the channels that are not idle. It
// never goes back; with every channel idle it stays where it is.
type Valve struct {
	chans   []channel
	current int64
}

// channel is one input's last watermark and whether it is idle.
type channel struct {
	id   int32
	wm   int64
	idle bool
}

// NewValve returns a valve over the channels ids, each holding the
// watermark back at Min until it reports.
func NewValve(ids []int32) *Valve {
	v := &Valve{current: Min}
	for _, id := range ids {
		v.chans = append(v.chans, channel{id: id, wm: Min})
	}
	return v
}

// Set records channel id's watermark and whether it is idle, and returns
// the combined watermark. A channel's watermark never goes back: an older
// one (a mark overtaken by a record) is ignored. An unknown channel is
// added.
func (v *Valve) Set(id int32, wm int64, idle bool) int64 {
	c := v.channel(id)
	c.wm, c.idle = max(c.wm, wm), idle
	combined, active := Max, false
	for i := range v.chans {
		if !v.chans[i].idle {
			combined, active = min(combined, v.chans[i].wm), true
		}
	}
	if active && combined > v.current {
		v.current = combined
	}
	return v.current
}

func (v *Valve) channel(id int32) *channel {
	for i := range v.chans {
		if v.chans[i].id == id {
			return &v.chans[i]
		}
	}
	v.chans = append(v.chans, channel{id: id, wm: Min})
	return &v.chans[len(v.chans)-1]
}

// Current returns the combined watermark.
func (v *Valve) Current() int64 { return v.current }

// Channel returns channel id's last watermark, Min if it has not
// reported.
func (v *Valve) Channel(id int32) int64 {
	for _, c := range v.chans {
		if c.id == id {
			return c.wm
		}
	}
	return Min
}

// valveVersion is the first byte of an encoded Valve.
const valveVersion = 1

// AppendBinary appends the valve's state for a checkpoint.
func (v *Valve) AppendBinary(dst []byte) []byte {
	dst = append(dst, valveVersion)
	dst = binary.AppendVarint(dst, v.current)
	dst = binary.AppendUvarint(dst, uint64(len(v.chans)))
	for _, c := range v.chans {
		dst = binary.AppendVarint(dst, int64(c.id))
		dst = binary.AppendVarint(dst, c.wm)
		idle := byte(0)
		if c.idle {
			idle = 1
		}
		dst = append(dst, idle)
	}
	return dst
}

// DecodeValve reads what AppendBinary wrote, and returns the rest of b.
func DecodeValve(b []byte) (*Valve, []byte, error) {
	if len(b) == 0 || b[0] != valveVersion {
		return nil, nil, errCorrupt
	}
	b = b[1:]
	v := &Valve{}
	var ok bool
	if v.current, b, ok = readVarint(b); !ok {
		return nil, nil, errCorrupt
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, nil, errCorrupt
	}
	b = b[k:]
	for range n {
		var c channel
		var id int64
		if id, b, ok = readVarint(b); !ok {
			return nil, nil, errCorrupt
		}
		if c.wm, b, ok = readVarint(b); !ok || len(b) == 0 {
			return nil, nil, errCorrupt
		}
		c.id, c.idle, b = int32(id), b[0] == 1, b[1:]
		v.chans = append(v.chans, c)
	}
	return v, b, nil
}

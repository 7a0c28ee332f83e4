package windows

import (
	"hash/maphash"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows/slot"
)

// NewKeyer returns a Keyer for cfg's rules and heatmaps that belongs to no
// operator: the first stage of a distributed job keys events only to route
// them (Route, Fate), and never hands its SlotRefs to an operator. Events
// must be decoded with a schema built from Fields(cfg).
func NewKeyer(cfg *rules.Config, schema *event.Schema) (*Keyer, error) {
	specs, err := slot.Compile(cfg, schema, nil)
	if err != nil {
		return nil, err
	}
	return &Keyer{specs: specs, byID: specs, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}, nil
}

// Route returns which of n partitions owns r's state in a distributed job:
// a hash of the key's text (not of the rule, so that the rules keyed by
// one attribute put an event's state in one partition), the same in every
// process, unlike the hash slots are found by, whose seeds are random.
// Heatmaps are split by key like rules: each partition's operator fires its
// own windows. keys holds r's key.
func (k *Keyer) Route(r SlotRef, keys []byte, n int) int {
	if n <= 1 {
		return 0
	}
	// FNV-1a, written out: hash/fnv's would allocate per event.
	h := uint64(14695981039346656037)
	for _, c := range slot.HashedText(r.slotKey(keys)) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return int(h % uint64(n))
}

// Fate is what an operator at a given watermark does with an event for
// one rule or heatmap: what the first stage of a distributed job, which
// holds no state, can tell of an event before the stage that holds it.
type Fate uint8

const (
	// Skipped: the event falls between the windows of a sliding spec whose
	// slide exceeds its size; it does not match the spec.
	Skipped Fate = iota
	// Alive: a window of the spec that contains the event is not purged;
	// the event is not late.
	Alive
	// Purged: every window of the spec containing the event is purged.
	Purged
	// Merging: the event's own session is purged, but it may merge into a
	// session of its key that is not; only the key's state tells.
	Merging
)

// Fate returns r's fate when its event is windowed at t with the operator
// at watermark wm, as ProcessElement decides it.
func (k *Keyer) Fate(r SlotRef, t, wm int64) Fate {
	sp := k.byID[r.spec]
	switch {
	case sp.InGap(t):
		return Skipped
	case sp.WindowType == rules.Session:
		if sp.SessionOnTime(t, wm) {
			return Alive
		}
		return Merging
	}
	_, first, last := sp.WindowsOf(t)
	if max(first, sp.FirstLiveStart(wm)) > last {
		return Purged
	}
	return Alive
}

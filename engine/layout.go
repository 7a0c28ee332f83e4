package engine

import (
	"encoding/binary"
	"slices"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/windows/slot"

	"github.com/riskstream/riskstream/rules"
)

// layout is where each rule's and heatmap's state is: the state id its
// slot keys start with (windows.Operator.Reload), by its identity. Every
// checkpoint records it, so that a job restarted, or reloaded, with other
// rules keeps the state of those whose definition is unchanged, starts the
// changed and new ones empty, and deletes the state of the others
// (docs/rules.md "Changing the rules of a live job").
type layout struct {
	specs []layoutSpec // rules, then heatmaps, in file order
	// retired are the ids of state that no rule has any more but that
	// may still be stored: a reload deletes what memory holds of it,
	// DeleteRetired the rest between records.
	retired []int
}

type layoutSpec struct {
	rules.Identity
	id int
}

// identityLayout is the layout of a new state: every rule and heatmap at
// its place in cfg.
func identityLayout(cfg *rules.Config) layout {
	var l layout
	for i, id := range cfg.Identities() {
		l.specs = append(l.specs, layoutSpec{id, i})
	}
	return l
}

// identities returns the identities of l's rules and heatmaps.
func (l *layout) identities() []rules.Identity {
	ids := make([]rules.Identity, len(l.specs))
	for i, s := range l.specs {
		ids[i] = s.Identity
	}
	return ids
}

// ids returns the state ids of l's rules and heatmaps, in file order.
func (l *layout) ids() []int {
	ids := make([]int, len(l.specs))
	for i, s := range l.specs {
		ids[i] = s.id
	}
	return ids
}

// next returns the layout of cfg's rules and heatmaps after l's: those
// whose identity is unchanged keep their ids; the others take the
// smallest ids l neither uses nor has retired, and the ids they or removed
// ones had are retired. diff says what changed.
func (l *layout) next(cfg *rules.Config) (next layout, diff rules.Diff) {
	diff = rules.DiffIdentities(l.identities(), cfg.Identities())
	used := map[int]bool{}
	for _, s := range l.specs {
		used[s.id] = true
	}
	for _, id := range l.retired {
		used[id] = true
	}
	next.specs = make([]layoutSpec, len(diff.New))
	for i, id := range diff.New {
		next.specs[i].Identity = id
	}
	next.retired = slices.Clone(l.retired)
	for _, p := range diff.Kept {
		next.specs[p.New].id = l.specs[p.Old].id
	}
	free := 0
	fresh := func() int {
		for used[free] {
			free++
		}
		used[free] = true
		return free
	}
	for _, p := range diff.Restarted {
		next.specs[p.New].id = fresh()
		next.retired = append(next.retired, l.specs[p.Old].id)
	}
	for _, j := range diff.Added {
		next.specs[j].id = fresh()
	}
	for _, i := range diff.Removed {
		next.retired = append(next.retired, l.specs[i].id)
	}
	slices.Sort(next.retired)
	return next, diff
}

// appendBinary appends l's encoding: the counts of specs and retired ids,
// then per spec a kind byte, its name and fingerprint (each a length and
// bytes) and its id, then the retired ids.
func (l *layout) appendBinary(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(l.specs)))
	dst = binary.AppendUvarint(dst, uint64(len(l.retired)))
	for _, s := range l.specs {
		kind := byte('r')
		if s.Heatmap {
			kind = 'h'
		}
		dst = append(dst, kind)
		dst = binary.AppendUvarint(dst, uint64(len(s.Name)))
		dst = append(dst, s.Name...)
		dst = binary.AppendUvarint(dst, uint64(len(s.Fingerprint)))
		dst = append(dst, s.Fingerprint...)
		dst = binary.AppendUvarint(dst, uint64(s.id))
	}
	for _, id := range l.retired {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	return dst
}

// decodeLayout reads what appendBinary wrote.
func decodeLayout(b []byte) (layout, error) {
	var l layout
	fail := corrupt.Errorf("engine: checkpoint layout corrupt")
	uvarint := func() (int, bool) {
		v, k := binary.Uvarint(b)
		if k <= 0 || v >= 1<<31 {
			return 0, false
		}
		b = b[k:]
		return int(v), true
	}
	text := func() (string, bool) {
		n, ok := uvarint()
		if !ok || n > len(b) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	nSpecs, ok1 := uvarint()
	nRetired, ok2 := uvarint()
	if !ok1 || !ok2 || nSpecs+nRetired > len(b) {
		return l, fail
	}
	for range nSpecs {
		if len(b) == 0 || b[0] != 'r' && b[0] != 'h' {
			return l, fail
		}
		s := layoutSpec{Identity: rules.Identity{Heatmap: b[0] == 'h'}}
		b = b[1:]
		var ok bool
		if s.Name, ok = text(); !ok {
			return l, fail
		}
		if s.Fingerprint, ok = text(); !ok {
			return l, fail
		}
		if s.id, ok = uvarint(); !ok || s.id >= slot.StateIDs {
			return l, fail
		}
		l.specs = append(l.specs, s)
	}
	for range nRetired {
		id, ok := uvarint()
		if !ok || id >= slot.StateIDs {
			return l, fail
		}
		l.retired = append(l.retired, id)
	}
	if len(b) != 0 {
		return l, fail
	}
	return l, nil
}

package rules

import (
	"errors"
	"fmt"
)

// Identity names the state one rule or heatmap keeps: which it is and the
// fingerprint of its definition, everything that shapes its state (see
// StateFingerprint). Two rules files whose rule of one name has the same
// identity can share its state; thresholds, actions, min_events and mode
// only read it.
type Identity struct {
	Heatmap bool
	Name    string
	// Fingerprint is a hex SHA-256 of the definition.
	Fingerprint string
}

// String names the rule or heatmap for messages: `rule "pay-burst"`.
func (id Identity) String() string {
	if id.Heatmap {
		return fmt.Sprintf("heatmap %q", id.Name)
	}
	return fmt.Sprintf("rule %q", id.Name)
}

// Identities returns the identity of every rule, then every heatmap, in
// file order.
func (c *Config) Identities() []Identity {
	ids := make([]Identity, 0, len(c.Rules)+len(c.Heatmaps))
	for i := range c.Rules {
		r := &c.Rules[i]
		ids = append(ids, Identity{Name: r.Name, Fingerprint: hashHex(r.definition())})
	}
	for i := range c.Heatmaps {
		h := &c.Heatmaps[i]
		ids = append(ids, Identity{Heatmap: true, Name: h.Name, Fingerprint: hashHex(h.definition())})
	}
	return ids
}

// StateSettings is the fingerprint of the settings that shape every rule's
// and heatmap's state at once: the watermark's out_of_orderness,
// idle_timeout and allowed_lateness. State written under other settings is
// not carried over.
func (c *Config) StateSettings() string { return hashHex(c.Watermark.stateLine()) }

// Pair is a rule or heatmap of an old rules file and the one of the same
// name in a new one, by their positions in Identities.
type Pair struct{ Old, New int }

// Diff is what changing from one rules file to another does to the state:
// which rules and heatmaps keep theirs, which restart empty because their
// definition changed, which are removed with their state, which are new.
// Positions are those of Identities of the old and the new file.
type Diff struct {
	Old, New  []Identity
	Kept      []Pair
	Restarted []Pair
	Removed   []int
	Added     []int
}

// Groups returns the rules and heatmaps that keep their state, restart
// empty, are removed and are added, each in file order.
func (d *Diff) Groups() (kept, restarted, removed, added []Identity) {
	for _, p := range d.Kept {
		kept = append(kept, d.New[p.New])
	}
	for _, p := range d.Restarted {
		restarted = append(restarted, d.New[p.New])
	}
	for _, i := range d.Removed {
		removed = append(removed, d.Old[i])
	}
	for _, i := range d.Added {
		added = append(added, d.New[i])
	}
	return kept, restarted, removed, added
}

// KeptHeatmaps names the heatmaps that keep their state: what follows a
// heatmap's windows (the console, the metrics) keeps what it had of them,
// and forgets it for the others.
func (d *Diff) KeptHeatmaps() map[string]bool {
	kept := map[string]bool{}
	for _, p := range d.Kept {
		if id := d.New[p.New]; id.Heatmap {
			kept[id.Name] = true
		}
	}
	return kept
}

// DiffIdentities compares the identities of an old rules file (or of a
// checkpoint) with those of a new one. A rule or heatmap is the same one
// when it has the same name (and kind); it keeps its state when its
// definition is unchanged too.
func DiffIdentities(old, new []Identity) Diff {
	d := Diff{Old: old, New: new}
	byName := make(map[Identity]int, len(old))
	for i, id := range old {
		byName[Identity{Heatmap: id.Heatmap, Name: id.Name}] = i
	}
	matched := make([]bool, len(old))
	for j, id := range new {
		i, ok := byName[Identity{Heatmap: id.Heatmap, Name: id.Name}]
		switch {
		case !ok:
			d.Added = append(d.Added, j)
			continue
		case old[i].Fingerprint == id.Fingerprint:
			d.Kept = append(d.Kept, Pair{i, j})
		default:
			d.Restarted = append(d.Restarted, Pair{i, j})
		}
		matched[i] = true
	}
	for i := range old {
		if !matched[i] {
			d.Removed = append(d.Removed, i)
		}
	}
	return d
}

// Changed reports whether the diff changes any state.
func (d *Diff) Changed() bool {
	return len(d.Restarted)+len(d.Removed)+len(d.Added) > 0
}

// CheckReload says why a job running old cannot reload new without a
// restart, or nil: the watermark settings that shape every state
// (StateSettings), and the skew and dedupe sections, change only with a
// restart.
func CheckReload(old, new *Config) error {
	if old.StateSettings() != new.StateSettings() {
		return errors.New("watermark out_of_orderness, idle_timeout and allowed_lateness shape every state, and change only with a restart on a new --state-dir")
	}
	if old.Skew != new.Skew {
		return errors.New("the skew section changes only with a restart")
	}
	if old.Dedupe != new.Dedupe {
		return errors.New("the dedupe section changes only with a restart")
	}
	return nil
}

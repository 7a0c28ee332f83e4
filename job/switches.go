package job

import (
	"slices"

	"github.com/riskstream/riskstream/ruleslog"
)

// Switches stop a Merge where a distributed job's router began to route
// by each version of its rules (ruleslog.Switch), so that whoever takes
// the same input after it changes the rules between the same two records:
// a replay of the input (replay --rules-topic), or a router resuming from
// a checkpoint older than a switch its predecessor made. The router noted
// each input partition's next offset where it switched: in the merge's
// order, which depends on the topic alone, the switch falls before the
// first record taken at or past any of them.
type Switches struct {
	log   *ruleslog.Log
	merge *Merge
	parts []int32
	// version is the version taken last.
	version int64
}

// NewSwitches sets m's stops for the versions of log after version, on
// partitions parts.
func NewSwitches(log *ruleslog.Log, m *Merge, version int64, parts []int32) *Switches {
	s := &Switches{log: log, merge: m, parts: slices.Clone(parts), version: version}
	s.stop()
	return s
}

// stop sets each partition's stop before the next version it switched to.
func (s *Switches) stop() {
	for _, p := range s.parts {
		for v := s.version + 1; v <= s.log.Last(); v++ {
			if o, ok := s.log.SwitchAt(v, p); ok {
				s.merge.StopBefore(p, o)
				break
			}
		}
	}
}

// At returns, in order, the versions to take before the record at offset
// of partition p, where the merge stopped (Merge.Stopped): every version
// up to the last that p switched to at or before it. None for a stop of a
// version taken already, at another partition's stop.
func (s *Switches) At(p int32, offset int64) []int64 {
	last := s.version
	for v := s.version + 1; v <= s.log.Last(); v++ {
		if o, ok := s.log.SwitchAt(v, p); ok && o <= offset {
			last = v
		}
	}
	var taken []int64
	for s.version < last {
		s.version++
		taken = append(taken, s.version)
	}
	s.stop()
	return taken
}

// Pending reports whether the log holds a switch to a version after the
// one taken last, on one of the partitions: the merge stops there.
func (s *Switches) Pending() bool {
	for v := s.version + 1; v <= s.log.Last(); v++ {
		for _, p := range s.parts {
			if _, ok := s.log.SwitchAt(v, p); ok {
				return true
			}
		}
	}
	return false
}

// Package ruleslog reads and writes a distributed job's rules topic
// (docs/distributed.md "Changing the rules"): the versions of the job's
// rules, one after the other, and where the job's router began to route
// by each, so that a replay of the input topic reloads the rules where the
// job did.
package ruleslog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/riskstream/riskstream/kafkaconn"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/rules"
	"github.com/segmentio/kafka-go"
)

// Version is a version of the job's rules, as proposed: the first is 1,
// and each next one is taken only if it is one more than the last taken.
type Version struct {
	Version int64
	File    string
	Source  []byte
}

// Switch says that the records the router took from the first at or past
// Offset of input partition Partition on are routed by the rules of
// Version: it notes each input partition's next offset where it switched.
type Switch struct {
	Version   int64
	Partition int32
	Offset    int64
}

// record is a record's value: a version or a switch.
type record struct {
	Kind      string `json:"kind"` // "rules" or "switch"
	Version   int64  `json:"version"`
	File      string `json:"file,omitempty"`
	Source    string `json:"source,omitempty"`
	Partition int32  `json:"partition,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
}

// EncodeVersion returns the key and value of v's record.
func EncodeVersion(v Version) (key, value []byte) {
	value, _ = json.Marshal(record{Kind: "rules", Version: v.Version, File: v.File, Source: string(v.Source)})
	return strconv.AppendInt(nil, v.Version, 10), value
}

// EncodeSwitch returns the key and value of s's record. The first
// record of a version and partition counts (Read), so that a router
// that resumes from an earlier checkpoint does not move it: the key names
// the offset too, so that compaction, which keeps the last record of a
// key, keeps the first.
func EncodeSwitch(s Switch) (key, value []byte) {
	value, _ = json.Marshal(record{Kind: "switch", Version: s.Version, Partition: s.Partition, Offset: s.Offset})
	return fmt.Appendf(nil, "%d/%d/%d", s.Version, s.Partition, s.Offset), value
}

// ErrNotARecord is returned by Decode for bytes that are neither.
var ErrNotARecord = errors.New("ruleslog: not a record of a rules topic")

// Decode returns the version or the switch of a record's value.
func Decode(value []byte) (*Version, *Switch, error) {
	var r record
	if err := json.Unmarshal(value, &r); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrNotARecord, err)
	}
	switch r.Kind {
	case "rules":
		return &Version{Version: r.Version, File: r.File, Source: []byte(r.Source)}, nil, nil
	case "switch":
		return nil, &Switch{Version: r.Version, Partition: r.Partition, Offset: r.Offset}, nil
	}
	return nil, nil, fmt.Errorf("%w: kind %q", ErrNotARecord, r.Kind)
}

// Next returns the rules of v when a job whose rules are current, of
// version, takes them: v is the version after it, its rules parse, and
// current may be reloaded to them (rules.CheckReload); nil when v is of
// another version (a proposal another came before), and an error when
// it cannot be taken.
func Next(v *Version, current *rules.Config, version int64) (*rules.Config, error) {
	if v.Version != version+1 {
		return nil, nil
	}
	cfg, err := rules.Parse(v.File, v.Source)
	if err == nil && current != nil {
		err = rules.CheckReload(current, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("version %d of the rules: %w", v.Version, err)
	}
	return cfg, nil
}

// Log is what a rules topic holds: the versions taken, in order (the
// first is version 1), and the first switch of each version and input
// partition.
type Log struct {
	Versions []*rules.Config
	// first are the switches by version and partition, the first of each.
	first map[[2]int64]int64
}

// NewLog returns a Log with no versions: a rules topic read from its
// start builds it up (Add, Note).
func NewLog() *Log { return &Log{first: map[[2]int64]int64{}} }

// Last returns the last version taken, 0 before the first.
func (l *Log) Last() int64 { return int64(len(l.Versions)) }

// Rules returns the rules of version, which must have been taken.
func (l *Log) Rules(version int64) *rules.Config { return l.Versions[version-1] }

// Add takes cfg as the next version.
func (l *Log) Add(cfg *rules.Config) { l.Versions = append(l.Versions, cfg) }

// Note records s unless a switch of its version and partition was noted
// before: the first counts. It reports whether s was the first.
func (l *Log) Note(s Switch) bool {
	id := [2]int64{s.Version, int64(s.Partition)}
	if _, ok := l.first[id]; ok {
		return false
	}
	l.first[id] = s.Offset
	return true
}

// SwitchAt returns where input partition p began to route by the rules of
// version, and false when the topic does not say.
func (l *Log) SwitchAt(version int64, p int32) (int64, bool) {
	o, ok := l.first[[2]int64{version, int64(p)}]
	return o, ok
}

// Read reads the rules topic to its end. Records that are not versions a
// job would take are skipped, as every instance skips them.
func Read(ctx context.Context, brokers []string, sec *kafkaconn.Security, topic string) (*Log, error) {
	l := NewLog()
	_, err := kafkaio.ReadRecords(ctx, sec.Dialer(), brokers, topic, 0, kafka.FirstOffset, func(m *kafka.Message) error {
		v, s, err := Decode(m.Value)
		switch {
		case err != nil:
		case s != nil:
			l.Note(*s)
		default:
			var current *rules.Config
			if l.Last() > 0 {
				current = l.Rules(l.Last())
			}
			if cfg, err := Next(v, current, l.Last()); err == nil && cfg != nil {
				l.Add(cfg)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rules topic %s: %w", topic, err)
	}
	if len(l.Versions) == 0 {
		return nil, fmt.Errorf("rules topic %s holds no rules: name the rules topic of a distributed job's --group (GROUP-rules)", topic)
	}
	return l, nil
}

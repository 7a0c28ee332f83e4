package engine

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
)

// Router is the first stage of a distributed job (docs/distributed.md):
// it decodes and keys each record of the input, times it as the engine
// does (its source's skew, the job's watermark), and names the partitions
// of the repartition topic that hold the state of its keys, where Tasks
// process it. It holds no window state: the clocks are all it keeps, and
// checkpoints, so that another instance can take the routing over.
//
// One Router takes every input partition, in the order of the single
// job's merge (job.Merge), with the single job's clocks: the watermark
// over all input partitions, each source's skew over the whole input, and
// dedupe, which drops an event whose id was taken within dedupe.horizon.
// So every record reaches the Tasks with the time and watermarks it meets
// in one engine, and the Tasks' outputs are the engine's.
type Router struct {
	cfg        *rules.Config
	dec        *Decoder
	partitions int
	onTr       func(watermark.Transition)
	clocks
	ev     event.Event
	refs   []windows.SlotRef
	keys   []byte
	routed Routed
	stats  RouterStats
}

// RouterStats count what became of the records a Router took.
type RouterStats struct {
	Records   int64
	Invalid   int64
	Unmatched int64
	Retimed   int64
	// Late counts events every window of which was purged at their input
	// partition's watermark; the Router sends them to the late output.
	Late int64
	// Split counts events that are late unless a session merges them, with
	// session rules or heatmaps in more than one partition: the partition
	// of the first decides alone (docs/distributed.md "Late events").
	Split int64
	// Duplicates counts the records dropped because their event's id was
	// taken within dedupe.horizon; they count in Records too.
	Duplicates int64
}

// Decoded is a record's event as a Router decoded it. A Task in the
// router's process takes it with the record's message (Task.ApplyDecoded)
// instead of decoding the record a second time, when its rules read the
// same fields: decoding is most of what a record costs a task.
type Decoded struct {
	Event  event.Event
	schema *event.Schema
}

// Routed is where a Router sends a record.
type Routed struct {
	// Invalid is why the record goes to the dlq output, or nil.
	Invalid error
	// Duplicate is set when the record's event was taken already
	// (dedupe): it goes nowhere.
	Duplicate bool
	// Late is set when the record goes to the late output, with the
	// watermark Message.Before.
	Late bool
	// Message is the record's, to each of Partitions; Decider is set on
	// the one to Decider.
	Message Message
	// Partitions are those of the repartition topic that hold the record's
	// keys, in increasing order; none when the record is invalid, late or
	// matches no rule.
	Partitions []int32
	// Decider is the partition that writes the record to the late output
	// if it turns out late there, or -1 when it cannot be late.
	Decider int32
}

// NewRouter returns a Router for cfg sending records to a repartition topic
// of the given number of partitions. onTr, if set, is told when a source
// becomes degraded or recovers.
func NewRouter(cfg *rules.Config, partitions int, onTr func(watermark.Transition)) (*Router, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("engine: a router needs at least one partition, not %d", partitions)
	}
	dec, err := newRouterDecoder(cfg)
	if err != nil {
		return nil, err
	}
	return &Router{cfg: cfg, dec: dec, partitions: partitions, onTr: onTr, clocks: newClocks(cfg, onTr)}, nil
}

// Reload routes the records after it by cfg's rules, which rules.CheckReload
// accepts in place of the router's: the clocks stay, their settings
// being what a reload does not change.
func (r *Router) Reload(cfg *rules.Config) error {
	if err := rules.CheckReload(r.cfg, cfg); err != nil {
		return fmt.Errorf("engine: reload: %w", err)
	}
	dec, err := newRouterDecoder(cfg)
	if err != nil {
		return err
	}
	r.cfg, r.dec = cfg, dec
	r.maxAhead = cfg.Watermark.MaxAhead.Milliseconds()
	return nil
}

// newRouterDecoder returns the decoder and keyer of cfg's rules.
func newRouterDecoder(cfg *rules.Config) (*Decoder, error) {
	schema, err := event.NewSchema(windows.Fields(cfg))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	keyer, err := windows.NewKeyer(cfg, schema)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	return &Decoder{dec: event.NewDecoder(schema), keyer: keyer}, nil
}

// StoreIDs makes the ids dedupe remembers stored in b as they are taken,
// each with the input partition and offset of its record, for
// checkpoints: a store that the router's checkpoint writes first, and
// whose ids of records past that checkpoint a Restore leaves out. Call it
// before Restore.
func (r *Router) StoreIDs(b *IDLog) {
	if r.dd != nil {
		r.dd.store = b
	}
}

// AddPartition registers input partition p before its first record, at
// processing time now: it holds the watermark back until it turns idle.
func (r *Router) AddPartition(p int32, now int64) { r.wm.AddPartition(p, now) }

// Route decides what becomes of rec at processing time now. The result is
// valid until the next call. The event is decoded into into, to be handed
// to Tasks with the record (it stays valid as long as rec.Value), or with
// into nil into the router's own, valid until the next call.
func (r *Router) Route(rec *Record, now int64, into *Decoded) *Routed {
	r.stats.Records++
	c := &r.clocks
	out := &r.routed
	*out = Routed{Partitions: out.Partitions[:0], Decider: -1,
		Message: Message{Kind: RecordMessage, Partition: rec.Partition, Offset: rec.Prov.Offset, Value: rec.Value}}
	ev := &r.ev
	if into != nil {
		ev, into.schema = &into.Event, r.dec.dec.Schema()
	}
	var err error
	r.refs, r.keys, err = r.dec.Decode(rec.Value, ev, r.refs[:0], r.keys[:0])
	if into != nil {
		// The event's text may be in the decoder's scratch space, which
		// the next record must not overwrite.
		r.dec.Retain()
	}
	if err == nil {
		err = c.ahead(rec, ev)
	}
	if err != nil {
		r.stats.Invalid++
		out.Invalid, out.Message.Watermark = err, c.wm.Current()
		return out
	}
	if c.dd != nil {
		c.dd.value = binary.AppendVarint(binary.AppendVarint(c.dd.value[:0], int64(rec.Partition)), rec.Prov.Offset)
		if c.duplicate(ev) {
			r.stats.Duplicates++
			out.Duplicate = true
			return out
		}
	}
	keyer := r.dec.keyer
	m := &out.Message
	m.Before = c.wm.Current()
	m.Time, m.Processing, m.Watermark = c.observe(rec, ev, now)
	if m.Processing {
		r.stats.Retimed++
	}
	alive, matched := false, false
	merging := int32(-1)
	split := false
	for _, ref := range r.refs {
		fate := keyer.Fate(ref, m.Time, m.Before)
		if fate == windows.Skipped {
			continue
		}
		p := int32(keyer.Route(ref, r.keys, r.partitions))
		if !matched {
			out.Decider = p
		}
		matched = true
		switch fate {
		case windows.Alive:
			alive = true
		case windows.Merging:
			if merging < 0 {
				merging = p
			}
			split = split || merging != p
		}
		if i, found := slices.BinarySearch(out.Partitions, p); !found {
			out.Partitions = slices.Insert(out.Partitions, i, p)
		}
	}
	switch {
	case !matched:
		r.stats.Unmatched++
	case alive:
		out.Decider = -1
	case merging < 0:
		// Every window is purged: late wherever its state is.
		r.stats.Late++
		out.Late, out.Partitions, out.Decider = true, out.Partitions[:0], -1
	default:
		out.Decider = merging
		if split {
			r.stats.Split++
		}
	}
	return out
}

// Mark returns the watermark at processing time now, for a mark to every
// partition: partitions silent for the idle timeout let it move.
func (r *Router) Mark(now int64) int64 { return r.wm.Advance(now) }

// Watermark returns the watermark.
func (r *Router) Watermark() int64 { return r.wm.Current() }

// Partition returns input partition p's own watermark, watermark.Min for a
// partition the router does not have.
func (r *Router) Partition(p int32) int64 { return r.wm.Partition(p) }

// Stats returns the counts so far.
func (r *Router) Stats() RouterStats { return r.stats }

// Sources returns the clock skew of every source seen.
func (r *Router) Sources() []watermark.SourceSkew { return r.skew.Sources() }

// routerCheckpointVersion is the first byte of a Router's checkpoint.
// Version 1 began with the fingerprint of the whole rules file, and is
// restored only with the same rules.
const routerCheckpointVersion = 2

// Checkpoint returns the clocks (the watermark of every input partition,
// the skew of every source, and what dedupe keeps beside the ids it
// stores, which it forgets as the watermark leaves them behind), to be
// stored with the offsets they cover. They depend on the rules' watermark
// settings only (rules.Config.StateSettings), which a reload does not
// change: a router restores them under any rules with the same.
func (r *Router) Checkpoint() []byte {
	r.expireIDs()
	sections := [][]byte{[]byte(r.cfg.StateSettings()), r.wm.AppendBinary(nil), r.skew.AppendBinary(nil)}
	if r.dd != nil {
		// A fourth section, which a checkpoint without dedupe leaves out.
		sections = append(sections, r.dd.appendBinary(nil))
	}
	return appendSections([]byte{routerCheckpointVersion}, sections...)
}

// Restore resumes the clocks from what Checkpoint returned, with resume
// the next offset of each input partition the checkpoint covers: the ids
// the store holds of records at or past them are forgotten, their records
// to be taken again. Given more than one checkpoint, each of some input
// partitions routed apart (as routers kept one per input partition),
// their watermarks become one job's (watermark.Combined.Absorb), the skew
// of the sources is the first checkpoint's (those of the others' sources
// start over), and dedupe starts afresh, as without a checkpoint of its.
func (r *Router) Restore(resume map[int32]int64, checkpoints ...[]byte) error {
	var all clocks
	var ids []byte // what dedupe kept, nil for none
	for i, b := range checkpoints {
		c, dd, err := r.decodeClocks(b)
		if err != nil {
			return err
		}
		if i == 0 {
			all, ids = c, dd
			continue
		}
		all.wm.Absorb(c.wm)
		ids = nil
	}
	if len(checkpoints) == 0 {
		if r.dd == nil {
			return nil
		}
		return r.dd.restore(nil) // afresh: the store's ids are of no checkpoint
	}
	all.dd, all.onTr = r.dd, r.onTr
	r.clocks = all
	if r.dd == nil {
		return nil
	}
	r.dd.keep = func(v []byte) bool {
		p, n := binary.Varint(v)
		o, k := binary.Varint(v[max(n, 0):])
		if n <= 0 || k <= 0 {
			return true
		}
		next, ok := resume[int32(p)]
		return !ok || o < next
	}
	defer func() { r.dd.keep = nil }()
	return r.dd.restore(ids)
}

// decodeClocks reads one checkpoint: its clocks, and what its dedupe kept
// (nil without).
func (r *Router) decodeClocks(b []byte) (clocks, []byte, error) {
	var sections [][]byte
	var err error
	if len(b) > 0 && b[0] == 1 {
		sections, err = readCheckpoint(b, 1, r.cfg, 3)
	} else {
		sections, err = readChecked(b, routerCheckpointVersion, 3, r.cfg.StateSettings(),
			fmt.Errorf("%w: watermark out_of_orderness, idle_timeout or allowed_lateness changed", ErrRulesChanged))
	}
	if err != nil {
		return clocks{}, nil, err
	}
	nc := newClocks(r.cfg, r.onTr)
	wm, rest, err := watermark.DecodeCombined(sections[1],
		r.cfg.Watermark.OutOfOrderness.Milliseconds(), r.cfg.Watermark.IdleTimeout.Milliseconds())
	if err != nil || len(rest) != 0 {
		return clocks{}, nil, fmt.Errorf("engine: router checkpoint watermark: %v", err)
	}
	nc.wm = wm
	if nc.skew, err = watermark.DecodeSkewTracker(sections[2], watermark.SkewOptionsFrom(r.cfg.Skew)); err != nil {
		return clocks{}, nil, fmt.Errorf("engine: router checkpoint skew: %w", err)
	}
	var ids []byte
	if len(sections) > 3 {
		ids = sections[3]
	}
	return nc, ids, nil
}

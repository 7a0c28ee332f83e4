package engine

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/internal/prefetch"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// prefetchEvents is how many records make a group, whose state a shard
// gathers the loads of at once and asks for over the group before
// (windows.Operator.Prefetch): enough to overlap their cache misses, few
// enough that what is loaded for a group is still cached when the group
// is processed.
const prefetchEvents = 16

// prefetchAhead gathers, at the start of the group of records at i (of
// n), what to prefetch of the state of the groups after it: the panes of
// the next group, the slots of the one after and the index entries of the
// third (see windows.Operator.Prefetch), which Process asks for over the
// group. The first call also brings in the first groups'. refs(i, j)
// returns the SlotRefs of records i to j-1.
func prefetchAhead(op *windows.Operator, i, n int, refs func(i, j int) []windows.SlotRef) {
	const g = prefetchEvents
	group := func(k int) []windows.SlotRef { return refs(min(i+k*g, n), min(i+(k+1)*g, n)) }
	if i == 0 {
		op.Prefetch(nil, nil, refs(0, min(3*g, n)))
		op.IssuePrefetches(1)
		op.Prefetch(nil, refs(0, min(2*g, n)), nil)
		op.IssuePrefetches(1)
		op.Prefetch(group(0), nil, nil)
		op.IssuePrefetches(1)
	}
	op.Prefetch(group(1), group(2), group(3))
}

// Sharded is the engine with its window state split by key across shards
// that may run on separate goroutines: replay's parallel pipeline. Records
// go through it a Batch at a time, in three steps:
//
//  1. Batch.Add decodes and keys each record, and Time decides its time and
//     the watermark after it: in record order, on one goroutine.
//  2. Each Shard's Process runs the window operator over its keys: the
//     shards of one batch concurrently, each on a goroutine of its own.
//  3. Merge emits the batch's outputs: in batch order, on one goroutine.
//
// Merge emits exactly what Engine would, in the same order, whatever the
// number of shards. Rules are split by key: they emit only on arrival, and
// an event's decisions are put back in rule order. Heatmaps stay whole in
// shard 0, so the windows a watermark fires keep the order of one timer
// queue.
type Sharded struct {
	ruleSet
	out   Output
	count countingOutput
	clocks
	shards []*Shard
	stats  Stats
	merged int64 // the watermark after the last record merged
	// forgotten is Batch.forgotten of the last batch merged.
	forgotten int64
	cursors   []int
	end       Batch // holds what Finish fires
	// parallel is Options.Parallel, or one call after the other.
	parallel func(n int, fn func(i int))
	merging  prefetch.Queue    // prefetchMerge's loads, which Merge asks for
	decision windows.Decision  // emit's, for the Output
	idLines  [idsAhead]uintptr // Time's prefetches of ids' slots
}

// mergeAhead is how many records ahead Merge loads into the CPU cache
// what encoding their outputs reads, and twice as many outputs of each
// shard: the records' text, where their ids are, and the decisions' keys,
// in the shards' state. Other cores wrote them, and with thousands of
// keys deciding they are mostly out of this one's caches.
const mergeAhead = 16

// prefetchMerge gathers, at record i of b, the text of the records
// mergeAhead to 2*mergeAhead after it, and the keys of each shard's
// outputs 2*mergeAhead to 4*mergeAhead after its cursor, for Merge to ask
// for over the next mergeAhead records.
func (e *Sharded) prefetchMerge(b *Batch, i int) {
	q := &e.merging
	q.Reset()
	n := len(b.recs)
	for j := min(i+mergeAhead, n); j < min(i+2*mergeAhead, n); j++ {
		if v := b.recs[j].Value; len(v) > 0 {
			q.Add(prefetch.Addr(&v[0]))
		}
	}
	for k, outs := range b.outs {
		c := e.cursors[k]
		for j := min(c+2*mergeAhead, len(outs)); j < min(c+4*mergeAhead, len(outs)); j++ {
			if o := &outs[j]; o.hw == nil && len(o.key) > 0 {
				q.Add(prefetch.Addr(unsafe.StringData(o.key)))
			}
		}
	}
}

// Shard is one shard of a Sharded engine: a window operator over the keys
// that fall to it. It is the operator's Output, capturing what it emits
// into the batch in hand.
type Shard struct {
	index int
	rs    *ruleSet // the engine's rules: heatmaps follow them among the specs
	op    *windows.Operator
	b     *Batch
	event int32 // the record being processed
	fired bool  // whether the watermark is advancing (versus arrival)
}

// captured is an output of a shard, with its place in the output order.
// A decision-heavy input captures a decision for most records, written on
// a shard's core and read on the merging one: a captured decision keeps
// only what the rule decided, in one cache line, and Merge makes the
// Decision (the event's id and ts it takes from the batch). The heatmap
// window, rare, is out of line.
type captured struct {
	event      int32  // the record's position in its batch
	spec       uint16 // the rule's or heatmap's position, rules first: below slot.StateIDs
	fired      bool   // emitted as the watermark advanced after the record
	processing bool   // the decision's Processing
	rule       *rules.Rule
	key        string
	start, end int64
	value      float64
	hw         *windows.HeatmapWindow // nil for a decision
}

// NewSharded builds a sharded engine with one shard per backend; the cache
// slots of opts are divided among them. opts.Backend is unused.
func NewSharded(opts Options, backends []slotstore.Backend) (*Sharded, error) {
	if opts.Config == nil || opts.Output == nil || len(backends) == 0 {
		return nil, fmt.Errorf("engine: Config, Output and backends are required")
	}
	schema, err := event.NewSchema(windows.Fields(opts.Config))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Sharded{
		ruleSet:  newRuleSet(opts.Config, schema),
		parallel: opts.Parallel,
		out:      opts.Output,
		clocks:   newClocks(opts.Config, opts.OnSkewTransition),
		merged:   watermark.Min,
	}
	if e.parallel == nil {
		e.parallel = func(n int, fn func(i int)) {
			for i := range n {
				fn(i)
			}
		}
	}
	e.stats.Decisions = make([]int64, len(opts.Config.Rules))
	e.count = countingOutput{Output: opts.Output, stats: &e.stats}
	slots, memory := opts.CacheSlots, opts.MemoryBytes
	if slots > 0 {
		slots = max(1, slots/len(backends))
	}
	if memory > 0 {
		memory = max(1, memory/int64(len(backends)))
	}
	for i, b := range backends {
		s := &Shard{index: i, rs: &e.ruleSet}
		wopts := windows.Options{CacheSlots: slots, MemoryBytes: memory, WriteThrough: opts.Checkpoints,
			Shard: i, Shards: len(backends)}
		if i > 0 {
			wopts.SameKeysAs = e.shards[0].op // one Keyer for all shards
		}
		if s.op, err = windows.New(opts.Config, schema, b, s, wopts); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.shards = append(e.shards, s)
	}
	e.end = *e.NewBatch()
	if opts.Checkpoints {
		e.storeIDs(backends[0]) // written at checkpoints, when no shard runs
	}
	return e, nil
}

// Shards returns the shards, for their Process.
func (e *Sharded) Shards() []*Shard { return e.shards }

// NewDecoder returns a Decoder for this engine's records, for Batch.Add.
func (e *Sharded) NewDecoder() *Decoder {
	d := newDecoder(e.schema, e.shards[0].op) // the shards share its keys
	d.ids = e.dd != nil
	return d
}

// Batch is a run of records on its way through a Sharded engine. The
// records' bytes must stay unchanged until Merge has returned.
type Batch struct {
	recs       []Record
	events     []event.Event
	errs       []error
	t          []int64
	processing []bool
	wm         []int64
	// ids are the hashes of the events' ids (idHash), when the engine
	// deduplicates: computed with the decoding, on its goroutines, so
	// that Time, which runs on one, only looks them up.
	ids     [][2]uint64
	refs    [][]windows.SlotRef // per shard: every record's, in order
	refEnd  [][]int             // per shard: record i's end at refs[refEnd[i]]
	results [][]windows.Result  // per shard, per record
	outs    [][]captured        // per shard
	scratch []windows.SlotRef
	// keys holds the refs' keys (see windows.Keyer.Append).
	keys []byte
	// sources holds the events' sources, which they point to: Time, on
	// another core than the decoding, reads them from a few cache lines
	// instead of one line of each record.
	sources []byte
	fields  int // the schema's, for the events' Attrs
	specs   int // rules and heatmaps, for Grow
	// forgotten is the skew tracker's count of forgotten sources after
	// Time, for Merge to publish.
	forgotten int64
}

// NewBatch returns an empty batch for e.
func (e *Sharded) NewBatch() *Batch {
	n := len(e.shards)
	return &Batch{
		fields:  e.schema.Len(),
		specs:   len(e.cfg.Rules) + len(e.cfg.Heatmaps),
		refs:    make([][]windows.SlotRef, n),
		refEnd:  make([][]int, n),
		results: make([][]windows.Result, n),
		outs:    make([][]captured, n),
	}
}

// Reset empties b for reuse, keeping its memory.
func (b *Batch) Reset() {
	b.recs, b.errs, b.t, b.processing, b.wm, b.ids = b.recs[:0], b.errs[:0], b.t[:0], b.processing[:0], b.wm[:0], b.ids[:0]
	b.sources, b.keys = b.sources[:0], b.keys[:0]
	for k := range b.refs {
		b.refs[k], b.refEnd[k], b.results[k] = b.refs[k][:0], b.refEnd[k][:0], b.results[k][:0]
		clear(b.outs[k]) // drop the references outputs hold
		b.outs[k] = b.outs[k][:0]
	}
}

// Grow makes room in b for n more records, about as many refs as the
// records may have and keys of 16 bytes each. A run's first batches are all
// fresh: filled by appends, their arrays were copied as they doubled and
// each event's attributes allocated, all of it fresh memory.
func (b *Batch) Grow(n int) {
	used := len(b.recs)
	if more := used + n - len(b.events); more > 0 {
		attrs := make([]event.Value, more*b.fields)
		b.events = slices.Grow(b.events, more)
		for i := range more {
			b.events = append(b.events, event.Event{Attrs: attrs[i*b.fields : i*b.fields : (i+1)*b.fields]})
		}
	}
	b.recs, b.errs = slices.Grow(b.recs, n), slices.Grow(b.errs, n)
	b.t, b.processing, b.wm, b.ids = slices.Grow(b.t, n), slices.Grow(b.processing, n), slices.Grow(b.wm, n), slices.Grow(b.ids, n)
	b.sources = slices.Grow(b.sources, n*8)
	// Each record has a ref per rule and heatmap it matches, spread over
	// the shards by key.
	refs := n*b.specs/len(b.refs) + n/8
	b.keys = slices.Grow(b.keys, n*b.specs*16)
	for k := range b.refs {
		b.refs[k], b.refEnd[k], b.results[k] = slices.Grow(b.refs[k], refs), slices.Grow(b.refEnd[k], n), slices.Grow(b.results[k], n)
	}
}

// Records returns b's records, in order.
func (b *Batch) Records() []Record { return b.recs }

// Len is the number of records in b.
func (b *Batch) Len() int { return len(b.recs) }

// Add decodes and keys rec with d, a Decoder of the batch's engine, and
// appends it to b.
func (b *Batch) Add(d *Decoder, rec *Record) {
	i := len(b.recs)
	if i == len(b.events) {
		b.events = append(b.events, event.Event{})
	}
	ev := &b.events[i]
	refs, keys, err := d.Decode(rec.Value, ev, b.scratch[:0], b.keys)
	b.keys = keys
	if err == nil {
		d.Retain() // the event lives until the batch is merged
		start := len(b.sources)
		b.sources = append(b.sources, ev.Source...)
		ev.Source = b.sources[start:len(b.sources):len(b.sources)]
	}
	b.scratch = refs
	for _, r := range refs {
		k := d.keyer.Shard(r, len(b.refs))
		b.refs[k] = append(b.refs[k], r)
	}
	for k := range b.refEnd {
		b.refEnd[k] = append(b.refEnd[k], len(b.refs[k]))
	}
	b.recs, b.errs = append(b.recs, *rec), append(b.errs, err)
	if d.ids {
		var h [2]uint64
		if err == nil {
			h = idHash(ev.ID)
		}
		b.ids = append(b.ids, h)
	}
}

// refsOf returns shard k's SlotRefs of records i to j-1.
func (b *Batch) refsOf(k, i, j int) []windows.SlotRef {
	start := 0
	if i > 0 {
		start = b.refEnd[k][i-1]
	}
	return b.refs[k][start:b.refEnd[k][j-1]]
}

// Time decides, in record order, the time that windows each record of b
// and the watermark after it, at processing time now, and which records
// are duplicates (dedupe). An error comes only from the backend that
// stores the ids of a checkpointing engine.
func (e *Sharded) Time(b *Batch, now int64) error {
	for i := range b.recs {
		var t, wm int64
		var processing bool
		if b.errs[i] == nil {
			b.errs[i] = e.ahead(&b.recs[i], &b.events[i])
		}
		if b.errs[i] == nil && e.dd != nil {
			if i%idsAhead == 0 {
				// The lookup of a new id is a cache miss with many ids:
				// asked for a group ahead, the misses overlap each other
				// and the work between.
				n := 0
				for j := i + idsAhead; j < min(i+2*idsAhead, len(b.ids)); j++ {
					e.idLines[n] = e.dd.ids.slotAddr(b.ids[j])
					n++
				}
				prefetch.Lines(e.idLines[:n])
			}
			if e.dd.seen(b.ids[i], e.wm.Current()) { // hashed by Batch.Add
				b.errs[i] = errDuplicate
			}
		}
		if b.errs[i] == nil {
			t, processing, wm = e.observe(&b.recs[i], &b.events[i], now)
		}
		b.t, b.processing, b.wm = append(b.t, t), append(b.processing, processing), append(b.wm, wm)
	}
	b.forgotten = e.skew.Forgotten()
	return nil
}

// idsAhead is how many records make a group whose ids' table slots Time
// asks for, a group ahead.
const idsAhead = 16

// errDuplicate marks a record of a Batch that dedupe dropped: it makes no
// output.
var errDuplicate = errors.New("duplicate")

// Process runs the shard's window operator over b's records. Shards of a
// batch may run concurrently; one shard processes batches in order. An
// error comes only from the shard's backend.
func (s *Shard) Process(b *Batch) error {
	s.b = b
	n := len(b.recs)
	results := b.results[s.index]
	for i := range n {
		if i%prefetchEvents == 0 {
			prefetchAhead(s.op, i, n, func(i, j int) []windows.SlotRef { return b.refsOf(s.index, i, j) })
		}
		s.op.IssuePrefetches(prefetchEvents - i%prefetchEvents)
		if b.errs[i] != nil {
			results = append(results, windows.Unmatched)
			continue
		}
		s.event, s.fired = int32(i), false
		res, err := s.op.ProcessElement(b.refsOf(s.index, i, i+1), b.keys, b.t[i], b.processing[i])
		if err != nil {
			return err
		}
		results = append(results, res)
		s.fired = true
		if err := s.op.AdvanceWatermark(b.wm[i]); err != nil {
			return err
		}
	}
	b.results[s.index] = results
	return nil
}

// Decision implements windows.Output.
func (s *Shard) Decision(d *windows.Decision) {
	s.b.outs[s.index] = append(s.b.outs[s.index], captured{
		event: s.event, spec: uint16(d.RuleIndex), fired: s.fired, processing: d.Processing,
		rule: d.Rule, key: d.Key, start: d.Start, end: d.End, value: d.Value,
	})
}

// Heatmap implements windows.Output. The accumulator is copied: the window
// may take more events before the output is merged.
func (s *Shard) Heatmap(h *windows.HeatmapWindow) {
	hw := *h
	hw.Acc = h.Acc.Clone()
	s.b.outs[s.index] = append(s.b.outs[s.index], captured{event: s.event, fired: s.fired, spec: uint16(len(s.rs.cfg.Rules) + h.HeatmapIndex), hw: &hw})
}

// Merge emits the outputs of b, which every shard has processed, in the
// order Engine would have, and counts its records. before, if not nil, is
// called with each record's index before its outputs are emitted.
func (e *Sharded) Merge(b *Batch, before func(i int)) {
	e.forgotten = b.forgotten
	e.cursors = append(e.cursors[:0], make([]int, len(e.shards))...)
	for i := range b.recs {
		rec := &b.recs[i]
		if before != nil {
			before(i)
		}
		if i%mergeAhead == 0 {
			e.prefetchMerge(b, i)
		}
		e.merging.Issue(mergeAhead - i%mergeAhead)
		e.stats.Records++
		if b.errs[i] == errDuplicate {
			continue
		}
		if b.errs[i] != nil {
			e.stats.Invalid++
			e.out.DLQ(rec.Value, b.errs[i].Error(), &rec.Prov)
			continue
		}
		if b.processing[i] {
			e.stats.Retimed++
		}
		e.emit(b, int32(i), false)
		// The shards' verdicts combine as one operator's would: accepted
		// by any, else late if any rule or heatmap matched.
		res := windows.Unmatched
		for k := range e.shards {
			switch b.results[k][i] {
			case windows.Accepted:
				res = windows.Accepted
			case windows.Late:
				if res == windows.Unmatched {
					res = windows.Late
				}
			}
		}
		settle(&e.stats, e.out, res, rec.Value, e.merged, &rec.Prov)
		e.emit(b, int32(i), true)
		e.merged = max(e.merged, b.wm[i])
	}
	// Nothing of the batch stays reachable through its last decision.
	e.decision, e.count.ev, e.count.prov = windows.Decision{}, nil, nil
}

// emit sends the outputs of record i emitted on arrival (fired false) or as
// the watermark advanced after it, in the order of their rules and
// heatmaps: one operator's order, as each shard emits in that order.
func (e *Sharded) emit(b *Batch, i int32, fired bool) {
	for {
		best := -1
		for k, outs := range b.outs {
			c := e.cursors[k]
			if c == len(outs) || outs[c].event != i || outs[c].fired != fired {
				continue
			}
			if best < 0 || outs[c].spec < b.outs[best][e.cursors[best]].spec {
				best = k
			}
		}
		if best < 0 {
			return
		}
		c := &b.outs[best][e.cursors[best]]
		e.cursors[best]++
		if c.hw != nil {
			e.stats.WindowsFired++
			e.out.Heatmap(c.hw)
		} else {
			// A rule decides only on an event's arrival: a decision is of
			// a record of b, never of the record-less batch of Finish or
			// Tick.
			e.count.ev, e.count.prov = &b.events[i], &b.recs[i].Prov
			e.decision = windows.Decision{
				Rule: c.rule, RuleIndex: int(c.spec), Key: c.key,
				Start: c.start, End: c.end, Value: c.value, Processing: c.processing,
			}
			e.count.Decision(&e.decision)
		}
	}
}

// Finish ends the input: the watermark goes to +infinity, windows that have
// not fired fire once, their outputs are emitted, and state is flushed to
// the backends.
func (e *Sharded) Finish() error {
	e.forgetIDs()
	return e.advance(e.wm.Finish(), func(op *windows.Operator) error { return op.Flush() })
}

// Tick lets the watermark notice idle partitions at processing time now,
// firing what it reaches (Engine's Tick). No shard may be processing.
func (e *Sharded) Tick(now int64) error { return e.advance(e.wm.Advance(now), nil) }

// advance advances every shard's watermark to wm, then runs then on each
// shard's operator, if not nil, and emits what fired. The shards fire and
// purge through Options.Parallel, concurrently if the caller runs them so:
// each captures into its own outputs.
func (e *Sharded) advance(wm int64, then func(op *windows.Operator) error) error {
	b := &e.end
	b.Reset()
	for _, s := range e.shards {
		s.b, s.event, s.fired = b, 0, true
	}
	errs := make([]error, len(e.shards))
	e.parallel(len(e.shards), func(i int) {
		op := e.shards[i].op
		if errs[i] = op.AdvanceWatermark(wm); errs[i] == nil && then != nil {
			errs[i] = then(op)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.cursors = append(e.cursors[:0], make([]int, len(e.shards))...)
	e.emit(b, 0, true)
	e.merged = max(e.merged, wm)
	return nil
}

// WriteBack writes up to n changed window states, shared among the shards,
// to the backends ahead of the next Checkpoint (Engine's WriteBack). No
// shard may be processing.
func (e *Sharded) WriteBack(n int) error {
	var errs []error
	for _, s := range e.shards {
		errs = append(errs, s.op.WriteBack(max(1, n/len(e.shards))))
	}
	return errors.Join(errs...)
}

// Changed returns about how many window states changed since they were
// last written to the backends (Engine's Changed).
func (e *Sharded) Changed() int {
	n := 0
	for _, s := range e.shards {
		n += s.op.Changed()
	}
	return n
}

// PartitionWatermark returns one input partition's own watermark.
func (e *Sharded) PartitionWatermark(id int32) int64 { return e.wm.Partition(id) }

// Spilled counts the states and the timers the shards spilled to their
// Backends for want of memory; it must not be called while shards run.
func (e *Sharded) Spilled() (states, timers int64) {
	for _, s := range e.shards {
		states += s.op.Spilled()
		timers += s.op.TimersSpilled()
	}
	return states, timers
}

// AddPartition registers an input partition before its first record, so it
// holds the watermark back until it has data or turns idle (Engine's
// AddPartition). It must not run while Time does.
func (e *Sharded) AddPartition(id int32, now int64) { e.wm.AddPartition(id, now) }

// Sources returns the clock skew of every source seen.
func (e *Sharded) Sources() []watermark.SourceSkew { return e.skew.Sources() }

// Watermark returns the watermark after the last record merged.
func (e *Sharded) Watermark() int64 { return e.merged }

// Stats returns the counts of the records merged so far. It reads only
// what Merge wrote, so that progress can be shown while shards run.
func (e *Sharded) Stats() Stats {
	s := e.stats
	s.Decisions = append([]int64(nil), s.Decisions...)
	s.SourcesForgotten = e.forgotten
	s.Duplicates = e.duplicates()
	return s
}

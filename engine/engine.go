// Package engine is the per-record pipeline shared by replay and the live
// job: decode, pick the time that windows the event, feed the window
// operator, advance the watermark. It performs no I/O and reads no clock:
// records, processing time and the output sink come in from the caller
// (stream/), which is what makes a replay and a live run of the same records
// produce the same outputs.
package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/watermark"
	"github.com/riskstream/riskstream/windows"
	"github.com/riskstream/riskstream/windows/slotstore"
)

// Output receives everything the engine emits.
type Output interface {
	windows.Output
	// Late receives an event every window of which was already purged.
	Late(raw []byte, wm int64, p *event.Provenance)
	// DLQ receives a record that is not a valid event.
	DLQ(raw []byte, reason string, p *event.Provenance)
}

// Options configure an Engine.
type Options struct {
	// Config is the validated rules file. Required.
	Config *rules.Config
	// Backend stores window state beyond the cache. Required.
	Backend slotstore.Backend
	// Output receives the records the engine emits. Required.
	Output Output
	// MemoryBytes is the memory the window state may take; see
	// windows.Options. A Sharded engine divides it among its shards.
	MemoryBytes int64
	// CacheSlots is the operator's write-back cache size; see
	// windows.Options. A Sharded engine divides it among its shards.
	CacheSlots int
	// OnSkewTransition, if set, is told when a source becomes degraded or
	// recovers, to log and count it.
	OnSkewTransition func(watermark.Transition)
	// Checkpoints makes a Sharded engine checkpointable: its shards write
	// every state they flush through to their backends, as Engine always
	// does (windows.Options.WriteThrough).
	Checkpoints bool
	// Parallel, if set, calls fn(i) for every i in [0, n), each on a
	// goroutine of the caller's choosing, and returns once all have
	// returned: a Sharded engine fires, purges and checkpoints its shards
	// through it, as its caller runs their batches. The default calls them
	// one after the other: the engine starts no goroutine of its own.
	Parallel func(n int, fn func(i int))
}

// Record is one input record.
type Record struct {
	Value     []byte
	Partition int32
	// Reference is the record's reference time in ms (its Kafka timestamp)
	// when HasReference; files give it as the event's ingest_ts instead.
	Reference    int64
	HasReference bool
	Prov         event.Provenance
}

// Stats count what became of the records.
type Stats struct {
	Records   int64
	Accepted  int64
	Unmatched int64
	Late      int64
	Invalid   int64
	// Retimed counts events windowed by their reference time because their
	// source's clock was skewed.
	Retimed int64
	// Decisions counts decisions per rule, in rules file order.
	Decisions    []int64
	WindowsFired int64
	// SourcesForgotten counts sources the skew tracker forgot to stay
	// within skew.max_sources.
	SourcesForgotten int64
	// Duplicates counts the records dropped because their event's id was
	// taken within dedupe.horizon; they count in Records too.
	Duplicates int64
}

// Engine runs records through decoding, watermarks and the window operator.
type Engine struct {
	ruleSet
	out  Output
	dec  *Decoder
	ev   event.Event
	refs []windows.SlotRef
	keys []byte // the refs' keys
	clocks
	op    *windows.Operator
	stats Stats
	count countingOutput
}

// clocks is the part of processing a record that must see every record in
// order: it names the record's source, tracks each source's clock skew and
// each partition's watermark, and so decides the time that windows each
// event and the watermark after it.
type clocks struct {
	// maxAhead is watermark.max_ahead in ms (see ahead).
	maxAhead int64
	wm       *watermark.Combined
	skew     *watermark.SkewTracker
	onTr     func(watermark.Transition)
	// partitionSources names the source of events without one: their
	// partition (docs/events.md "source").
	partitionSources map[int32][]byte
	// dd drops events whose id was taken within dedupe.horizon; nil
	// without.
	dd *dedupe
	// ids keeps dd's ids in a checkpointing engine's state store; nil
	// when they are not stored, or stored by the caller (Router.StoreIDs).
	ids *idBlobs
}

func newClocks(cfg *rules.Config, onTr func(watermark.Transition)) clocks {
	return clocks{
		maxAhead: cfg.Watermark.MaxAhead.Milliseconds(),
		wm: watermark.NewCombined(cfg.Watermark.OutOfOrderness.Milliseconds(),
			cfg.Watermark.IdleTimeout.Milliseconds()),
		skew:             watermark.NewSkewTracker(watermark.SkewOptionsFrom(cfg.Skew)),
		onTr:             onTr,
		partitionSources: make(map[int32][]byte),
		dd:               newDedupe(cfg.Dedupe.Horizon.Milliseconds()),
	}
}

// duplicate reports whether ev was taken within dedupe.horizon, and
// remembers it otherwise (see dedupe).
func (c *clocks) duplicate(ev *event.Event) bool {
	return c.dd != nil && c.dd.seen(idHash(ev.ID), c.wm.Current())
}

// duplicates is how many records dedupe dropped.
func (c *clocks) duplicates() int64 {
	if c.dd == nil {
		return 0
	}
	return c.dd.duplicates
}

// expireIDs forgets the ids the watermark has left behind, at a
// checkpoint: an input gone quiet takes no event that would.
func (c *clocks) expireIDs() {
	if c.dd != nil {
		c.dd.advance(c.wm.Current())
	}
}

// forgetIDs forgets every id dedupe remembers, at the end of the input,
// as the watermark's end does every window.
func (c *clocks) forgetIDs() {
	if c.dd != nil {
		c.dd.forgetAll()
	}
}

// storeIDs makes the ids dedupe remembers stored in the state store b,
// for checkpoints: as blobs (idBlobs).
func (c *clocks) storeIDs(b slotstore.Backend) {
	if c.dd != nil {
		c.ids = newIDBlobs(b)
		c.dd.store = c.ids.log
	}
}

// writeIDs writes the ids taken since the last checkpoint to the state
// store, at a checkpoint.
func (c *clocks) writeIDs() error {
	if c.ids == nil {
		return nil
	}
	return c.ids.write()
}

// reference returns the record's reference time: its Kafka record
// timestamp live, ingest_ts in files; false without either.
func reference(rec *Record, ev *event.Event) (int64, bool) {
	switch {
	case rec.HasReference:
		return rec.Reference, true
	case ev.HasIngestTS:
		return ev.IngestTS, true
	}
	return 0, false
}

// ahead returns why ev is refused when its ts is more than max_ahead past
// its record's reference time or, without one, past the largest event time
// taken so far (nothing is refused before the first event then); else nil.
// Such an event goes to the dlq before it reaches the skew estimator or the
// watermark: a single clock set years ahead would otherwise move the
// watermark past every other event and make them all late.
func (c *clocks) ahead(rec *Record, ev *event.Event) error {
	ref, ok := reference(rec, ev)
	what := "its record's reference time"
	if !ok {
		if ref, ok = c.wm.MaxEventTime(); !ok {
			return nil
		}
		what = "the largest event time seen"
	}
	if ref > math.MaxInt64-c.maxAhead || ev.TS <= ref+c.maxAhead {
		return nil
	}
	return &event.Error{Reason: fmt.Sprintf("ts %d is more than watermark.max_ahead (%v) ahead of %s %d",
		ev.TS, time.Duration(c.maxAhead)*time.Millisecond, what, ref)}
}

// observe returns the time that windows ev, whether that is its reference
// time (its source's clock is skewed), and the job's watermark once ev is
// counted, at processing time now.
func (c *clocks) observe(rec *Record, ev *event.Event, now int64) (t int64, processing bool, wm int64) {
	// Without a reference time, ts is its own (then no skew can be seen).
	ref, ok := reference(rec, ev)
	if !ok {
		ref = ev.TS
	}
	source := ev.Source
	if len(source) == 0 {
		source = c.partitionSource(rec.Partition)
	}
	t, processing, tr := c.skew.Observe(source, ev.TS, ref)
	if tr != nil && c.onTr != nil {
		c.onTr(*tr)
	}
	return t, processing, c.wm.OnEvent(rec.Partition, t, now)
}

func (c *clocks) partitionSource(p int32) []byte {
	name, ok := c.partitionSources[p]
	if !ok {
		name = fmt.Appendf(nil, "partition-%d", p)
		c.partitionSources[p] = name
	}
	return name
}

// New builds an engine for opts.Config.
func New(opts Options) (*Engine, error) {
	if opts.Config == nil || opts.Backend == nil || opts.Output == nil {
		return nil, fmt.Errorf("engine: Config, Backend and Output are required")
	}
	schema, err := event.NewSchema(windows.Fields(opts.Config))
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		ruleSet: newRuleSet(opts.Config, schema),
		out:     opts.Output,
		clocks:  newClocks(opts.Config, opts.OnSkewTransition),
	}
	e.stats.Decisions = make([]int64, len(opts.Config.Rules))
	e.count = countingOutput{Output: opts.Output, stats: &e.stats}
	e.op, err = windows.New(opts.Config, schema, opts.Backend, &e.count, windows.Options{
		MemoryBytes: opts.MemoryBytes, CacheSlots: opts.CacheSlots,
		WriteThrough: true, // for Checkpoint
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e.dec = newDecoder(schema, e.op)
	e.storeIDs(opts.Backend)
	return e, nil
}

// countingOutput counts decisions per rule on their way out, and gives
// them the id, ts and provenance of the event whose record is being
// processed or merged: a rule decides only on an event's arrival.
type countingOutput struct {
	Output
	stats *Stats
	ev    *event.Event
	prov  *event.Provenance
}

func (c *countingOutput) Decision(d *windows.Decision) {
	c.stats.Decisions[d.RuleIndex]++
	d.EventID, d.EventTS = c.ev.ID, c.ev.TS
	d.Source = c.prov
	c.Output.Decision(d)
}

// settle counts what became of a valid record, and sends it to the late
// output when no window took it; wm is the watermark it came after.
func settle(st *Stats, out Output, res windows.Result, raw []byte, wm int64, prov *event.Provenance) {
	switch res {
	case windows.Accepted:
		st.Accepted++
	case windows.Unmatched:
		st.Unmatched++
	case windows.Late:
		st.Late++
		out.Late(raw, wm, prov)
	}
}

// Process runs one record at processing time now (ms). Invalid records go to
// the dlq output and late events to the late output; an error comes only
// from the state backend and is fatal to the run.
func (e *Engine) Process(rec *Record, now int64) error {
	refs, keys, err := e.dec.Decode(rec.Value, &e.ev, e.refs[:0], e.keys[:0])
	e.refs, e.keys = refs, keys
	return e.processDecoded(rec, &e.ev, refs, keys, err, now)
}

// processDecoded runs a record that Decoder.Decode turned into ev, refs and
// keys, or into decodeErr.
func (e *Engine) processDecoded(rec *Record, ev *event.Event, refs []windows.SlotRef, keys []byte, decodeErr error, now int64) error {
	e.stats.Records++
	if decodeErr == nil {
		decodeErr = e.ahead(rec, ev)
	}
	if decodeErr != nil {
		e.stats.Invalid++
		e.out.DLQ(rec.Value, decodeErr.Error(), &rec.Prov)
		return nil
	}
	if e.duplicate(ev) {
		return nil
	}
	t, processing, wm := e.observe(rec, ev, now)
	if processing {
		e.stats.Retimed++
	}
	e.count.ev, e.count.prov = ev, &rec.Prov
	res, err := e.op.ProcessElement(refs, keys, t, processing)
	e.count.ev, e.count.prov = nil, nil // a rule decides only on arrival
	if err != nil {
		return err
	}
	settle(&e.stats, e.out, res, rec.Value, e.op.Watermark(), &rec.Prov)
	return e.op.AdvanceWatermark(wm)
}

// Decoder decodes records and keys their events (Batch.Add): the
// per-record work that needs none of the engine's state, so that a
// pipeline can do it on another goroutine, one Decoder per goroutine.
type Decoder struct {
	dec   *event.Decoder
	keyer *windows.Keyer
	// ids says to hash the events' ids for dedupe (Batch.Add).
	ids bool
}

// newDecoder returns a Decoder for records of schema, keyed for op and
// every operator sharing its keys.
func newDecoder(schema *event.Schema, op *windows.Operator) *Decoder {
	return &Decoder{dec: event.NewDecoder(schema), keyer: op.NewKeyer()}
}

// Decode decodes value into ev and appends to refs the state the event
// updates, one SlotRef per rule and heatmap it matches, and to keys their
// keys (see windows.Keyer.Append). The error is the reason the record is
// invalid.
func (d *Decoder) Decode(value []byte, ev *event.Event, refs []windows.SlotRef, keys []byte) ([]windows.SlotRef, []byte, error) {
	if err := d.dec.Decode(value, ev); err != nil {
		return refs, keys, err
	}
	refs, keys = d.keyer.Append(refs, keys, ev)
	return refs, keys, nil
}

// Retain lets the last decoded event outlive the next Decode; see
// event.Decoder.Retain.
func (d *Decoder) Retain() { d.dec.Retain() }

// Tick lets the watermark notice idle partitions at processing time now.
func (e *Engine) Tick(now int64) error {
	return e.op.AdvanceWatermark(e.wm.Advance(now))
}

// Finish ends the input: the watermark goes to +infinity, windows that have
// not fired fire once, and state is flushed to the backend.
func (e *Engine) Finish() error {
	e.forgetIDs()
	if err := e.op.AdvanceWatermark(e.wm.Finish()); err != nil {
		return err
	}
	return e.op.Flush()
}

// WriteBack writes up to n changed window states to the backend ahead of
// the next Checkpoint, so that the checkpoint's pause is shorter; see
// windows.Operator.WriteBack.
func (e *Engine) WriteBack(n int) error { return e.op.WriteBack(n) }

// Watermark returns the job's watermark.
func (e *Engine) Watermark() int64 { return e.op.Watermark() }

// Stats returns the counts so far.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Decisions = append([]int64(nil), s.Decisions...)
	s.WindowsFired = e.op.WindowsFired()
	s.SourcesForgotten = e.skew.Forgotten()
	s.Duplicates = e.duplicates()
	return s
}

package distributed

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/engine"
	"github.com/riskstream/riskstream/job"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/stream/internal/jobbase"
	"github.com/riskstream/riskstream/watermark"
	"github.com/segmentio/kafka-go"
)

// routing is the input routed by this instance in a generation: every
// partition of the input topic, which the group gives one instance
// (kafkaio.StickyBalancer.Undivided), taken in the single job's order (job.Merge)
// and timed by the single job's clocks (engine.Router). Records of
// different input partitions then reach every repartition partition in
// the order the single job takes them in, with the watermarks they meet
// there, and the states' outputs are the single job's.
type routing struct {
	merge   *job.Merge
	journal *job.Journal
	runs    *routerJournal
	// from is where each input partition's fetcher starts.
	from map[int32]int64
	// version is the version of the job's rules the router routes by.
	// Resumed from a checkpoint older than a switch to later ones, it
	// follows switches: the merge stops where its predecessor switched,
	// and it switches there.
	version  int64
	switches *job.Switches
	// started and away make the merge's clock, which counts only the
	// time the loop waits for something to do (the single job's, see
	// stream's liveJob.mergeNow).
	started time.Time
	away    time.Duration
	// markWM and markAt are the last mark's watermark and when it was
	// sent; marked is the input partition the next mark names.
	markWM int64
	markAt time.Time
	marked int
	// ids are the event ids the router's dedupe took, to write at each
	// checkpoint; idKeys, the keys of the records of each generation of
	// them in the ids topic; idBlobs counts the records written.
	ids     *engine.IDLog
	idKeys  engine.IDBlobKeys[string]
	idBlobs int
	// apart are the input partitions with checkpoints of the layout that
	// routed them apart, deleted with the first checkpoint.
	apart []int32
	// recs and arrived are Take's scratch.
	recs    []engine.Record
	arrived []int64
	// decoded are the events of the records handed to tasks directly,
	// which they take instead of decoding the records again: on one side
	// those handed since the tasks last started applying (the first
	// handed of them), on the other those the tasks may still be applying
	// (instance.startLocal).
	decoded [2][]*engine.Decoded
	side    int
	handed  int
}

// nextDecoded returns the event to decode the next record into: free
// until the record is handed to a task (useDecoded).
func (rt *routing) nextDecoded() *engine.Decoded {
	d := &rt.decoded[rt.side]
	if rt.handed == len(*d) {
		*d = append(*d, new(engine.Decoded))
	}
	return (*d)[rt.handed]
}

// useDecoded keeps the event nextDecoded returned for the tasks it was
// handed to, until they apply it.
func (rt *routing) useDecoded() { rt.handed++ }

// flipDecoded leaves the events handed so far to the tasks, which start
// applying them, and decodes the next records into the others, which the
// tasks applied.
func (rt *routing) flipDecoded() { rt.side, rt.handed = rt.side^1, 0 }

// mergeNow is the merge's clock at now, in ms.
func (rt *routing) mergeNow(now time.Time) int64 {
	return (now.Sub(rt.started) - rt.away).Milliseconds()
}

// position returns an input partition and the offset of its last record
// routed (-1 before any), for a mark or rules message: each says that the
// messages of the partition's records up to there were sent before it
// (engine.Task.Applied). Marks name the partitions in turn.
func (rt *routing) position() (p int32, last int64) {
	parts := slices.Sorted(maps.Keys(rt.from))
	if len(parts) == 0 {
		return 0, -1
	}
	rt.marked = (rt.marked + 1) % len(parts)
	p = parts[rt.marked]
	if next, ok := rt.merge.Offsets()[p]; ok {
		return p, max(next, 0) - 1
	}
	return p, -1
}

// routerKey is the key of the router's checkpoint in the routers topic.
// The keys of the journal's entries begin with journalKeyPrefix; a key
// that is a number is an input partition's checkpoint of the layout that
// routed each input partition apart.
const (
	routerKey        = "router"
	journalKeyPrefix = "journal/"
)

// routersTopic is what the routers topic holds: the router's checkpoint,
// or those of input partitions routed apart, and the merge's journal.
type routersTopic struct {
	router  *checkpoint.Router
	apart   map[int32]checkpoint.Router
	journal map[uint64][]byte
}

// readRoutersTopic reads the routers topic to its end; of each key, the
// last record counts, and an empty one deletes it.
func (j *instance) readRoutersTopic(ctx context.Context) (*routersTopic, error) {
	rt := &routersTopic{apart: map[int32]checkpoint.Router{}, journal: map[uint64][]byte{}}
	_, err := kafkaio.ReadRecords(ctx, j.Sec.Dialer(), j.Opts.Brokers, j.topics.Routers, 0, kafka.FirstOffset, func(m *kafka.Message) error {
		key, deleted := string(m.Key), len(m.Value) == 0
		if key == routerKey {
			if deleted {
				rt.router = nil
				return nil
			}
			cp, err := checkpoint.DecodeRouter(j.Opts.Topic, m.Value)
			if err != nil {
				return fmt.Errorf("router checkpoint: %w", err)
			}
			rt.router = &cp
			return nil
		}
		if s, ok := strings.CutPrefix(key, journalKeyPrefix); ok {
			seq, err := strconv.ParseUint(s, 10, 64)
			switch {
			case err != nil:
			case deleted:
				delete(rt.journal, seq)
			default:
				rt.journal[seq] = m.Value
			}
			return nil
		}
		p, err := strconv.Atoi(key)
		switch {
		case err != nil:
			return nil // not a router's
		case deleted:
			delete(rt.apart, int32(p))
			return nil
		}
		cp, err := checkpoint.DecodeApart(j.Opts.Topic, int32(p), m.Value)
		if err != nil {
			return fmt.Errorf("input partition %d: %w", p, err)
		}
		rt.apart[int32(p)] = cp
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("router checkpoints in %s: %w", j.topics.Routers, err)
	}
	return rt, nil
}

// startRouting makes this instance the router of the input partitions
// the generation gives it, resuming from the routers topic: the router's
// checkpoint, or those of partitions routed apart (their watermarks become
// one, engine.Router.Restore), and the merge's journal. It returns the
// output ends the checkpoints recorded.
func (j *instance) startRouting(ctx context.Context, inputs []int32, topic *routersTopic) ([]kafkaio.OutputEnd, error) {
	j.routing = nil
	if len(inputs) == 0 {
		// Nothing routed here: no sources' skew nor watermarks to show.
		return nil, j.replaceRouter(j.rules)
	}
	// The rules the checkpoint was routed by, up to where the former
	// router switched to later ones; without a checkpoint, from the first
	// version, where the first router switched to the rules it began with.
	// Checkpoints of partitions routed apart name no version: the job's
	// last rules, from where they resume.
	version := j.rulesVersion
	switch cp := topic.router; {
	case cp != nil && cp.Rules > 0:
		version = min(cp.Rules, version)
	case cp == nil && len(topic.apart) == 0:
		version = 1
	}
	if err := j.replaceRouter(j.history.Rules(version)); err != nil {
		return nil, err
	}
	ids, idKeys, err := j.readRouterIDs(ctx)
	if err != nil {
		return nil, err
	}
	j.router.StoreIDs(ids)
	merge, err := job.NewMerge(job.MergeOptions{PartitionWait: j.Opts.PartitionWait.Milliseconds(),
		BehindWait: jobbase.BehindWait.Milliseconds(), OnWaitTimeout: j.WaitTimedOut})
	if err != nil {
		return nil, err
	}
	rt := &routing{merge: merge, from: map[int32]int64{}, version: version, started: j.Opts.Now(), markWM: watermark.Min,
		runs: &routerJournal{j: j, entries: topic.journal}, ids: ids, idKeys: idKeys}
	var ends []kafkaio.OutputEnd
	switch {
	case topic.router != nil:
		resume := map[int32]int64{}
		for _, in := range topic.router.Inputs {
			resume[in.Partition] = in.Offset
		}
		if err := j.router.Restore(resume, topic.router.Clocks); err != nil {
			return nil, fmt.Errorf("router checkpoint: %w", err)
		}
		if err := merge.Restore(topic.router.Inputs); err != nil {
			return nil, err
		}
		ends = kafkaio.EndsOf(topic.router.Outputs)
	case len(topic.apart) > 0:
		var clocks [][]byte
		var offsets []checkpoint.Offset
		for _, p := range slices.Sorted(maps.Keys(topic.apart)) {
			cp := topic.apart[p]
			clocks, offsets = append(clocks, cp.Clocks), append(offsets, cp.Inputs...)
			ends = append(ends, kafkaio.EndsOf(cp.Outputs)...)
		}
		if err := j.router.Restore(nil, clocks...); err != nil {
			return nil, fmt.Errorf("router checkpoints of input partitions routed apart: %w", err)
		}
		if err := merge.Restore(offsets); err != nil {
			return nil, err
		}
		rt.apart = slices.Sorted(maps.Keys(topic.apart))
		j.Log.Info("resuming the router checkpoints of input partitions routed apart (an earlier layout): their offsets and watermarks go on; the sources' clock skew is estimated anew but for the first partition's",
			"partitions", slices.Sorted(maps.Keys(topic.apart)))
	default:
		// From the input's start: the store's ids are of no checkpoint.
		if err := j.router.Restore(nil); err != nil {
			return nil, err
		}
	}
	now := j.NowMilli()
	for _, p := range inputs {
		from, _ := merge.AddPartition(p)
		j.router.AddPartition(p, now)
		rt.from[p] = from
	}
	if version < j.rulesVersion {
		rt.switches = job.NewSwitches(j.history, merge, version, inputs)
		j.Log.Info("the router's checkpoint is older than the job's rules: routing by its rules up to where they changed",
			"version", version, "job", j.rulesVersion)
	}
	rt.journal = job.NewJournal(rt.runs)
	n, err := rt.journal.Load(merge)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		j.Log.Info("following the merge's journal: the records after the router's checkpoint are routed in the order they were", "runs", n)
	}
	j.routing = rt
	return ends, nil
}

// route hands an input fetch to the merge, with those fetched since, and
// routes what the merge gives.
func (j *instance) route(f kafkaio.Fetch) error {
	rt := j.routing
	if rt == nil {
		kafkaio.Recycle(f.Msgs)
		return nil
	}
	// Everything fetched goes into the merge first, as in the single job.
	rt.merge.Push(f, rt.mergeNow(j.Opts.Now()))
	for more := true; more; {
		select {
		case f := <-j.inputFetched:
			rt.merge.Push(f, rt.mergeNow(j.Opts.Now()))
		default:
			more = false
		}
	}
	return j.routeTaken()
}

// routeTaken routes the records the merge gives now: to the tasks this
// instance holds directly, once they may take them so (ownedTask.local),
// and to the others through the repartition topic. The tasks apply what
// they were handed once all are routed, at the same time.
func (j *instance) routeTaken() error {
	rt := j.routing
	if rt == nil {
		return nil
	}
	for _, t := range j.tasks {
		if !t.direct {
			// Whether the router may hand it records reads what it
			// applied: not while it applies.
			if err := j.settleLocal(); err != nil {
				return err
			}
			break
		}
	}
	for {
		if err := j.routeRecords(); err != nil {
			return err
		}
		p, offset, stopped := rt.merge.Stopped()
		if !stopped {
			break
		}
		// Where the former router switched rules.
		for _, v := range rt.switches.At(p, offset) {
			if err := j.routeBy(v); err != nil {
				return err
			}
		}
		if err := j.catchUpRules(); err != nil {
			return err
		}
	}
	j.publishRouter()
	// The tasks apply what they were handed while the loop goes on: the
	// next records are routed meanwhile.
	return j.startLocal()
}

// routeRecords routes the records the merge gives now, up to a stop.
func (j *instance) routeRecords() error {
	rt := j.routing
	recs, arrived, runs := rt.merge.Take(rt.mergeNow(j.Opts.Now()), rt.recs[:0], rt.arrived[:0])
	defer func() {
		clear(recs) // drop the records' bytes
		rt.recs, rt.arrived = recs[:0], arrived[:0]
	}()
	// Durable before any output of these records exists.
	if err := rt.journal.Write(runs); err != nil {
		return err
	}
	now := j.NowMilli()
	for i := range recs {
		rec := &recs[i]
		ev := rt.nextDecoded()
		r := j.router.Route(rec, now, ev)
		switch {
		case r.Invalid != nil:
			j.outMu.Lock()
			j.Out.DLQ(rec.Value, r.Invalid.Error(), &rec.Prov)
			j.outMu.Unlock()
		case r.Late:
			j.outMu.Lock()
			j.Out.Late(rec.Value, r.Message.Before, &rec.Prov)
			j.outMu.Unlock()
		}
		sent := time.UnixMilli(rec.Reference)
		handed := false
		for _, k := range r.Partitions {
			msg := r.Message
			msg.Decider = k == r.Decider
			if t := j.tasks[int(k)]; t != nil && !j.Opts.Testing.HopAll {
				if t.local() {
					t.handed = append(t.handed, localMessage{msg, rec.Reference, ev})
					handed = true
					j.sentLocal++
					continue
				}
				t.throughTopic[rec.Partition] = rec.Prov.Offset
			}
			j.buf = engine.AppendMessage(j.buf[:0], &msg)
			j.hop.Send(j.topics.Repartition, int(k), j.buf, sent)
			j.sentTopic++
		}
		if handed {
			rt.useDecoded()
		}
	}
	return nil
}

// sendMark sends every repartition partition a mark of the watermark, when
// it moved or a heartbeat is due.
func (j *instance) sendMark(nowT time.Time) error {
	rt := j.routing
	if rt == nil {
		return nil
	}
	wm := j.router.Mark(j.NowMilli())
	if wm == rt.markWM && nowT.Sub(rt.markAt) < heartbeatMarks {
		return nil
	}
	rt.markWM, rt.markAt = wm, nowT
	p, last := rt.position()
	mark := engine.Message{Kind: engine.MarkMessage, Partition: p, Offset: last, Watermark: wm}
	return j.broadcast(&mark)
}

// routerRecords returns the records of a router checkpoint with the
// output ends ends, for the routers topic: the checkpoint, and the
// deletions of the journal's entries it covers and of the checkpoints of
// input partitions routed apart, which it replaces. None before the
// first record is read.
func (j *instance) routerRecords(ends []kafkaio.OutputEnd) ([]kafka.Record, error) {
	rt := j.routing
	if rt == nil || len(rt.merge.Offsets()) == 0 {
		return nil, nil
	}
	if err := rt.journal.Checkpoint(rt.merge); err != nil {
		return nil, err
	}
	clocks := j.router.Checkpoint()
	r := checkpoint.Router{Inputs: rt.merge.Inputs(j.Opts.Topic), Rules: rt.version, Clocks: clocks, Outputs: kafkaio.EndOffsets(ends)}
	cp := r.AppendBinary(nil)
	recs := append([]kafka.Record{{Key: kafka.NewBytes([]byte(routerKey)), Value: kafka.NewBytes(cp)}}, rt.runs.drops...)
	for _, p := range rt.apart {
		recs = append(recs, kafka.Record{Key: kafka.NewBytes([]byte(strconv.Itoa(int(p))))})
	}
	return recs, nil
}

// The router's dedupe keeps the event ids it remembers in memory, and
// each router checkpoint writes those taken since the last to the
// router's ids topic first (engine.IDLog: a record per generation of ids),
// then its own record to the routers topic, so that the ids restored never
// lack one of a record before the checkpoint; those of records after it,
// which a checkpoint whose record was not written leaves, the router
// forgets as it restores (engine.Router.Restore).

// idsKeyPrefix starts the keys of the router's ids topic: ids/GEN/G/N,
// with the generation of the ids, the group's generation and a count of
// the records the router wrote.
const idsKeyPrefix = "ids/"

// readRouterIDs reads the router's ids topic into an IDLog, and returns
// the keys of the records of each generation it holds.
func (j *instance) readRouterIDs(ctx context.Context) (*engine.IDLog, engine.IDBlobKeys[string], error) {
	live := map[string][]byte{}
	_, err := kafkaio.ReadRecords(ctx, j.Sec.Dialer(), j.Opts.Brokers, j.topics.RouterIDs, 0, kafka.FirstOffset, func(m *kafka.Message) error {
		if len(m.Value) == 0 {
			delete(live, string(m.Key))
		} else {
			live[string(m.Key)] = m.Value
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("the router's event ids in %s: %w", j.topics.RouterIDs, err)
	}
	ids, keys := engine.NewIDLog(), engine.IDBlobKeys[string]{}
	for _, k := range slices.Sorted(maps.Keys(live)) {
		rest, ok := strings.CutPrefix(k, idsKeyPrefix)
		gen, err := strconv.ParseInt(strings.SplitN(rest, "/", 2)[0], 10, 64)
		if !ok || err != nil {
			continue // not the router's
		}
		keys[gen] = append(keys[gen], k)
		if err := ids.Load(gen, live[k]); err != nil {
			return nil, nil, fmt.Errorf("the router's event ids in %s, %s: %w", j.topics.RouterIDs, k, err)
		}
	}
	return ids, keys, nil
}

// writeRouterIDs writes the event ids the router took since its last
// checkpoint to its ids topic, and deletes those it forgot.
func (j *instance) writeRouterIDs(ctx context.Context) error {
	rt := j.routing
	blobs, forgotten, rewritten := rt.ids.Take()
	deleted, written, keys := rt.idKeys.Next(blobs, forgotten, rewritten, func(b engine.IDBlob) string {
		rt.idBlobs++
		return fmt.Sprintf("%s%d/%d/%d", idsKeyPrefix, b.Gen, j.generation, rt.idBlobs)
	})
	var recs []kafka.Record
	for _, k := range deleted {
		recs = append(recs, kafka.Record{Key: kafka.NewBytes([]byte(k))})
	}
	for i, b := range blobs {
		recs = append(recs, kafka.Record{Key: kafka.NewBytes([]byte(written[i])), Value: kafka.NewBytes(b.Entries)})
	}
	err := j.retry(ctx, "the router's event ids", func(ctx context.Context) error {
		_, err := kafkaio.Produce(ctx, j.client, j.topics.RouterIDs, 0, recs)
		return err
	})
	rt.ids.Done(err == nil)
	if err == nil {
		rt.idKeys = keys
	}
	return err
}

// routerJournal keeps the router's merge journal (job.Journal) in the
// routers topic, each entry a record keyed journal/SEQ, so that whoever
// routes next follows it: the router's checkpoint is there too.
type routerJournal struct {
	j *instance
	// entries are those read when routing began; drops, the deletions of
	// entries the next checkpoint covers, written with it.
	entries map[uint64][]byte
	drops   []kafka.Record
}

// AppendJournal writes entries, retried as a checkpoint's writes are.
func (s *routerJournal) AppendJournal(first uint64, entries [][]byte) error {
	recs := make([]kafka.Record, len(entries))
	for i, e := range entries {
		recs[i] = kafka.Record{Key: kafka.NewBytes(journalKey(first + uint64(i))), Value: kafka.NewBytes(e), Time: s.j.Opts.Now()}
	}
	return s.j.retry(context.Background(), "merge journal", func(ctx context.Context) error {
		_, err := kafkaio.Produce(ctx, s.j.client, s.j.topics.Routers, 0, recs)
		return err
	})
}

// Journal calls fn with the entries read when routing began.
func (s *routerJournal) Journal(fn func(seq uint64, entry []byte) error) error {
	for _, seq := range slices.Sorted(maps.Keys(s.entries)) {
		if err := fn(seq, s.entries[seq]); err != nil {
			return err
		}
	}
	s.entries = nil
	return nil
}

// DropJournal deletes the entries seqs with the next router checkpoint.
func (s *routerJournal) DropJournal(seqs []uint64) error {
	for _, seq := range seqs {
		s.drops = append(s.drops, kafka.Record{Key: kafka.NewBytes(journalKey(seq))})
	}
	return nil
}

// routerWritten notes a router checkpoint written: the deletions it
// carried are done.
func (rt *routing) routerWritten() {
	rt.runs.drops, rt.apart = nil, nil
}

func journalKey(seq uint64) []byte { return strconv.AppendUint([]byte(journalKeyPrefix), seq, 10) }

package engine

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/riskstream/riskstream/internal/corrupt"
)

// IDLog is the store of a dedupe's ids: a Router's (Router.StoreIDs),
// whose checkpoints go to Kafka, and a checkpointing engine's (idBlobs,
// to its state store). The ids taken stay in the dedupe's table, in
// memory, and the IDLog collects them as blobs, one per generation of ids
// since the last checkpoint, for its caller to write out (Take) and to
// read back at a restore (Load), with the generations dedupe forgot, whose
// blobs it deletes. A blob costs a few bytes per id and one record or key
// per checkpoint, where a store of one key per id cost a write, a
// compaction and a changelog record each.
//
// Each entry is an id's hash (16 bytes) and the value dedupe stored with
// it (a uvarint length, then the bytes): the input partition and offset of
// its record, by which a restore forgets the ids of records past the
// checkpoint it restores.
type IDLog struct {
	// pending are the entries taken since the last Take, by generation;
	// taking holds those of the last Take until Done.
	pending, taking map[int64][]byte
	// pre are the ids of the generation before the first watermark, with
	// their values: dedupe moves them to the first generation when the
	// watermark comes (movePre).
	pre map[[2]uint64][]byte
	// forgotten are the generations dedupe forgot since the last Take.
	forgotten map[int64]bool
	// loaded are the entries Load read, until a restore takes them
	// (restore); rewritten says a restore put those it kept in pending,
	// so that the blobs read are to be deleted.
	loaded    map[int64][]byte
	rewritten bool
}

// NewIDLog returns an empty IDLog.
func NewIDLog() *IDLog {
	return &IDLog{pending: map[int64][]byte{}, pre: map[[2]uint64][]byte{}, forgotten: map[int64]bool{}, loaded: map[int64][]byte{}}
}

// PreWatermark is the generation of the ids taken before the first
// watermark. Its blob, unlike the others, holds every such id, and
// replaces the last one written.
const PreWatermark = preWatermark

// IDBlob is ids of one generation to write out, at most IDBlobBytes.
type IDBlob struct {
	Gen     int64
	Entries []byte
}

// IDBlobBytes bounds a blob: a record of a topic whose max.message.bytes
// is Kafka's default takes it.
const IDBlobBytes = 512 << 10

// Take returns the blobs to write at a checkpoint, the generations
// forgotten since the last, whose blobs are to be deleted, and whether a
// restore rewrote every blob read (they are all to be deleted). The blobs
// of PreWatermark hold every id of that generation, and replace those
// written before. Done says whether they were written.
func (l *IDLog) Take() (blobs []IDBlob, forgotten []int64, rewritten bool) {
	l.taking, l.pending = l.pending, map[int64][]byte{}
	for _, g := range slices.Sorted(maps.Keys(l.taking)) {
		blobs = appendBlobs(blobs, g, l.taking[g])
	}
	var pre []byte
	for h, v := range l.pre {
		pre = appendIDEntry(pre, h, v)
	}
	blobs = appendBlobs(blobs, PreWatermark, pre)
	forgotten = slices.Sorted(maps.Keys(l.forgotten))
	return blobs, forgotten, l.rewritten
}

// appendBlobs appends the entries of generation g as blobs of at most
// IDBlobBytes, cut between entries.
func appendBlobs(blobs []IDBlob, g int64, entries []byte) []IDBlob {
	for len(entries) > 0 {
		n := 0
		for n < len(entries) && n < IDBlobBytes {
			l, k := binary.Uvarint(entries[n+16:])
			n += 16 + k + int(l)
		}
		blobs = append(blobs, IDBlob{Gen: g, Entries: entries[:n]})
		entries = entries[n:]
	}
	return blobs
}

// IDBlobKeys are the keys of a store's blobs of ids, by generation: those
// a checkpoint deletes, when their generation is forgotten or a restore
// rewrote them.
type IDBlobKeys[K any] map[int64][]K

// Next returns, for what a Take returned, the keys of the blobs to delete,
// the keys of its blobs (key names each, in order), and the keys once
// both are written. k stays as it is, for a write that fails.
func (k IDBlobKeys[K]) Next(blobs []IDBlob, forgotten []int64, rewritten bool, key func(IDBlob) K) (deleted, written []K, next IDBlobKeys[K]) {
	next = maps.Clone(k)
	if next == nil {
		next = IDBlobKeys[K]{}
	}
	drop := func(g int64) {
		deleted = append(deleted, next[g]...)
		delete(next, g)
	}
	if rewritten {
		forgotten = slices.Sorted(maps.Keys(next))
	}
	for _, g := range forgotten {
		drop(g)
	}
	// The blobs of the generation before the first watermark hold every id
	// of it, and replace those written before.
	drop(PreWatermark)
	for _, b := range blobs {
		kb := key(b)
		written = append(written, kb)
		next[b.Gen] = append(next[b.Gen], kb)
	}
	return deleted, written, next
}

// Done ends a Take: written, what it returned is durable; else it is
// returned again, with what came since, by the next Take.
func (l *IDLog) Done(written bool) {
	if written {
		clear(l.forgotten)
		l.rewritten = false
	} else {
		for g, e := range l.taking {
			if !l.forgotten[g] {
				l.pending[g] = append(e, l.pending[g]...)
			}
		}
	}
	l.taking = nil
}

// Load adds a blob read back, before Router.Restore.
func (l *IDLog) Load(gen int64, entries []byte) error {
	if gen == PreWatermark {
		return l.eachEntry(entries, func(h [2]uint64, v []byte) { l.pre[h] = slices.Clone(v) })
	}
	if err := l.eachEntry(entries, func([2]uint64, []byte) {}); err != nil {
		return err
	}
	l.loaded[gen] = append(l.loaded[gen], entries...)
	return nil
}

// errIDLog reports a blob that does not decode.
var errIDLog = corrupt.Errorf("engine: corrupt blob of event ids")

// eachEntry calls fn with every entry of b.
func (l *IDLog) eachEntry(b []byte, fn func(h [2]uint64, value []byte)) error {
	for len(b) > 0 {
		if len(b) < 16 {
			return errIDLog
		}
		h := [2]uint64{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
		n, k := binary.Uvarint(b[16:])
		if k <= 0 || n > uint64(len(b)-16-k) {
			return errIDLog
		}
		fn(h, b[16+k:16+k+int(n)])
		b = b[16+k+int(n):]
	}
	return nil
}

func appendIDEntry(dst []byte, h [2]uint64, value []byte) []byte {
	dst = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(dst, h[0]), h[1])
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// add notes id h of generation gen taken, with value.
func (l *IDLog) add(gen int64, h [2]uint64, value []byte) {
	if gen == PreWatermark {
		l.pre[h] = slices.Clone(value)
		return
	}
	l.pending[gen] = appendIDEntry(l.pending[gen], h, value)
}

// movePre notes id h, taken before the first watermark, as taken in
// generation gen: dedupe moves those ids to the first generation when the
// watermark comes.
func (l *IDLog) movePre(h [2]uint64, gen int64) {
	v := l.pre[h]
	delete(l.pre, h)
	l.add(gen, h, v)
}

// Forget notes generation gen forgotten: dedupe forgets generations whole.
func (l *IDLog) Forget(gen int64) {
	if gen == PreWatermark {
		clear(l.pre)
		return
	}
	l.forgotten[gen] = true
	delete(l.pending, gen)
}

// restore is dedupe's restore: it calls keep with every id loaded (Load)
// and every id of the generation before the first watermark, in no order,
// forgets those keep rejects, and takes the others as pending, so that the
// next Take writes them again and the blobs read are deleted.
func (l *IDLog) restore(keep func(gen int64, h [2]uint64, value []byte) bool) error {
	loaded := l.loaded
	l.loaded = map[int64][]byte{}
	for _, g := range slices.Sorted(maps.Keys(loaded)) {
		var kept []byte
		if err := l.eachEntry(loaded[g], func(h [2]uint64, v []byte) {
			if keep(g, h, v) {
				kept = appendIDEntry(kept, h, v)
			}
		}); err != nil {
			return err
		}
		if len(kept) > 0 {
			l.pending[g] = append(kept, l.pending[g]...)
		}
	}
	for h, v := range l.pre {
		if !keep(PreWatermark, h, v) {
			delete(l.pre, h)
		}
	}
	l.rewritten = true
	return nil
}

// Package state keeps the job's window state in Pebble. It implements the
// slotstore.Backend the operator's write-back cache spills to, batching
// writes: an evicted slot costs an entry among the pending writes, which
// are committed as one batch when they grow past BatchBytes or on Commit
// (a checkpoint).
package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/internal/prefetch"
)

// Key prefixes partition the keyspace: slot state, metadata such as the
// rules fingerprint, and the journal (docs/format/state.md).
const (
	prefixSlot    = 's'
	prefixMeta    = 'm'
	prefixJournal = 'j'
)

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = errors.New("state: closed")

// Options configure a DB.
type Options struct {
	// Dir is the Pebble directory; it is created if missing. Required.
	Dir string
	// DisableWAL skips Pebble's write-ahead log, for runs whose state need
	// not survive a crash (replay). The default value is false.
	DisableWAL bool
	// BatchBytes is the size at which pending writes are committed. The
	// default value is 8 MiB.
	BatchBytes int
	// AtomicCheckpoints keeps every write pending until Commit, so that the
	// state on disk always matches one checkpoint: a slot evicted between
	// two checkpoints must not become durable before the checkpoint (timers,
	// watermarks, offsets) that goes with it. The live job sets it; replay,
	// which never restores, does not. The default value is false.
	AtomicCheckpoints bool
	// CacheBytes is what Pebble's block cache holds of blocks read from
	// disk, besides the memtables (MemtableBytes). The default value is
	// 64 MiB.
	CacheBytes int64
	// Logger receives Pebble's own messages at debug level. The default
	// value is slog.Default().
	Logger *slog.Logger
	// FS is the filesystem the state is kept in; tests inject faults
	// through it (pebble's vfs/errorfs). The default value is vfs.Default.
	FS vfs.FS
	// WriteErrorGrace is how long Pebble may go on retrying a failed
	// background write (a flush or compaction, which it retries at once)
	// before the DB fails; Health reports the errors from the first. A
	// failed commit or MANIFEST write fails the DB at once. The default
	// value is 5s.
	WriteErrorGrace time.Duration
	// StallTimeout is how long a disk operation, or a commit, may take
	// before the DB fails with ErrDiskStalled. The default value is 20s.
	StallTimeout time.Duration
}

// memtableSize is the size of each of Pebble's memtables, and memtables
// how many a store has at most: one being filled, one being flushed.
const (
	memtableSize = 4 << 20
	memtables    = 2
)

// MemtableBytes is the most each store's memtables hold, beside its block
// cache (Options.CacheBytes).
const MemtableBytes = memtableSize * memtables

// EnsureDefaults fills in zero fields with their default values.
func (o *Options) EnsureDefaults() {
	if o.BatchBytes <= 0 {
		o.BatchBytes = 8 << 20
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.WriteErrorGrace <= 0 {
		o.WriteErrorGrace = 5 * time.Second
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 20 * time.Second
	}
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.Dir == "" {
		return errors.New("state: Options.Dir is required")
	}
	return nil
}

// DB is the Pebble-backed state store. It fails, for good, on a write to
// disk that Pebble cannot complete, a disk that stalls or a corrupt file:
// its operations then return an *Error (ErrDiskFull, ErrDiskStalled,
// ErrWriteFailed, ErrCorrupt), Failed is closed, and the files hold the
// last commit that succeeded.
type DB struct {
	db   *pebble.DB
	opts Options
	m    *monitor
	// readerOpts reads the store's tables apart from Pebble (Verify).
	readerOpts sstable.ReaderOptions
	// own holds the DB's own writes (slots written through the DB, and
	// metadata) not yet committed; each of parts holds its shard's.
	own   buffer
	parts []*Part
	// sorted and tmp are the scratch space of sorting a commit's writes,
	// used by one commit at a time.
	sorted, tmp []sortKey
	// inflight is closed when the commit started by CommitAsync is done;
	// nil when there is none. inflightErr is its result, inflightStart
	// when it started.
	inflight      chan struct{}
	inflightErr   error
	inflightStart time.Time
	// committingSince is when the commit in flight, if any, started, in
	// Unix nanoseconds (zero when none): Health reads it.
	committingSince atomic.Int64
}

// buffer holds writes not yet committed, which reads through it must see:
// those since the last commit (pending), which a commit turns into one
// Pebble batch, and those of the commit CommitAsync has in flight
// (committing), until it is done. The committing goroutine only reads
// their ops and data; reads on the owner's goroutine may build their index
// meanwhile.
type buffer struct {
	pending, committing writes
	key, val            []byte
}

// Part is a share of a DB's slots with writes of its own: a shard of a
// sharded engine writes and reads its slots through one, on its own
// goroutine, while the other shards use theirs. A commit of the DB
// (Commit, CommitAsync) commits every part's writes with the DB's own, in
// one batch: a checkpoint stays atomic. Commits must not run while a part
// is in use. Parts must not share slot keys.
type Part struct {
	d   *DB
	buf buffer
}

// Parts returns n parts of d, made once, before any write. They need
// Options.AtomicCheckpoints: a part's writes are only committed with the
// DB's.
func (d *DB) Parts(n int) ([]*Part, error) {
	if !d.opts.AtomicCheckpoints {
		return nil, errors.New("state: parts need Options.AtomicCheckpoints")
	}
	if d.parts != nil {
		return nil, errors.New("state: parts made twice")
	}
	for range n {
		d.parts = append(d.parts, &Part{d: d})
	}
	return d.parts, nil
}

// buffers returns the DB's buffer and its parts'.
func (d *DB) buffers() []*buffer {
	bs := []*buffer{&d.own}
	for _, p := range d.parts {
		bs = append(bs, &p.buf)
	}
	return bs
}

// Get implements slotstore.Backend, reading through the part's writes.
func (p *Part) Get(key []byte) ([]byte, bool, error) { return p.d.get(&p.buf, key) }

// GetSorted implements slotstore.Backend, as DB.GetSorted.
func (p *Part) GetSorted(keys [][]byte, fn func(i int, value []byte, found bool) error) error {
	return p.d.getSorted(&p.buf, keys, fn)
}

// Set implements slotstore.Backend.
func (p *Part) Set(key, value []byte) error { return p.d.set(&p.buf, key, value, false) }

// Delete implements slotstore.Backend.
func (p *Part) Delete(key []byte) error { return p.d.set(&p.buf, key, nil, true) }

// Seek implements slotstore.Backend, as DB.Seek.
func (p *Part) Seek(start []byte, fn func(key, value []byte) (bool, error)) error {
	return p.d.Seek(start, fn)
}

// writes are the writes of one commit, in the order they were made. They
// are kept out of a Pebble batch until the commit, and the batch is built
// on the committing goroutine, in key order, with only the last write of
// each key: for a large batch Pebble sorts the entries itself, decoding
// both keys at every comparison, which on the event loop was the costliest
// part of a checkpoint; given them in order, it only checks that they are.
// A key written twice between checkpoints (written back ahead, then changed
// again) is committed once.
//
// Reads of pending writes (of slots evicted since the last commit) find
// them through an index built at the first read: a run whose cache holds
// every slot never reads, and a write then costs two appends.
type writes struct {
	ops []op
	// data holds the keys and values back to back.
	data []byte
	// index maps a key to its last write in ops; valid only if indexed.
	index   map[string]int
	indexed bool
}

// op is a pending write of the key data[key:value]: the value
// data[value:end], or a deletion.
type op struct {
	key, value, end int
	deleted         bool
}

func (w *writes) put(key, value []byte, deleted bool) {
	o := op{key: len(w.data), value: len(w.data) + len(key), deleted: deleted}
	w.data = append(append(w.data, key...), value...)
	o.end = len(w.data)
	if w.indexed {
		w.index[string(key)] = len(w.ops)
	}
	w.ops = append(w.ops, o)
}

func (w *writes) key(o op) []byte { return w.data[o.key:o.value] }

// get returns the pending write of key, if any.
func (w *writes) get(key []byte) (value []byte, deleted, ok bool) {
	if w.empty() {
		return nil, false, false
	}
	if !w.indexed {
		if w.index == nil {
			w.index = make(map[string]int, len(w.ops))
		}
		for i, o := range w.ops {
			w.index[string(w.key(o))] = i
		}
		w.indexed = true
	}
	i, ok := w.index[string(key)]
	if !ok {
		return nil, false, false
	}
	o := w.ops[i]
	return w.data[o.value:o.end], o.deleted, true
}

func (w *writes) empty() bool { return len(w.ops) == 0 }

// batchOf returns the last write of each key of ws as a Pebble batch, in
// key order. It only reads the writes' ops and data, so reads may go on
// meanwhile. sorted and tmp are scratch space, returned grown.
func batchOf(db *pebble.DB, ws []*writes, sorted, tmp []sortKey) (*pebble.Batch, []sortKey, []sortKey, error) {
	// A write is numbered across ws: its writes' start plus its index.
	starts := make([]int, len(ws))
	size, n := 0, 0
	for i, w := range ws {
		starts[i] = n
		n += len(w.ops)
		size += len(w.data) + 8*len(w.ops)
	}
	if n > math.MaxInt32 { // sortKey.op; Pebble's batches are smaller anyway
		return nil, sorted, tmp, fmt.Errorf("state: %d writes in one commit, more than 2³¹", n)
	}
	at := func(g int) (*writes, op) {
		i := len(ws) - 1
		for starts[i] > g {
			i--
		}
		return ws[i], ws[i].ops[g-starts[i]]
	}
	keyOf := func(g int) []byte {
		w, o := at(g)
		return w.key(o)
	}
	sorted = sorted[:0]
	for i, w := range ws {
		for k, o := range w.ops {
			sorted = append(sorted, newSortKey(w.key(o), starts[i]+k))
		}
	}
	tmp = sortWrites(sorted, tmp, keyOf)
	// In key order the writes' bytes are read in no order, each a cache
	// miss: they are asked for a group ahead.
	const ahead = 16
	var addrs [2 * ahead]uintptr
	loadWrites := func(from, to int) {
		a := addrs[:0]
		for _, k := range sorted[min(from, len(sorted)):min(to, len(sorted))] {
			if !k.overwritten {
				w, o := at(int(k.op))
				a = append(a, prefetch.Addr(&w.data[o.key]), prefetch.Addr(&w.data[max(o.end-1, o.key)]))
			}
		}
		prefetch.Lines(a)
	}
	b := db.NewBatchWithSize(size)
	loadWrites(0, ahead)
	for i, k := range sorted {
		if i%ahead == 0 {
			loadWrites(i+ahead, i+2*ahead)
		}
		if k.overwritten {
			continue // written again later
		}
		w, o := at(int(k.op))
		key := w.key(o)
		var d *pebble.DeferredBatchOp
		if o.deleted {
			d = b.DeleteDeferred(len(key))
		} else {
			d = b.SetDeferred(len(key), o.end-o.value)
			copy(d.Value, w.data[o.value:o.end])
		}
		copy(d.Key, key)
		if err := d.Finish(); err != nil {
			b.Close()
			return nil, sorted, tmp, err
		}
	}
	return b, sorted, tmp, nil
}

// reset empties w, keeping its memory for the next commit.
func (w *writes) reset() {
	if w.indexed {
		clear(w.index)
		w.indexed = false
	}
	w.ops, w.data = w.ops[:0], w.data[:0]
}

// Open opens (creating if needed) the state database in opts.Dir. A
// folder it creates is owner-only (0700), as are Pebble's files in it. A
// corrupt file found while opening is an ErrCorrupt naming it, and so is a
// file the store needs and lacks (missingFile): Open never takes what is
// left of a store for a new one.
func Open(opts Options) (*DB, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m := newMonitor(opts.Dir, opts.Logger, opts.WriteErrorGrace, opts.StallTimeout)
	// Pebble counts its memtables against the block cache (it reserves
	// their size in it): a cache of CacheBytes alone would hold no block
	// while the memtables take that much, and every read of a filter or
	// data block would go to the file.
	cache := pebble.NewCache(opts.CacheBytes + MemtableBytes)
	defer cache.Unref()
	po := &pebble.Options{
		// WALs written at this format record how far they were synced, so
		// that a corrupt record before that is an error, not taken for
		// the torn end of the last WAL, which Pebble drops silently with
		// every commit after it. A store of an older format moves to it
		// on its first open.
		FormatMajorVersion:          pebble.FormatWALSyncChunks,
		Cache:                       cache,
		MemTableSize:                memtableSize,
		MemTableStopWritesThreshold: memtables,
		DisableWAL:                  opts.DisableWAL,
		Logger:                      pebbleLogger{m},
		EventListener:               m.listener(),
		FS:                          newGuardFS(opts.FS, m),
	}
	// Pebble's disk-health checks report an operation slower than 5s
	// (monitor.diskSlow).
	po.WithFSDefaults()
	// Most reads are for slots that do not exist yet (a key's first event
	// in a window): a Bloom filter per table answers those without
	// searching every table's index and blocks. Deeper levels inherit it.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	// The live job rewrites the state of every active key each second, so
	// most of what is flushed is soon overwritten: compressing it was a
	// large part of the CPU of writing state (BenchmarkCheckpoints), for a
	// store that stays small, and compacting level 0 after every four
	// flushes rewrote each state again and again. Twelve tables per
	// compaction write the survivors once; reads of evicted state, the
	// only reads, are rare and Bloom filters skip most tables.
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	po.L0CompactionThreshold = 12
	po.L0StopWritesThreshold = 36
	if err := missingFile(opts.FS, opts.Dir); err != nil {
		return nil, err
	}
	older := storedFormat(opts.FS, opts.Dir) < po.FormatMajorVersion
	db, err := openPebble(opts.Dir, po, m)
	if err == nil && older {
		// Pebble starts the WAL before it moves the store to the format,
		// so that WAL records no sync offsets: a flush starts another.
		err = db.Flush()
	}
	if ferr := m.failure(); ferr != nil {
		if db != nil {
			(&DB{db: db, opts: opts, m: m}).closeFailed()
		}
		return nil, ferr
	}
	if err != nil {
		if pebble.IsCorruptionError(err) || errors.Is(err, ErrFailed) || missingTable.MatchString(err.Error()) {
			return nil, classify(opts.Dir, err)
		}
		return nil, fmt.Errorf("state: open %s: %w", opts.Dir, err)
	}
	return &DB{db: db, opts: opts, m: m, readerOpts: po.MakeReaderOptions()}, nil
}

// storedFormat returns the format major version of the store in dir, as
// its marker names it (marker.format-version.000007.020), 0 for none.
func storedFormat(fs vfs.FS, dir string) pebble.FormatMajorVersion {
	names, _ := fs.List(dir)
	var v pebble.FormatMajorVersion
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, "marker.format-version."); ok {
			if n, err := strconv.Atoi(rest[strings.LastIndexByte(rest, '.')+1:]); err == nil {
				v = pebble.FormatMajorVersion(n)
			}
		}
	}
	return v
}

// openPebble is pebble.Open, with a panic turned into the store's failure.
func openPebble(dir string, po *pebble.Options, m *monitor) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, m.recovered(r)
		}
	}()
	return pebble.Open(dir, po)
}

// Err returns the failure that stopped the DB (an *Error), or nil while
// it works.
func (d *DB) Err() error { return d.m.failure() }

// Failed is closed when the DB fails.
func (d *DB) Failed() <-chan struct{} { return d.m.failed }

// Health returns nil while the DB works, else what is wrong: its failure;
// background writes failing, which Pebble retries (for up to
// Options.WriteErrorGrace); a disk operation Pebble reports slow; a commit
// in flight for more than a quarter of Options.StallTimeout (5s by
// default). It may be called from any goroutine.
func (d *DB) Health() error {
	if err := d.m.health(); err != nil {
		return err
	}
	if since := d.committingSince.Load(); since != 0 {
		if age := time.Since(time.Unix(0, since)); age > d.opts.StallTimeout/4 {
			return fmt.Errorf("state: a commit to %s has been in flight for %s", d.opts.Dir, age.Round(time.Second))
		}
	}
	return nil
}

// WriteErrors is the number of failed writes Pebble reported: background
// writes it retried, and failed commits. It may be called from any
// goroutine.
func (d *DB) WriteErrors() uint64 { return d.m.writeErrors.Load() }

// usable returns why d cannot be used, if it cannot.
func (d *DB) usable() error {
	if d.db == nil {
		return ErrClosed
	}
	if e := d.m.err.Load(); e != nil {
		return e
	}
	return nil
}

// recover turns a panic in Pebble into d's failure, in *err.
func (d *DB) recover(err *error) {
	if r := recover(); r != nil {
		*err = d.m.recovered(r)
	}
}

// readError is the error of a failed read of Pebble: a corrupt file fails
// d, any other error is wrapped.
func (d *DB) readError(op string, err error) error {
	if pebble.IsCorruptionError(err) {
		return d.m.fail(corruptError(d.opts.Dir, err))
	}
	if e := d.m.err.Load(); e != nil {
		return e
	}
	return fmt.Errorf("state: %s: %w", op, err)
}

func (b *buffer) slotKey(key []byte) []byte {
	b.key = append(append(b.key[:0], prefixSlot), key...)
	return b.key
}

// Get implements slotstore.Backend, reading through the pending writes. The
// value is valid until the next Get.
func (d *DB) Get(key []byte) ([]byte, bool, error) {
	return d.get(&d.own, key)
}

// get reads slot key through b's writes.
func (d *DB) get(b *buffer, key []byte) ([]byte, bool, error) {
	return d.read(b, b.slotKey(key))
}

// pendingGet returns b's write of key not yet committed, if any.
func (b *buffer) pendingGet(key []byte) (value []byte, deleted, ok bool) {
	v, deleted, ok := b.pending.get(key)
	if !ok {
		v, deleted, ok = b.committing.get(key)
	}
	return v, deleted, ok
}

// read reads key (prefixed) through b's writes.
func (d *DB) read(b *buffer, key []byte) (_ []byte, _ bool, err error) {
	if err := d.usable(); err != nil {
		return nil, false, err
	}
	defer d.recover(&err)
	if v, deleted, ok := b.pendingGet(key); ok {
		if deleted {
			return nil, false, nil
		}
		b.val = append(b.val[:0], v...)
		return b.val, true, nil
	}
	// What is not pending is in the database, whether or not the commit
	// in flight is done: it does not touch this key.
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, d.readError("get", err)
	}
	b.val = append(b.val[:0], v...)
	closer.Close()
	return b.val, true, nil
}

// GetSorted implements slotstore.Backend: it reads keys, in increasing
// order, through the pending writes and then one iterator, whose seeks
// forward reuse the blocks and indexes the previous ones loaded, where
// separate Gets would each search every level afresh.
func (d *DB) GetSorted(keys [][]byte, fn func(i int, value []byte, found bool) error) error {
	return d.getSorted(&d.own, keys, fn)
}

func (d *DB) getSorted(b *buffer, keys [][]byte, fn func(i int, value []byte, found bool) error) (err error) {
	if err := d.usable(); err != nil {
		return err
	}
	defer d.recover(&err)
	var it *pebble.Iterator
	defer func() {
		if it != nil {
			if cerr := it.Close(); cerr != nil && err == nil {
				err = d.readError("get", cerr)
			}
		}
	}()
	for i, k := range keys {
		key := b.slotKey(k)
		if v, deleted, ok := b.pendingGet(key); ok {
			if err := fn(i, v, !deleted); err != nil {
				return err
			}
			continue
		}
		if it == nil {
			if it, err = d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixSlot}, UpperBound: []byte{prefixSlot + 1}}); err != nil {
				it = nil
				return d.readError("get", err)
			}
		}
		found := it.SeekGE(key) && bytes.Equal(it.Key(), key)
		var v []byte
		if found {
			if v, err = it.ValueAndErr(); err != nil {
				return d.readError("get", err)
			}
		}
		if err := fn(i, v, found); err != nil {
			return err
		}
	}
	return nil
}

// Set implements slotstore.Backend.
func (d *DB) Set(key, value []byte) error { return d.set(&d.own, key, value, false) }

// Delete implements slotstore.Backend.
func (d *DB) Delete(key []byte) error { return d.set(&d.own, key, nil, true) }

func (d *DB) set(b *buffer, key, value []byte, deleted bool) error {
	if err := d.usable(); err != nil {
		return err
	}
	b.pending.put(b.slotKey(key), value, deleted)
	if b != &d.own {
		return nil // parts need atomic checkpoints
	}
	return d.maybeCommit()
}

// Seek implements slotstore.Backend: it calls fn with the stored slot keys
// from start on and their values, in key order, until fn returns false or an error. It
// reads what is committed (a commit in flight may or may not be seen):
// with atomic checkpoints the pending writes wait for the next one, and
// are not seen; without, it commits them first. fn may write, through any
// buffer.
func (d *DB) Seek(start []byte, fn func(key, value []byte) (bool, error)) (err error) {
	if err := d.usable(); err != nil {
		return err
	}
	if !d.opts.AtomicCheckpoints {
		if err := d.commit(pebble.NoSync); err != nil {
			return err
		}
	}
	defer d.recover(&err)
	it, err := d.db.NewIter(&pebble.IterOptions{
		LowerBound: append([]byte{prefixSlot}, start...), UpperBound: []byte{prefixSlot + 1}})
	if err != nil {
		return d.readError("seek", err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return d.readError("seek", err)
		}
		more, err := fn(it.Key()[1:], v)
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return d.readError("seek", err)
	}
	return nil
}

// SetMeta stores a metadata value (checkpointed offsets, watermarks, the
// rules fingerprint) with the pending writes.
func (d *DB) SetMeta(name string, value []byte) error {
	if err := d.usable(); err != nil {
		return err
	}
	d.own.pending.put(append([]byte{prefixMeta}, name...), value, false)
	return nil
}

// DeleteMeta deletes a metadata value with the pending writes.
func (d *DB) DeleteMeta(name string) error {
	if err := d.usable(); err != nil {
		return err
	}
	d.own.pending.put(append([]byte{prefixMeta}, name...), nil, true)
	return nil
}

// Meta returns a metadata value, or found false.
func (d *DB) Meta(name string) (value []byte, found bool, err error) {
	v, ok, err := d.read(&d.own, append([]byte{prefixMeta}, name...))
	if !ok || err != nil {
		return nil, false, err
	}
	return append([]byte(nil), v...), true, nil
}

func (d *DB) maybeCommit() error {
	if d.opts.AtomicCheckpoints || len(d.own.pending.data) < d.opts.BatchBytes {
		return nil
	}
	return d.commit(pebble.NoSync)
}

// Commit writes the pending writes atomically; sync makes them durable
// before returning (a checkpoint). It returns the DB's failure if the
// commit fails, or has not finished within Options.StallTimeout.
func (d *DB) Commit(sync bool) error {
	if err := d.usable(); err != nil {
		return err
	}
	if sync {
		return d.commit(pebble.Sync)
	}
	return d.commit(pebble.NoSync)
}

// CommitAsync commits the pending writes, synced, on another goroutine and
// starts collecting new ones at once, so that the caller goes on writing
// (and reading) while the disk works: the live job's event loop does not
// stall on a checkpoint's commit and fsync. then runs on that goroutine
// once the commit is durable, or with its error. Commit, CommitAsync, Wait
// and Close wait for the commit in flight, which keeps commits and their
// then calls in order. If the DB fails meanwhile then may never run: the
// commit may be stuck in Pebble for good; Failed tells.
func (d *DB) CommitAsync(then func(error)) {
	if err := d.Wait(); err != nil {
		then(err)
		return
	}
	// The writes of the previous commit, done and reset by Wait, take the
	// new ones.
	var ws []*writes
	for _, b := range d.buffers() {
		b.committing, b.pending = b.pending, b.committing
		ws = append(ws, &b.committing)
	}
	done := make(chan struct{})
	d.inflight, d.inflightStart = done, d.startCommit()
	go func() {
		defer close(done)
		err := d.commitWrites(ws, pebble.Sync)
		d.inflightErr = err
		then(err)
	}()
}

// Wait waits for the commit in flight, if any, and returns its error. The
// error stays: after a failed commit nothing more is committed, since a
// later batch without the lost one would not be a checkpoint. It returns
// the DB's failure as soon as the DB fails, and fails the DB if the commit
// has not finished within Options.StallTimeout: it never waits longer.
func (d *DB) Wait() error {
	if err := d.usable(); err != nil {
		return err
	}
	if d.inflight != nil {
		if err := d.await(d.inflight, d.inflightStart); err != nil {
			return err
		}
		d.inflight = nil
		if d.inflightErr == nil {
			for _, b := range d.buffers() {
				b.committing.reset()
			}
		}
	}
	return d.inflightErr
}

// await waits until done is closed, the DB fails, or the commit started at
// start has taken Options.StallTimeout, which fails the DB.
func (d *DB) await(done <-chan struct{}, start time.Time) error {
	select {
	case <-done:
		return nil
	default:
	}
	stall := time.NewTimer(time.Until(start.Add(d.opts.StallTimeout)))
	defer stall.Stop()
	select {
	case <-done:
		return nil
	case <-d.m.failed:
		return d.m.failure()
	case <-stall.C:
		return d.m.fail(&Error{Kind: ErrDiskStalled, Path: d.opts.Dir,
			Detail: fmt.Sprintf("a commit has not finished in %s", d.opts.StallTimeout)})
	}
}

// startCommit marks a commit in flight from now, for Health.
func (d *DB) startCommit() time.Time {
	now := time.Now()
	d.committingSince.Store(now.UnixNano())
	return now
}

// commit commits the pending writes on another goroutine, so that a commit
// stuck in Pebble (a disk that does not answer) cannot hold the caller
// beyond the DB's failure.
func (d *DB) commit(o *pebble.WriteOptions) error {
	if err := d.Wait(); err != nil {
		return err
	}
	if d.pendingEmpty() {
		return nil
	}
	var ws []*writes
	for _, b := range d.buffers() {
		ws = append(ws, &b.pending)
	}
	done := make(chan struct{})
	var err error
	start := d.startCommit()
	go func() {
		defer close(done)
		err = d.commitWrites(ws, o)
	}()
	if err := d.await(done, start); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	for _, b := range d.buffers() {
		b.pending.reset()
	}
	return nil
}

// pendingEmpty reports whether no write waits for a commit.
func (d *DB) pendingEmpty() bool {
	for _, b := range d.buffers() {
		if !b.pending.empty() {
			return false
		}
	}
	return true
}

// commitWrites commits ws to Pebble as one batch. A commit Pebble fails
// fails d: Pebble's commit pipeline is not usable after it.
func (d *DB) commitWrites(ws []*writes, o *pebble.WriteOptions) (err error) {
	defer d.committingSince.Store(0)
	empty := true
	for _, w := range ws {
		empty = empty && w.empty()
	}
	if empty {
		return nil
	}
	defer d.recover(&err)
	var b *pebble.Batch
	b, d.sorted, d.tmp, err = batchOf(d.db, ws, d.sorted, d.tmp)
	if err != nil {
		return fmt.Errorf("state: batch: %w", err)
	}
	err = b.Commit(o)
	// Pebble reports a failed WAL write with Fatalf, then returns nil.
	if ferr := d.m.failure(); ferr != nil {
		return ferr
	}
	if err != nil {
		b.Close()
		return d.m.commitFailed(err)
	}
	if err := b.Close(); err != nil {
		return fmt.Errorf("state: close batch: %w", err)
	}
	return nil
}

// Flush writes what is committed out of Pebble's memtables (and WAL) into
// tables on disk and waits for it. The job never needs it, Pebble flushes
// as memtables fill; tests use it to lay out files.
func (d *DB) Flush() (err error) {
	if err := d.Wait(); err != nil {
		return err
	}
	defer d.recover(&err)
	if err := d.db.Flush(); err != nil {
		return d.readError("flush", err)
	}
	return d.Err()
}

// DiskBytes is the size of the database on disk, for metrics; 0 once
// closed or failed.
func (d *DB) DiskBytes() uint64 {
	if d.usable() != nil {
		return 0
	}
	return d.db.Metrics().DiskSpaceUsage()
}

// Close commits pending writes and closes the database; with
// Options.AtomicCheckpoints it drops them instead: they belong to a
// checkpoint that was not taken (a stop that gave up on it), and committed
// they would put the state past the offsets of the last checkpoint, so
// that a restart counted their events twice. A failed DB is closed as far
// as Pebble manages within a few seconds, and Close returns its failure.
func (d *DB) Close() (err error) {
	if d.db == nil {
		return ErrClosed
	}
	if d.opts.AtomicCheckpoints {
		err = d.Wait() // the commit in flight, if any, is a checkpoint's
	} else {
		err = d.commit(pebble.NoSync)
	}
	if d.Err() != nil {
		return d.closeFailed()
	}
	defer func() { d.db = nil }()
	defer d.m.close()
	defer d.recover(&err)
	if cerr := d.db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("state: close: %w", cerr)
	}
	if ferr := d.Err(); ferr != nil {
		return ferr
	}
	return err
}

// closeFailed closes a failed DB as far as Pebble manages, which releases
// its lock. A commit stuck in Pebble (in a write stall behind flushes that
// fail, or on a disk that does not answer) holds locks Pebble's Close
// takes, so it is not tried then, and otherwise given closeTimeout. The
// process's exit releases what is left.
func (d *DB) closeFailed() error {
	db := d.db
	d.db = nil
	d.m.close()
	if d.committingSince.Load() != 0 {
		return d.Err()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { recover() }()
		db.Close()
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	return d.Err()
}

// Changes calls fn with the last pending write of every key, in the order
// of those last writes, as the store's own keys (slots and metadata alike,
// not the journal; value nil for a deletion): what the next Commit makes
// durable, for a copy of the checkpoint elsewhere (a distributed job's
// changelog topic). Load writes them into another store.
func (d *DB) Changes(fn func(key, value []byte) error) error {
	if err := d.usable(); err != nil {
		return err
	}
	for _, b := range d.buffers() {
		w := &b.pending
		if w.empty() {
			continue
		}
		for i, o := range w.ops {
			if last, ok := w.lastOf(w.key(o)); ok && last != i {
				continue // written again later
			}
			if w.key(o)[0] == prefixJournal {
				continue // what this store's job did, not its state
			}
			var v []byte
			if !o.deleted {
				v = w.data[o.value:o.end]
			}
			if err := fn(w.key(o), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// lastOf returns the index of the last pending write of key.
func (w *writes) lastOf(key []byte) (int, bool) {
	if _, _, ok := w.get(key); !ok {
		return 0, false
	}
	return w.index[string(key)], true
}

// AppendJournal writes entries to the journal durably before it returns,
// apart from the pending writes, under the sequence numbers from first
// on: what a job must know after a crash of what it did since its last
// checkpoint, before any output that depends on it leaves (the order a
// merge took when it went on without a partition). DropJournal deletes
// entries with a checkpoint.
func (d *DB) AppendJournal(first uint64, entries [][]byte) (err error) {
	if err := d.usable(); err != nil {
		return err
	}
	defer d.recover(&err)
	b := d.db.NewBatch()
	for i, e := range entries {
		if err := b.Set(journalKey(first+uint64(i)), e, nil); err != nil {
			b.Close()
			return fmt.Errorf("state: journal: %w", err)
		}
	}
	err = b.Commit(pebble.Sync)
	if ferr := d.m.failure(); ferr != nil {
		return ferr
	}
	if err != nil {
		b.Close()
		return d.m.commitFailed(err)
	}
	return b.Close()
}

// Journal calls fn with every journal entry stored, in sequence order.
func (d *DB) Journal(fn func(seq uint64, entry []byte) error) (err error) {
	if err := d.usable(); err != nil {
		return err
	}
	defer d.recover(&err)
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixJournal}, UpperBound: []byte{prefixJournal + 1}})
	if err != nil {
		return d.readError("journal", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 9 {
			it.Close()
			return corrupt.Errorf("state: journal: a key of %d bytes, not 9", len(k))
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return d.readError("journal", err)
		}
		if err := fn(binary.BigEndian.Uint64(k[1:]), v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return d.readError("journal", err)
	}
	return nil
}

// DropJournal deletes the journal entries seqs with the pending writes:
// a checkpoint that covers them.
func (d *DB) DropJournal(seqs []uint64) error {
	if err := d.usable(); err != nil {
		return err
	}
	for _, seq := range seqs {
		d.own.pending.put(journalKey(seq), nil, true)
	}
	return nil
}

func journalKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixJournal}, seq)
}

// Load adds a write of key, one of the store's own keys as Changes gave
// it, to the pending writes (a deletion when value is nil): restoring a
// copy of another store's checkpoints.
func (d *DB) Load(key, value []byte) error {
	if err := d.usable(); err != nil {
		return err
	}
	if len(key) == 0 || key[0] != prefixSlot && key[0] != prefixMeta {
		return fmt.Errorf("state: load of key %q, which is not a store's", key)
	}
	d.own.pending.put(key, value, value == nil)
	return d.maybeCommit()
}

// Stored returns the value of key, one of the store's own keys as Changes
// gives them, reading through the pending writes, or found false.
func (d *DB) Stored(key []byte) (value []byte, found bool, err error) {
	v, ok, err := d.read(&d.own, key)
	if !ok || err != nil {
		return nil, false, err
	}
	return append([]byte(nil), v...), true, nil
}

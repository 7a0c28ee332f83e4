// Package state keeps the job's window state in Pebble. It implements the
// windows.Backend the operator's write-back cache spills to, batching
// writes: an evicted slot costs an entry among the pending writes, which
// are committed as one batch when they grow past BatchBytes or on Commit
// (a checkpoint).
package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// Key prefixes partition the keyspace: slot state, and metadata such as the
// rules fingerprint (docs/format/state.md).
const (
	prefixSlot = 's'
	prefixMeta = 'm'
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
	// CacheBytes is Pebble's block cache size. The default value is 64 MiB.
	CacheBytes int64
	// Logger receives Pebble's own messages at debug level. The default
	// value is slog.Default().
	Logger *slog.Logger
}

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
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.Dir == "" {
		return errors.New("state: Options.Dir is required")
	}
	return nil
}

// DB is the Pebble-backed state store.
type DB struct {
	db   *pebble.DB
	opts Options
	// pending holds the writes since the last commit, which reads must
	// see; a commit turns them into one Pebble batch.
	pending writes
	// committing holds the writes CommitAsync is committing, which reads
	// must see until the commit is done. Its goroutine reads their ops and
	// data and sorts in scratch space of its own (sorted, tmp); reads on
	// the owner's goroutine may build their index meanwhile.
	committing writes
	key        []byte
	val        []byte
	// inflight is closed when the commit started by CommitAsync is done;
	// nil when there is none. inflightErr is its result.
	inflight    chan struct{}
	inflightErr error
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
	// sorted and tmp are the scratch space of sorting.
	sorted, tmp []sortKey
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

// batch returns the last write of each key as a Pebble batch, in key
// order. It only reads w's ops and data, so reads may go on meanwhile.
func (w *writes) batch(db *pebble.DB) (*pebble.Batch, error) {
	w.sorted = w.sorted[:0]
	for i, o := range w.ops {
		w.sorted = append(w.sorted, newSortKey(w.key(o), i))
	}
	w.tmp = sortWrites(w.sorted, w.tmp, func(op int) []byte { return w.key(w.ops[op]) })
	b := db.NewBatchWithSize(len(w.data) + 8*len(w.ops))
	for i, k := range w.sorted {
		o := w.ops[k.op]
		key := w.key(o)
		if i+1 < len(w.sorted) && bytes.Equal(key, w.key(w.ops[w.sorted[i+1].op])) {
			continue // written again later
		}
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
			return nil, err
		}
	}
	return b, nil
}

// reset empties w, keeping its memory for the next commit.
func (w *writes) reset() {
	if w.indexed {
		clear(w.index)
		w.indexed = false
	}
	w.ops, w.data, w.sorted = w.ops[:0], w.data[:0], w.sorted[:0]
}

// Open opens (creating if needed) the state database in opts.Dir.
func Open(opts Options) (*DB, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	po := &pebble.Options{
		Cache:      cache,
		DisableWAL: opts.DisableWAL,
		Logger:     pebbleLogger{opts.Logger},
	}
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
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", opts.Dir, err)
	}
	return &DB{db: db, opts: opts}, nil
}

func (d *DB) slotKey(key []byte) []byte {
	d.key = append(append(d.key[:0], prefixSlot), key...)
	return d.key
}

// Get implements windows.Backend, reading through the pending writes. The
// value is valid until the next Get.
func (d *DB) Get(key []byte) ([]byte, bool, error) {
	return d.get(d.slotKey(key))
}

func (d *DB) get(key []byte) ([]byte, bool, error) {
	if d.db == nil {
		return nil, false, ErrClosed
	}
	v, deleted, ok := d.pending.get(key)
	if !ok {
		v, deleted, ok = d.committing.get(key)
	}
	if ok {
		if deleted {
			return nil, false, nil
		}
		d.val = append(d.val[:0], v...)
		return d.val, true, nil
	}
	// What is not pending is in the database, whether or not the commit
	// in flight is done: it does not touch this key.
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: get: %w", err)
	}
	d.val = append(d.val[:0], v...)
	closer.Close()
	return d.val, true, nil
}

// Set implements windows.Backend.
func (d *DB) Set(key, value []byte) error {
	if d.db == nil {
		return ErrClosed
	}
	d.pending.put(d.slotKey(key), value, false)
	return d.maybeCommit()
}

// Delete implements windows.Backend.
func (d *DB) Delete(key []byte) error {
	if d.db == nil {
		return ErrClosed
	}
	d.pending.put(d.slotKey(key), nil, true)
	return d.maybeCommit()
}

// Scan implements windows.Backend: it calls fn with every stored slot's
// key and value, in key order. It reads what is committed, and so refuses
// to run while writes are pending: it is for restoring, before any write.
func (d *DB) Scan(fn func(key, value []byte) error) error {
	if d.db == nil {
		return ErrClosed
	}
	if !d.pending.empty() || d.inflight != nil {
		return errors.New("state: scan with uncommitted writes")
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixSlot}, UpperBound: []byte{prefixSlot + 1}})
	if err != nil {
		return fmt.Errorf("state: scan: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = fn(it.Key()[1:], v)
		}
		if err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: scan: %w", err)
	}
	return nil
}

// SetMeta stores a metadata value (checkpointed offsets, watermarks, the
// rules fingerprint) with the pending writes.
func (d *DB) SetMeta(name string, value []byte) error {
	if d.db == nil {
		return ErrClosed
	}
	d.pending.put(append([]byte{prefixMeta}, name...), value, false)
	return nil
}

// Meta returns a metadata value, or found false.
func (d *DB) Meta(name string) (value []byte, found bool, err error) {
	v, ok, err := d.get(append([]byte{prefixMeta}, name...))
	if !ok || err != nil {
		return nil, false, err
	}
	return append([]byte(nil), v...), true, nil
}

func (d *DB) maybeCommit() error {
	if d.opts.AtomicCheckpoints || len(d.pending.data) < d.opts.BatchBytes {
		return nil
	}
	return d.commit(pebble.NoSync)
}

// Commit writes the pending writes atomically; sync makes them durable
// before returning (a checkpoint).
func (d *DB) Commit(sync bool) error {
	if d.db == nil {
		return ErrClosed
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
// then calls in order.
func (d *DB) CommitAsync(then func(error)) {
	if err := d.Wait(); err != nil {
		then(err)
		return
	}
	// The writes of the previous commit, done and reset by Wait, take the
	// new ones.
	d.committing, d.pending = d.pending, d.committing
	w := &d.committing
	done := make(chan struct{})
	d.inflight = done
	go func() {
		defer close(done)
		err := commitWrites(d.db, w, pebble.Sync)
		d.inflightErr = err
		then(err)
	}()
}

// Wait waits for the commit in flight, if any, and returns its error. The
// error stays: after a failed commit nothing more is committed, since a
// later batch without the lost one would not be a checkpoint.
func (d *DB) Wait() error {
	if d.db == nil {
		return ErrClosed
	}
	if d.inflight != nil {
		<-d.inflight
		d.inflight = nil
		if d.inflightErr == nil {
			d.committing.reset()
		}
	}
	return d.inflightErr
}

func (d *DB) commit(o *pebble.WriteOptions) error {
	if err := d.Wait(); err != nil {
		return err
	}
	if err := commitWrites(d.db, &d.pending, o); err != nil {
		return err
	}
	d.pending.reset()
	return nil
}

// commitWrites commits w to db as one batch.
func commitWrites(db *pebble.DB, w *writes, o *pebble.WriteOptions) error {
	if w.empty() {
		return nil
	}
	b, err := w.batch(db)
	if err != nil {
		return fmt.Errorf("state: batch: %w", err)
	}
	if err := b.Commit(o); err != nil {
		b.Close()
		return fmt.Errorf("state: commit: %w", err)
	}
	if err := b.Close(); err != nil {
		return fmt.Errorf("state: close batch: %w", err)
	}
	return nil
}

// DiskBytes is the size of the database on disk, for metrics.
func (d *DB) DiskBytes() uint64 {
	if d.db == nil {
		return 0
	}
	return d.db.Metrics().DiskSpaceUsage()
}

// Close commits pending writes and closes the database.
func (d *DB) Close() error {
	if d.db == nil {
		return ErrClosed
	}
	err := d.commit(pebble.NoSync)
	if cerr := d.db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("state: close: %w", cerr)
	}
	d.db = nil
	return err
}

// pebbleLogger sends Pebble's messages to slog at debug level; Fatalf is
// Pebble reporting corruption, which it expects to end the process.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}

// Package state keeps the job's window state in Pebble. It implements the
// windows.Backend the operator's write-back cache spills to, batching
// writes: an evicted slot costs an entry in a batch, and the batch is
// committed when it grows past BatchBytes or on Commit (a checkpoint).
package state

import (
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
	db    *pebble.DB
	opts  Options
	batch *pebble.Batch
	// pending holds the batch's writes by key, for reads. A map costs
	// about half of what Pebble's indexed batch spent keeping its skiplist
	// sorted, which was most of a checkpoint's time on the event loop.
	pending map[string]write
	// committing holds the writes of the batch CommitAsync is committing,
	// which reads must see until the commit is done.
	committing map[string]write
	key        []byte
	val        []byte
	// inflight is closed when the commit started by CommitAsync is done;
	// nil when there is none. inflightErr is its result.
	inflight    chan struct{}
	inflightErr error
}

// write is a pending write: a value, or a deletion.
type write struct {
	value   []byte
	deleted bool
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
	// fifth of the CPU of writing state (BenchmarkCheckpoints), for a
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
	return &DB{db: db, opts: opts, batch: db.NewBatch(), pending: map[string]write{}}, nil
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
	w, ok := d.pending[string(key)]
	if !ok {
		w, ok = d.committing[string(key)]
	}
	if ok {
		if w.deleted {
			return nil, false, nil
		}
		d.val = append(d.val[:0], w.value...)
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
	if err := d.set(d.slotKey(key), value); err != nil {
		return err
	}
	return d.maybeCommit()
}

func (d *DB) set(key, value []byte) error {
	if d.db == nil {
		return ErrClosed
	}
	if err := d.batch.Set(key, value, nil); err != nil {
		return fmt.Errorf("state: set: %w", err)
	}
	d.pending[string(key)] = write{value: append([]byte(nil), value...)}
	return nil
}

// Delete implements windows.Backend.
func (d *DB) Delete(key []byte) error {
	if d.db == nil {
		return ErrClosed
	}
	k := d.slotKey(key)
	if err := d.batch.Delete(k, nil); err != nil {
		return fmt.Errorf("state: delete: %w", err)
	}
	d.pending[string(k)] = write{deleted: true}
	return d.maybeCommit()
}

// SetMeta stores a metadata value (checkpointed offsets, watermarks, the
// rules fingerprint) in the pending batch.
func (d *DB) SetMeta(name string, value []byte) error {
	return d.set(append([]byte{prefixMeta}, name...), value)
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
	if d.opts.AtomicCheckpoints || d.batch.Len() < d.opts.BatchBytes {
		return nil
	}
	return d.commit(pebble.NoSync)
}

// Commit writes the pending batch atomically; sync makes it durable before
// returning (a checkpoint).
func (d *DB) Commit(sync bool) error {
	if d.db == nil {
		return ErrClosed
	}
	if sync {
		return d.commit(pebble.Sync)
	}
	return d.commit(pebble.NoSync)
}

// CommitAsync commits the pending batch, synced, on another goroutine and
// starts a new batch at once, so that the caller goes on writing (and
// reading) while the disk works: the live job's event loop does not stall
// on a checkpoint's commit and fsync. then runs on that goroutine once the
// commit is durable, or with its error. Commit, CommitAsync, Wait and Close
// wait for the commit in flight, which keeps commits and their then calls
// in order.
func (d *DB) CommitAsync(then func(error)) {
	if err := d.Wait(); err != nil {
		then(err)
		return
	}
	b := d.batch
	d.batch = d.db.NewBatch()
	// The map of the previous commit, done and cleared by Wait, is reused.
	d.committing, d.pending = d.pending, d.committing
	if d.pending == nil {
		d.pending = map[string]write{}
	}
	done := make(chan struct{})
	d.inflight = done
	go func() {
		defer close(done)
		err := b.Commit(pebble.Sync)
		if err != nil {
			err = fmt.Errorf("state: commit: %w", err)
		} else if err = b.Close(); err != nil {
			err = fmt.Errorf("state: close batch: %w", err)
		}
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
			clear(d.committing)
		}
	}
	return d.inflightErr
}

func (d *DB) commit(o *pebble.WriteOptions) error {
	if err := d.Wait(); err != nil {
		return err
	}
	if d.batch.Empty() {
		return nil
	}
	if err := d.batch.Commit(o); err != nil {
		return fmt.Errorf("state: commit: %w", err)
	}
	if err := d.batch.Close(); err != nil {
		return fmt.Errorf("state: close batch: %w", err)
	}
	d.batch = d.db.NewBatch()
	clear(d.pending)
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
	d.batch.Close()
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

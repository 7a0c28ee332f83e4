package state

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/sstable"
)

// Verify reads every table of the store, one at a time, and checks the
// checksum of each of its blocks, which Pebble checks only when it reads
// a block: a corrupt block of state the job rarely reads would otherwise
// go unnoticed for hours after a start that reported healthy. done is
// called after each table with how many of how many were checked. A
// corrupt table fails the DB, as a read of it would, and Verify returns
// that failure; a table a compaction removed meanwhile is skipped, its
// keys being in the tables that replaced it. It may run beside the job's
// use of the DB, but not beside Close: cancel ctx and wait for it first.
func (d *DB) Verify(ctx context.Context, done func(checked, tables int)) error {
	if err := d.usable(); err != nil {
		return err
	}
	levels, err := d.db.SSTables()
	if err != nil {
		return fmt.Errorf("state: list tables: %w", err)
	}
	var paths []string
	seen := map[uint64]bool{} // virtual tables share their backing file
	for _, level := range levels {
		for _, t := range level {
			if n := uint64(t.BackingSSTNum); !seen[n] {
				seen[n] = true
				paths = append(paths, d.opts.FS.PathJoin(d.opts.Dir, fmt.Sprintf("%06d.sst", n)))
			}
		}
	}
	for i, path := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := d.verifyTable(ctx, path); err != nil {
			if e := new(Error); errors.As(err, &e) {
				return d.m.fail(e)
			}
			return err
		}
		if done != nil {
			done(i+1, len(paths))
		}
	}
	return nil
}

// verifyTable checks the checksums of the table at path.
func (d *DB) verifyTable(ctx context.Context, path string) error {
	f, err := d.opts.FS.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // compacted away since it was listed
	}
	if err != nil {
		return fmt.Errorf("state: verify %s: %w", path, err)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("state: verify %s: %w", path, err)
	}
	r, err := sstable.NewReader(ctx, readable, d.readerOpts)
	if err == nil {
		err = r.ValidateBlockChecksums()
		r.Close()
	} else {
		readable.Close()
	}
	if err != nil {
		return corruptError(d.opts.Dir, fmt.Errorf("%s: %w", path, err))
	}
	return nil
}

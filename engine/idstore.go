package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/riskstream/riskstream/internal/corrupt"

	"github.com/riskstream/riskstream/windows/slotstore"
)

// idBlobs keeps the ids a checkpointing engine's dedupe remembers in its
// state store, as blobs: an IDLog collects the ids as they are taken, in
// memory, and each checkpoint writes those taken since the last, one
// blob per generation (write), and deletes the blobs of the generations
// dedupe forgot. So taking an id costs an append, and a rotation deletes a
// few keys: a key per id cost a write and a compaction each, and a
// rotation that deleted half a million of them held the loop for tens of
// milliseconds. A restore reads the blobs back (load), and the ids a
// store of an earlier version keeps one key each, which the first
// checkpoint after it writes as blobs and deletes.
type idBlobs struct {
	log   *IDLog
	store slotstore.Backend
	// keys are the keys of the stored blobs, and of ids stored one key
	// each, by generation.
	keys IDBlobKeys[[]byte]
	// seq numbers the blobs, so that each has a key of its own.
	seq uint64
}

// idBlobPrefix starts the keys of the blobs of ids in a store: the spec id
// 0xfffd, which no rule or heatmap has, before the ids stored one key each
// (idPrefix) and the timer entries (docs/format/state.md).
var idBlobPrefix = []byte{0xff, 0xfd}

// idBlobKeyLen is the length of a blob's key: idBlobPrefix, the
// generation and the blob's number.
const idBlobKeyLen = 2 + 8 + 8

func newIDBlobs(store slotstore.Backend) *idBlobs {
	return &idBlobs{log: NewIDLog(), store: store, keys: IDBlobKeys[[]byte]{}}
}

// write writes the ids taken since the last write as blobs, and deletes
// the blobs forgotten, or every blob read by a restore (which took the ids
// it kept as taken anew), in the store's next commit.
func (s *idBlobs) write() error {
	blobs, forgotten, rewritten := s.log.Take()
	// The log's blobs are written now: a checkpoint whose commit fails
	// stops the job.
	defer s.log.Done(true)
	deleted, written, next := s.keys.Next(blobs, forgotten, rewritten, func(b IDBlob) []byte {
		s.seq++
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(slices.Clone(idBlobPrefix), uint64(b.Gen)), s.seq)
	})
	s.keys = next
	for _, k := range deleted {
		if err := s.store.Delete(k); err != nil {
			return fmt.Errorf("engine: forget event ids: %w", err)
		}
	}
	for i, b := range blobs {
		if err := s.store.Set(written[i], b.Entries); err != nil {
			return fmt.Errorf("engine: remember event ids: %w", err)
		}
	}
	return nil
}

// load reads the stored blobs into the log, and the ids stored one key
// each, before dedupe's restore takes them from the log.
func (s *idBlobs) load() error {
	err := s.store.Seek(idBlobPrefix, func(k, v []byte) (bool, error) {
		if bytes.HasPrefix(k, idBlobPrefix) {
			if len(k) != idBlobKeyLen {
				return false, corrupt.Errorf("engine: a key of event ids of %d bytes, want %d", len(k), idBlobKeyLen)
			}
			gen := int64(binary.BigEndian.Uint64(k[2:]))
			s.seq = max(s.seq, binary.BigEndian.Uint64(k[10:]))
			s.keys[gen] = append(s.keys[gen], slices.Clone(k))
			return true, s.log.Load(gen, v)
		}
		gen, h, ok := parseIDKey(k)
		if !ok {
			return false, nil
		}
		s.keys[gen] = append(s.keys[gen], slices.Clone(k))
		return true, s.log.Load(gen, appendIDEntry(nil, h, v))
	})
	if err != nil {
		return fmt.Errorf("engine: restore event ids: %w", err)
	}
	return nil
}

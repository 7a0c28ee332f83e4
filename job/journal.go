package job

import (
	"fmt"

	"github.com/riskstream/riskstream/order"
)

// The order in which the live job takes the records of its partitions
// depends on timing only where a partition wait ran out (order.Run). A job
// restarted from a checkpoint reads its partitions again and, to make the
// outputs it wrote after the checkpoint byte for byte again (which the
// sink then recognises: sink.Written), must take them in the same order.
// So the runs the merge took without partitions are journaled, durably,
// before any output of theirs leaves; a checkpoint deletes those it
// covers, and a restart follows those left.

// JournalStore keeps the journal's entries durably, beside the state:
// state.DB is one.
type JournalStore interface {
	// AppendJournal stores entries under the sequence numbers from first
	// on, durably when it returns.
	AppendJournal(first uint64, entries [][]byte) error
	// Journal calls fn with every entry stored, in sequence order.
	Journal(fn func(seq uint64, entry []byte) error) error
	// DropJournal deletes the entries seqs with the next commit.
	DropJournal(seqs []uint64) error
}

// Follower is what a Journal journals the runs of: a Merge, or the Loop
// around one.
type Follower interface {
	Follow(runs []order.Run)
	Following() []order.Run
}

// Journal keeps the merge's runs in a JournalStore.
type Journal struct {
	db JournalStore
	// next is the sequence number of the next entry; stored are those
	// stored that the next checkpoint covers.
	next   uint64
	stored []uint64
	buf    [][]byte
}

// NewJournal returns the journal kept in db.
func NewJournal(db JournalStore) *Journal { return &Journal{db: db} }

// Load reads the runs a run before this one journaled after the
// checkpoint restored, for l to follow, and returns how many.
func (mj *Journal) Load(l Follower) (int, error) {
	var runs []order.Run
	err := mj.db.Journal(func(seq uint64, entry []byte) error {
		r, err := order.DecodeRun(entry)
		if err != nil {
			return fmt.Errorf("merge journal entry %d: %w", seq, err)
		}
		runs = append(runs, r)
		mj.stored = append(mj.stored, seq)
		mj.next = seq + 1
		return nil
	})
	if err != nil {
		return 0, err
	}
	l.Follow(runs)
	return len(runs), nil
}

// Write journals runs durably.
func (mj *Journal) Write(runs []order.Run) error {
	if len(runs) == 0 {
		return nil
	}
	mj.buf = mj.buf[:0]
	for i := range runs {
		mj.buf = append(mj.buf, runs[i].AppendBinary(nil))
		mj.stored = append(mj.stored, mj.next+uint64(i))
	}
	if err := mj.db.AppendJournal(mj.next, mj.buf); err != nil {
		return fmt.Errorf("merge journal: %w", err)
	}
	mj.next += uint64(len(runs))
	return nil
}

// Checkpoint adds to the checkpoint's pending writes the deletion of the
// entries it covers. The runs l follows but has not taken yet are
// journaled again, from where its merge is: they lie past the checkpoint.
func (mj *Journal) Checkpoint(l Follower) error {
	covered := mj.stored
	mj.stored = nil
	if err := mj.Write(l.Following()); err != nil {
		return err
	}
	if err := mj.db.DropJournal(covered); err != nil {
		return fmt.Errorf("merge journal: %w", err)
	}
	return nil
}

package stream

import (
	"fmt"

	"github.com/riskstream/riskstream/order"
	"github.com/riskstream/riskstream/state"
	"github.com/segmentio/kafka-go"
)

// The order in which the live job takes the records of its partitions
// depends on timing only where a partition wait ran out (order.Run). A job
// restarted from a checkpoint reads its partitions again and, to make the
// outputs it wrote after the checkpoint byte for byte again (which the
// sink then recognises: sink.Written), must take them in the same order.
// So the runs the merge took without partitions are journaled, durably,
// before any output of theirs leaves; a checkpoint deletes those it
// covers, and a restart follows those left.

// mergeJournal keeps the merge's runs in the state store's journal.
type mergeJournal struct {
	db *state.DB
	// next is the sequence number of the next entry; stored are those
	// stored that the next checkpoint covers.
	next   uint64
	stored []uint64
	buf    [][]byte
}

// load reads the runs a run before this one journaled after the
// checkpoint restored, for merge to follow, and returns how many.
func (mj *mergeJournal) load(merge *order.Merger[kafka.Message]) (int, error) {
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
	merge.Follow(runs)
	return len(runs), nil
}

// write journals runs durably.
func (mj *mergeJournal) write(runs []order.Run) error {
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

// checkpoint adds to the checkpoint's pending writes the deletion of the
// entries it covers. The runs followed but not taken yet are journaled
// again, from where the merge is: they lie past the checkpoint.
func (mj *mergeJournal) checkpoint(merge *order.Merger[kafka.Message]) error {
	covered := mj.stored
	mj.stored = nil
	if err := mj.write(merge.Following()); err != nil {
		return err
	}
	if err := mj.db.DropJournal(covered); err != nil {
		return fmt.Errorf("merge journal: %w", err)
	}
	return nil
}

package changelog

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/riskstream/riskstream/state"
)

// standbyInterval is how often a standby copy reads what its changelog
// partition got since.
const standbyInterval = time.Second

// StandbysOf returns the partitions of topic whose standby copies member
// me keeps, given every member's partitions of topic: each owner's
// partitions, in order, go to the other members in turn (from the one
// after the owner, members in ID order), replicas of each, so that the
// partitions of an instance that dies are warm on every other one in the
// proportion in which their shares grow.
func StandbysOf(assigned map[string][]int, me string, replicas int) []int {
	members := slices.Sorted(maps.Keys(assigned))
	if len(members) < 2 || replicas < 1 {
		return nil
	}
	var mine []int
	for o, owner := range members {
		others := append(slices.Clone(members[o+1:]), members[:o]...)
		for i, p := range slices.Sorted(slices.Values(assigned[owner])) {
			for r := range min(replicas, len(others)) {
				if others[(i+r)%len(others)] == me {
					mine = append(mine, p)
				}
			}
		}
	}
	slices.Sort(mine)
	return mine
}

// Standbys keeps standby copies of repartition partitions another
// instance holds (Kafka Streams' standby replicas): each a local store
// that follows the partition's changelog, applying its finished
// checkpoints every standbyInterval, so that taking the partition over
// reads only what the changelog got in the last interval instead of all of
// it. It runs on a goroutine of its own and owns its stores until Close.
type Standbys struct {
	stop func()
	done chan struct{}
}

// StartStandbys starts following the changelogs of partitions, with the
// stores in dir/N opened with so.
func StartStandbys(partitions []int, newLog func(k int) Log, dir string, so state.Options, log *slog.Logger) *Standbys {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Standbys{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		dbs := map[int]*state.DB{}
		defer func() {
			for _, db := range dbs {
				db.Close()
			}
		}()
		for {
			for _, k := range partitions {
				if ctx.Err() != nil {
					return
				}
				if err := followStandby(ctx, dbs, k, newLog(k), dir, so); err != nil && ctx.Err() == nil {
					log.Warn("following a Log for a standby copy", "partition", k, "err", err)
					if db := dbs[k]; db != nil {
						db.Close()
						delete(dbs, k)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(standbyInterval):
			}
		}
	}()
	return s
}

// followStandby brings the standby copy of partition k up to its
// changelog's last finished checkpoint, opening its store if needed.
func followStandby(ctx context.Context, dbs map[int]*state.DB, k int, log Log, dir string, so state.Options) error {
	end, err := log.End(ctx)
	if err != nil {
		return err
	}
	db := dbs[k]
	var at Position
	if db == nil {
		so.Dir = filepath.Join(dir, strconv.Itoa(k))
		if db, at, err = OpenStore(so, end); err != nil {
			return err
		}
		dbs[k] = db
	} else if at, err = ReadPosition(db); err != nil {
		return err
	}
	if at.End == end {
		return nil
	}
	f, err := log.follow(ctx, db, at)
	if err != nil || f.next == at {
		return err
	}
	return WritePosition(db, f.next)
}

// OpenStore opens the store of a repartition partition whose changelog
// ends at end, and returns its position in the changelog. A store past
// that end is of another changelog (the topic was made again): it is
// emptied.
func OpenStore(so state.Options, end int64) (*state.DB, Position, error) {
	db, err := state.Open(so)
	if err != nil {
		return nil, NoPosition, err
	}
	at, err := ReadPosition(db)
	if err == nil && at.End <= end {
		return db, at, nil
	}
	db.Close()
	if err != nil {
		return nil, NoPosition, err
	}
	if err := os.RemoveAll(so.Dir); err != nil {
		return nil, NoPosition, err
	}
	db, err = state.Open(so)
	return db, NoPosition, err
}

// Close stops following and closes the stores. A copy stopped in the
// middle of reading its changelog keeps its position: the next pass
// applies again what was applied after it, which writes the same values.
func (s *Standbys) Close() {
	if s == nil {
		return
	}
	s.stop()
	<-s.done
}

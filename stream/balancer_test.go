package stream

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestStickyBalancer: every partition has one owner, shares differ by at
// most one, and when members come and go a partition moves only when its
// owner left or holds more than its share.
func TestStickyBalancer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const topic, partitions = "t-repartition", 12
	var ps []kafka.Partition
	for p := range partitions {
		ps = append(ps, kafka.Partition{Topic: topic, ID: p})
	}
	holds := map[string][]int{} // member -> partitions it holds
	next := 0
	for round := range 60 {
		// A member joins, or one leaves (never the last).
		if len(holds) < 2 || r.IntN(2) == 0 && len(holds) < 8 {
			holds[fmt.Sprintf("m%03d", next)] = nil
			next++
		} else {
			ids := slices.Sorted(func(yield func(string) bool) {
				for id := range holds {
					if !yield(id) {
						return
					}
				}
			})
			delete(holds, ids[r.IntN(len(ids))])
		}
		var members []kafka.GroupMember
		for id, held := range holds {
			b := &stickyBalancer{}
			b.held(topic, held)
			data, _ := b.UserData()
			members = append(members, kafka.GroupMember{ID: id, Topics: []string{topic}, UserData: data})
		}
		r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		got := (&stickyBalancer{}).AssignGroups(members, ps)
		owners := map[int]string{}
		lo, hi := partitions, 0
		for id, a := range got {
			for _, p := range a[topic] {
				if o, dup := owners[p]; dup {
					t.Fatalf("round %d: partition %d given to %s and %s", round, p, o, id)
				}
				owners[p] = id
			}
			lo, hi = min(lo, len(a[topic])), max(hi, len(a[topic]))
		}
		if len(owners) != partitions || hi-lo > 1 {
			t.Fatalf("round %d: %d of %d partitions given, shares from %d to %d: %v", round, len(owners), partitions, lo, hi, got)
		}
		base := partitions / len(holds)
		for id, held := range holds {
			kept := 0
			for _, p := range held {
				if owners[p] == id {
					kept++
				}
			}
			// A member keeps what it held up to its share.
			if kept < min(len(held), base) {
				t.Fatalf("round %d: %s held %v and kept %d of them, its share is %d or %d: %v", round, id, held, kept, base, base+1, got)
			}
		}
		// Only what must move moves: a partition whose owner stays moves
		// only to make room for a member that joined.
		moved := 0
		for id, held := range holds {
			for _, p := range held {
				if owners[p] != id {
					moved++
				}
			}
		}
		if moved > base+1 {
			t.Fatalf("round %d: %d partitions moved between members that stayed, more than a share (%d)", round, moved, base+1)
		}
		for id := range holds {
			holds[id] = got[id][topic]
		}
	}
}

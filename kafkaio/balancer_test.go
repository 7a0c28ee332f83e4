package kafkaio

import (
	"fmt"
	"maps"
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
			ids := slices.Sorted(maps.Keys(holds))
			delete(holds, ids[r.IntN(len(ids))])
		}
		var members []kafka.GroupMember
		for id, held := range holds {
			b := &StickyBalancer{}
			b.Held(topic, held)
			data, _ := b.UserData()
			members = append(members, kafka.GroupMember{ID: id, Topics: []string{topic}, UserData: data})
		}
		r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		got := (&StickyBalancer{}).AssignGroups(members, ps)
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

// TestStickyBalancerPrefersStandby: the partitions of a member that left
// go to the members with standby copies of them.
func TestStickyBalancerPrefersStandby(t *testing.T) {
	const topic = "t-repartition"
	var ps []kafka.Partition
	for p := range 6 {
		ps = append(ps, kafka.Partition{Topic: topic, ID: p})
	}
	member := func(id string, held, standby []int) kafka.GroupMember {
		b := &StickyBalancer{}
		b.Held(topic, held)
		b.Held(StandbyTopic(topic), standby)
		data, _ := b.UserData()
		return kafka.GroupMember{ID: id, Topics: []string{topic}, UserData: data}
	}
	// c, which held 4 and 5, is gone; a has a standby copy of 5, b of 4.
	got := (&StickyBalancer{}).AssignGroups([]kafka.GroupMember{
		member("a", []int{0, 1}, []int{5, 2}),
		member("b", []int{2, 3}, []int{4, 0}),
	}, ps)
	if !slices.Equal(got["a"][topic], []int{0, 1, 5}) || !slices.Equal(got["b"][topic], []int{2, 3, 4}) {
		t.Fatalf("assignment %v, want a: 0 1 5 and b: 2 3 4", got)
	}
}

// TestStickyBalancerUndivided: the input topic's partitions go to one
// member together, the one that held most of them; when it leaves, to
// another one, together again.
func TestStickyBalancerUndivided(t *testing.T) {
	const input = "requests"
	var ps []kafka.Partition
	for p := range 4 {
		ps = append(ps, kafka.Partition{Topic: input, ID: p})
	}
	member := func(id string, held ...int) kafka.GroupMember {
		b := &StickyBalancer{}
		b.Held(input, held)
		data, _ := b.UserData()
		return kafka.GroupMember{ID: id, Topics: []string{input}, UserData: data}
	}
	balancer := &StickyBalancer{Undivided: input}
	for _, c := range []struct {
		members []kafka.GroupMember
		want    string
	}{
		{[]kafka.GroupMember{member("b"), member("a"), member("c")}, "a"},
		{[]kafka.GroupMember{member("a"), member("b", 0, 1, 2, 3), member("c")}, "b"},
		{[]kafka.GroupMember{member("a", 0), member("c", 1, 2)}, "c"}, // the router left: who held most
	} {
		got := balancer.AssignGroups(c.members, ps)
		for id, a := range got {
			want := []int(nil)
			if id == c.want {
				want = []int{0, 1, 2, 3}
			}
			if !slices.Equal(a[input], want) {
				t.Errorf("members %v: %s gets %v, want %v", c.members, id, a[input], want)
			}
		}
	}
}

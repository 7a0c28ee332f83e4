package kafkaio

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/segmentio/kafka-go"
)

// StickyBalancer, a kafka.GroupBalancer, assigns the partitions of a
// distributed job's topics to
// the instances of its group as evenly as kafka-go's range balancer, but
// leaves each partition with the instance that held it when it can
// (Kafka's sticky assignor): an instance that joins or leaves moves only
// the partitions it must, and the others keep their state in memory
// instead of restoring it. Each member says which partitions it holds in
// its join metadata (Held).
//
// The partitions of the topic Undivided (the input) go to one member
// together: the one that held most of them, else the first.
type StickyBalancer struct {
	// Undivided is the topic whose partitions go to one member.
	Undivided string
	mu        sync.Mutex
	// holds are the partitions the instance holds, by topic.
	holds map[string][]int
}

// ProtocolName names the balancer in the group protocol.
func (b *StickyBalancer) ProtocolName() string { return "riskstream-sticky" }

// Held records the partitions the instance holds, for its next join.
func (b *StickyBalancer) Held(topic string, partitions []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holds == nil {
		b.holds = map[string][]int{}
	}
	b.holds[topic] = slices.Sorted(slices.Values(partitions))
}

// UserData encodes the partitions held: per topic, its name, then the
// partitions, as uvarints.
func (b *StickyBalancer) UserData() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []byte
	for _, t := range slices.Sorted(maps.Keys(b.holds)) {
		out = binary.AppendUvarint(out, uint64(len(t)))
		out = append(out, t...)
		out = binary.AppendUvarint(out, uint64(len(b.holds[t])))
		for _, p := range b.holds[t] {
			out = binary.AppendUvarint(out, uint64(p))
		}
	}
	return out, nil
}

// StandbyTopic names, in a member's holds, the partitions of topic it
// keeps standby copies of.
func StandbyTopic(topic string) string { return topic + "/standby" }

// decodeHolds reads what UserData wrote; what does not decode holds
// nothing.
func decodeHolds(b []byte) map[string][]int {
	holds := map[string][]int{}
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	for len(b) > 0 {
		l, ok := next()
		if !ok || l > uint64(len(b)) {
			return holds
		}
		topic := string(b[:l])
		b = b[l:]
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return holds
		}
		for range n {
			p, ok := next()
			if !ok {
				return holds
			}
			holds[topic] = append(holds[topic], int(p))
		}
	}
	return holds
}

// AssignGroups gives each member at most its even share of each topic's
// partitions (the share rounded up), first those it held, then the rest
// to the members with the fewest, members in ID order.
func (b *StickyBalancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	members = slices.Clone(members)
	slices.SortFunc(members, func(x, y kafka.GroupMember) int { return strings.Compare(x.ID, y.ID) })
	byTopic := map[string][]int{}
	for _, p := range partitions {
		byTopic[p.Topic] = append(byTopic[p.Topic], p.ID)
	}
	out := kafka.GroupMemberAssignments{}
	for _, m := range members {
		out[m.ID] = map[string][]int{}
	}
	holds := make([]map[string][]int, len(members))
	for i, m := range members {
		holds[i] = decodeHolds(m.UserData)
	}
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		ps := slices.Sorted(slices.Values(byTopic[topic]))
		var takers []int // members subscribed to the topic
		for i, m := range members {
			if slices.Contains(m.Topics, topic) {
				takers = append(takers, i)
			}
		}
		if len(takers) == 0 {
			continue
		}
		if topic == b.Undivided {
			one := takers[0]
			for _, i := range takers {
				if heldOf(holds[i][topic], ps) > heldOf(holds[one][topic], ps) {
					one = i
				}
			}
			out[members[one].ID][topic] = ps
			continue
		}
		// Each taker gets base partitions, and extra of them one more:
		// first those they held, the extra ones too, then the rest.
		base, extra := len(ps)/len(takers), len(ps)%len(takers)
		owner := map[int]int{}
		count := map[int]int{}
		more := map[int]bool{} // takers given one of the extra partitions
		take := func(i, p int) { owner[p] = i; count[i]++ }
		free := func(p int) bool {
			_, taken := owner[p]
			return !taken && slices.Contains(ps, p)
		}
		for _, i := range takers {
			for _, p := range holds[i][topic] {
				if free(p) && count[i] < base {
					take(i, p)
				}
			}
		}
		for _, i := range takers {
			for _, p := range holds[i][topic] {
				if extra > 0 && free(p) && !more[i] {
					take(i, p)
					more[i] = true
					extra--
				}
			}
		}
		for _, p := range ps {
			if !free(p) {
				continue
			}
			// A member with a standby copy of the partition first: it
			// takes it over without reading its whole changelog.
			best := -1
			for _, i := range takers {
				if count[i] < base && slices.Contains(holds[i][StandbyTopic(topic)], p) {
					best = i
					break
				}
			}
			if best < 0 {
				for _, i := range takers {
					if count[i] < base && (best < 0 || count[i] < count[best]) {
						best = i
					}
				}
			}
			if best < 0 {
				for _, i := range takers {
					if !more[i] && extra > 0 {
						best, more[i] = i, true
						extra--
						break
					}
				}
			}
			take(best, p)
		}
		for _, p := range ps {
			id := members[owner[p]].ID
			out[id][topic] = append(out[id][topic], p)
		}
	}
	return out
}

// heldOf counts the partitions of ps among held.
func heldOf(held, ps []int) int {
	n := 0
	for _, p := range held {
		if slices.Contains(ps, p) {
			n++
		}
	}
	return n
}

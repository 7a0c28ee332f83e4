package job

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/ruleslog"
	"github.com/segmentio/kafka-go"
)

// TestSwitches: a merge of two partitions stops where the log says the
// router switched to each later version, and the versions to take there
// come in order; stops of versions taken already, at another partition,
// take none.
func TestSwitches(t *testing.T) {
	log := ruleslog.NewLog()
	for range 3 {
		log.Add(&rules.Config{})
	}
	// Version 2 from offset 3 of partition 0 and 2 of partition 1 (the same
	// point of the merge); version 3 from offset 5 of partition 0 only.
	for _, s := range []ruleslog.Switch{{Version: 2, Partition: 0, Offset: 3}, {Version: 2, Partition: 1, Offset: 2},
		{Version: 3, Partition: 0, Offset: 5}, {Version: 3, Partition: 0, Offset: 9}} {
		log.Note(s)
	}
	m, err := NewMerge(MergeOptions{PartitionWait: Forever, BehindWait: Forever})
	if err != nil {
		t.Fatal(err)
	}
	// Partition 0's records at ms 0, 10, 20, ...; partition 1's at 5, 15, ...
	for p := range int32(2) {
		m.AddPartition(p)
		var msgs []kafka.Message
		for o := range int64(8) {
			msgs = append(msgs, kafka.Message{Partition: int(p), Offset: o, Time: time.UnixMilli(10*o + 5*int64(p))})
		}
		m.Push(kafkaio.Fetch{Partition: p, Msgs: msgs}, 0)
		m.Push(kafkaio.Fetch{Partition: p, Done: true}, 0)
	}
	s := NewSwitches(log, m, 1, []int32{0, 1})
	if !s.Pending() {
		t.Fatal("no switch pending at the start")
	}
	var got []string
	for {
		recs, _, _ := m.Take(0, nil, nil)
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%d/%d", r.Partition, r.Prov.Offset))
		}
		p, offset, stopped := m.Stopped()
		if !stopped {
			break
		}
		for _, v := range s.At(p, offset) {
			got = append(got, fmt.Sprintf("v%d", v))
		}
	}
	want := []string{"0/0", "1/0", "0/1", "1/1", "0/2", "v2", "1/2", "0/3", "1/3", "0/4", "1/4", "v3", "0/5", "1/5", "0/6", "1/6", "0/7", "1/7"}
	if !slices.Equal(got, want) {
		t.Errorf("took\n%v\nwant\n%v", got, want)
	}
	if s.Pending() {
		t.Error("a switch pending after the last version")
	}
}

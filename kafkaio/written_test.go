package kafkaio

import (
	"context"
	"log/slog"
	"reflect"
	"testing"

	"github.com/riskstream/riskstream/checkpoint"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/sink"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestOutputEndsRecorded: the output ends a checkpoint records, through
// its manifest, read back as they were, the unlisted marks among them.
func TestOutputEndsRecorded(t *testing.T) {
	for _, ends := range [][]OutputEnd{
		nil,
		{{sink.Partition{Topic: "decisions", Partition: 0}, 0}},
		{{sink.Partition{Topic: "decisions", Partition: 3}, 1 << 40}, {sink.Partition{Topic: "dlq", Partition: 0}, 7}, {sink.Partition{Topic: "héatmaps", Partition: 1}, 12}},
		{{sink.Partition{Topic: "late", Partition: unlisted}, kafka.FirstOffset}, {sink.Partition{Topic: "late", Partition: 0}, kafka.FirstOffset}},
	} {
		m := checkpoint.Manifest{Outputs: EndOffsets(ends)}
		back, err := checkpoint.Decode(m.AppendBinary(nil))
		if got := EndsOf(back.Outputs); err != nil || !reflect.DeepEqual(got, ends) {
			t.Errorf("%v: read back %v, %v", ends, got, err)
		}
	}
}

// TestOutputEnds: the end of every partition of the output topics; a topic
// not created yet (no output of its kind so far) has none.
func TestOutputEnds(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "decisions"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Acknowledged writes: by default kafka-go's Writer does not wait for
	// the broker, and the ends could be read before the last write lands.
	w := &kafka.Writer{Addr: kafka.TCP(c.ListenAddrs()...), Topic: "decisions", Balancer: &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(context.Background(), kafka.Message{Value: []byte("a")}, kafka.Message{Value: []byte("b")},
		kafka.Message{Value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	client := kafkatest.Client(t, c.ListenAddrs()[0], 0)
	ends, err := OutputEnds(context.Background(), client, []string{"decisions", "late"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 2 || ends[0].Topic != "decisions" || ends[1].Partition.Partition != 1 || ends[0].Offset+ends[1].Offset != 3 {
		t.Errorf("ends %+v, want 3 records over decisions' 2 partitions and nothing of late", ends)
	}
}

// fakeOutputs is a sink for an EndTracker: acknowledged ends, and the
// messages a restart read that are not made again yet, by topic.
type fakeOutputs struct {
	acked  map[sink.Partition]int64
	unmade map[string]int
}

// SkipWritten is not used by these tests, which set unmade themselves.
func (f *fakeOutputs) SkipWritten(*sink.Written) {}

func (f *fakeOutputs) Acknowledged() map[sink.Partition]int64 { return f.acked }
func (f *fakeOutputs) UnmadeIn(topic string) bool             { return f.unmade[topic] > 0 }

func (f *fakeOutputs) Unmade() int {
	n := 0
	for _, c := range f.unmade {
		n += c
	}
	return n
}

func (f *fakeOutputs) ForgetUnmade() int {
	n := f.Unmade()
	clear(f.unmade)
	return n
}

// TestEndsHeldWhileUnmade: while outputs a restart read are not all made
// again, a checkpoint records their topic's ends where the restart read
// from, not past them; the other topics' ends move on. Once made, or given
// up after giveUpAfter checkpoints that processed records and made none,
// the ends move on.
func TestEndsHeldWhileUnmade(t *testing.T) {
	dec0, dec1, dlq := sink.Partition{Topic: "decisions"}, sink.Partition{Topic: "decisions", Partition: 1}, sink.Partition{Topic: "dlq"}
	out := &fakeOutputs{acked: map[sink.Partition]int64{dec0: 120, dlq: 9}, unmade: map[string]int{"decisions": 2}}
	tr := &EndTracker{out: out, log: slog.Default(),
		base: map[sink.Partition]int64{dec0: 100, dec1: 50, dlq: 5},
		held: map[sink.Partition]int64{dec0: 40, dec1: 50, dlq: 3}}
	want := func(step string, d0, d1, q int64) {
		t.Helper()
		got := tr.now()
		wantEnds := []OutputEnd{{dec0, d0}, {dec1, d1}, {dlq, q}}
		if !reflect.DeepEqual(got, wantEnds) {
			t.Fatalf("%s: ends %v, want %v", step, got, wantEnds)
		}
	}
	want("unmade decisions", 40, 50, 9)
	// Checkpoints that process nothing never give up.
	for range 2 * giveUpAfter {
		tr.settle(1000)
	}
	want("no records processed", 40, 50, 9)
	// One made again: the checkpoint that sees it is not quiet, and the
	// quiet ones start over.
	out.unmade["decisions"] = 1
	for i := range giveUpAfter {
		tr.settle(int64(1001 + i))
	}
	want("made one", 40, 50, 9)
	tr.settle(2000)
	if out.Unmade() != 0 {
		t.Fatalf("after %d checkpoints processing records and making none, %d outputs still waited for", giveUpAfter, out.Unmade())
	}
	want("given up", 120, 50, 9)
}

// TestUnlistedPartitions: a checkpoint whose ends are known marks every
// output topic; a restart reads each partition of a marked topic that the
// checkpoint does not name (created or added since, or never written to)
// from its start, and only the named partitions of an unmarked one.
func TestUnlistedPartitions(t *testing.T) {
	dec0, dec1, late0 := sink.Partition{Topic: "decisions"}, sink.Partition{Topic: "decisions", Partition: 1}, sink.Partition{Topic: "late"}
	mark := func(topic string) OutputEnd {
		return OutputEnd{sink.Partition{Topic: topic, Partition: unlisted}, kafka.FirstOffset}
	}
	// When the tracker first read the ends, only decisions/0 existed.
	out := &fakeOutputs{acked: map[sink.Partition]int64{}}
	tr := &EndTracker{out: out, log: slog.Default(), topics: []string{"decisions", "late"},
		base: map[sink.Partition]int64{dec0: 100}}
	ends := tr.now()
	if want := []OutputEnd{mark("decisions"), {dec0, 100}, mark("late")}; !reflect.DeepEqual(ends, want) {
		t.Fatalf("ends %v, want %v", ends, want)
	}
	// Since then decisions gained a partition and late was created.
	partitions := map[string][]int{"decisions": {0, 1}, "late": {0}}
	got := withUnlisted(ends, partitions)
	if want := []OutputEnd{{dec0, 100}, {dec1, kafka.FirstOffset}, {late0, kafka.FirstOffset}}; !reflect.DeepEqual(got, want) {
		t.Errorf("read from %v, want %v", got, want)
	}
	// Ends the tracker did not know (an older checkpoint) have no marks.
	unmarked := []OutputEnd{{dec0, 100}}
	if got := withUnlisted(unmarked, partitions); !reflect.DeepEqual(got, unmarked) {
		t.Errorf("unmarked: read from %v, want %v", got, unmarked)
	}
	// A marked topic that still does not exist has nothing to read.
	if got := withUnlisted([]OutputEnd{mark("dlq")}, partitions); len(got) != 0 {
		t.Errorf("absent topic: read from %v", got)
	}
}

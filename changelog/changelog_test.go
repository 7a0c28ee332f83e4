package changelog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/internal/testbroker"
	"github.com/riskstream/riskstream/kafkaio"
	"github.com/riskstream/riskstream/state"
	"github.com/segmentio/kafka-go"
)

// TestChangelogRestore: a restore takes the checkpoints that were
// finished, leaves out the writes of one that was not (its writer died)
// and those of an instance that lost the partition (an older generation
// after a newer one), and writes the left-out keys again so that the log's
// last record of each is the restored checkpoint's.
func TestChangelogRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	ctx := context.Background()
	addr, client, topics := withInternalTopics(t, "g", 2)
	log := Log{Client: client, Brokers: []string{addr}, Dialer: &kafka.Dialer{}, Topic: topics.Changelog, Partition: 1}
	open := func() *state.DB {
		db, err := state.Open(state.Options{Dir: t.TempDir(), AtomicCheckpoints: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	checkpoint := func(db *state.DB, gen int32, meta string, writes map[string]string) {
		t.Helper()
		for k, v := range writes {
			var err error
			if v == "" {
				err = db.Delete([]byte(k))
			} else {
				err = db.Set([]byte(k), []byte(v))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SetMeta("checkpoint", []byte(meta)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := log.Write(ctx, db, gen); err != nil {
			t.Fatal(err)
		}
		if err := db.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	// unfinished writes records of a checkpoint without its marker, as a
	// writer that died would.
	unfinished := func(gen int32, writes map[string]string) {
		t.Helper()
		var recs []kafka.Record
		for k, v := range writes {
			r := kafka.Record{Key: kafka.NewBytes(append([]byte{'s'}, k...)),
				Headers: []kafka.Header{{Key: changelogHeader, Value: binary.BigEndian.AppendUint32(nil, uint32(gen))}}}
			if v != "" {
				r.Value = kafka.NewBytes([]byte(v))
			}
			recs = append(recs, r)
		}
		if _, err := kafkaio.Produce(ctx, client, log.Topic, log.Partition, recs); err != nil {
			t.Fatal(err)
		}
	}
	check := func(db *state.DB, meta string, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if t.Failed() {
				return
			}
			got, found, err := db.Get([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if found != (v != "") || string(got) != v {
				t.Errorf("%s = %q (found %v), want %q", k, got, found, v)
			}
		}
		cp, _, _ := db.Meta("checkpoint")
		if string(cp) != meta {
			t.Errorf("checkpoint meta %q, want %q", cp, meta)
		}
	}

	first := open()
	checkpoint(first, 1, "one", map[string]string{"a": "a1", "b": "b1", "c": "c1"})
	checkpoint(first, 1, "two", map[string]string{"a": "a2", "b": ""}) // b deleted
	unfinished(1, map[string]string{"a": "a3", "d": "d3"})

	second := open()
	pos2, st, err := log.Restore(ctx, second, NoPosition, 2)
	end := pos2.End
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "a2", "b": "", "c": "c1", "d": ""}
	check(second, "two", want)
	if st.Repaired != 2 {
		t.Errorf("%d keys written again, want 2 (a and d, of the unfinished checkpoint)", st.Repaired)
	}
	if now, _ := log.End(ctx); now != end {
		t.Errorf("restore says the log ends at %d, it ends at %d", end, now)
	}

	// The first instance, which lost the partition without noticing,
	// finishes a checkpoint after the second took over.
	checkpoint(first, 1, "zombie", map[string]string{"a": "zombie", "c": "zombie"})
	checkpoint(second, 2, "three", map[string]string{"c": "c4"})

	third := open()
	pos3, st, err := log.Restore(ctx, third, NoPosition, 3)
	if err != nil {
		t.Fatal(err)
	}
	want["c"] = "c4"
	check(third, "three", want)
	if st.Repaired != 1 {
		t.Errorf("%d keys written again, want 1 (a, of the instance that lost the partition)", st.Repaired)
	}

	// The third instance checkpoints and leaves; the second takes the
	// partition back, from where its store is, and dies while
	// checkpointing; the third takes it back from where its own store is.
	checkpoint(third, pos3.Epoch, "four", map[string]string{"b": "b5", "e": "e5"})
	end4, _ := log.End(ctx)
	if _, st, err = log.Restore(ctx, second, pos2, 5); err != nil {
		t.Fatal(err)
	}
	want["b"], want["e"] = "b5", "e5"
	check(second, "four", want)
	if st.Records != end4-end {
		t.Errorf("the second read %d records, want the %d after its own checkpoint", st.Records, end4-end)
	}
	checkpoint(second, 5, "five", map[string]string{"a": "a6"})
	unfinished(5, map[string]string{"c": "c7", "e": ""})
	if _, _, err = log.Restore(ctx, third, Position{end4, pos3.Epoch}, 6); err != nil {
		t.Fatal(err)
	}
	want["a"] = "a6"
	check(third, "five", want)

	// The log cleaner keeps the last record of each key: the changelog
	// holds the same state afterwards.
	compacted := Log{Client: client, Brokers: []string{addr}, Dialer: &kafka.Dialer{}, Topic: topics.Changelog, Partition: 0}
	compact(t, log, compacted)
	fourth := open()
	if _, _, err = compacted.Restore(ctx, fourth, NoPosition, 4); err != nil {
		t.Fatal(err)
	}
	check(fourth, "five", want)
}

// compact writes to an empty partition to what the log cleaner leaves of
// from: the last record of each key, in their order.
func compact(t *testing.T, from, to Log) {
	t.Helper()
	var all []kafka.Message
	last := map[string]int{}
	if _, err := from.read(context.Background(), func(m *kafka.Message) error {
		last[string(m.Key)] = len(all)
		all = append(all, *m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var recs []kafka.Record
	for i, m := range all {
		if last[string(m.Key)] != i {
			continue
		}
		r := kafka.Record{Key: kafka.NewBytes(m.Key), Headers: m.Headers}
		if m.Value != nil {
			r.Value = kafka.NewBytes(m.Value)
		}
		recs = append(recs, r)
	}
	if _, err := kafkaio.Produce(context.Background(), to.Client, to.Topic, to.Partition, recs); err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted %d records to %d", len(all), len(recs))
}

// TestChangelogLargeCheckpoint: a checkpoint of more writes than a broker
// takes in one request goes in several, and one state larger than the
// default max.message.bytes (1 MiB) fits in the changelog.
func TestChangelogLargeCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	ctx := context.Background()
	addr, client, topics := withInternalTopics(t, "g", 1)
	log := Log{Client: client, Brokers: []string{addr}, Dialer: &kafka.Dialer{}, Topic: topics.Changelog}
	src, err := state.Open(state.Options{Dir: t.TempDir(), AtomicCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	large := bytes.Repeat([]byte("x"), 3<<20)
	for i := range 30_000 {
		if err := src.Set(fmt.Appendf(nil, "k%05d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Set([]byte("large"), large); err != nil {
		t.Fatal(err)
	}
	if _, _, err := log.Write(ctx, src, 1); err != nil {
		t.Fatal(err)
	}
	dst, err := state.Open(state.Options{Dir: t.TempDir(), AtomicCheckpoints: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if _, _, err := log.Restore(ctx, dst, NoPosition, 2); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k00000", "k29999", "large"} {
		v, ok, err := dst.Get([]byte(k))
		if err != nil || !ok || (k == "large") != (len(v) == len(large)) {
			t.Fatalf("%s: %d bytes, found %v, %v", k, len(v), ok, err)
		}
	}
}

// withInternalTopics starts a broker with the internal topics of group,
// of the given partitions, and returns its address, a client and the
// topics.
func withInternalTopics(t testing.TB, group string, partitions int) (string, *kafka.Client, kafkaio.InternalTopics) {
	t.Helper()
	addr := testbroker.Start(t, 1)
	client := kafkatest.Client(t, addr, time.Minute)
	topics := kafkaio.InternalTopicsOf(group)
	if err := kafkaio.EnsureInternalTopics(context.Background(), client, topics, partitions); err != nil {
		t.Fatal(err)
	}
	return addr, client, topics
}

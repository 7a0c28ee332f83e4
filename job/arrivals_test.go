package job

import "testing"

// TestFetchArrivals: a record is timed by the first fetch of its partition
// that reaches its offset, partitions apart, and a fetch all of whose
// records the merge gave is forgotten.
func TestFetchArrivals(t *testing.T) {
	var a arrivals
	if got := a.of(0, 5); got != 0 {
		t.Fatalf("nothing fetched: %d", got)
	}
	a.fetched(0, 9, 100)  // offsets ..9
	a.fetched(1, 3, 150)  // partition 1
	a.fetched(0, 19, 200) // 10..19
	for _, c := range []struct {
		p            int32
		offset, want int64
	}{{0, 0, 100}, {0, 9, 100}, {1, 2, 150}, {0, 10, 200}, {0, 19, 200}, {1, 3, 150}, {0, 20, 0}} {
		if got := a.of(c.p, c.offset); got != c.want {
			t.Errorf("partition %d offset %d: arrived %d, want %d", c.p, c.offset, got, c.want)
		}
	}
	if n := len(a.byPartition[0]); n != 0 {
		t.Errorf("%d fetches of partition 0 kept after its records all went", n)
	}
}

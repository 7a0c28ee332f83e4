package windows

import (
	"reflect"
	"testing"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

func testSlot() *slot {
	sp := &spec{wtype: rules.Sliding, size: 10, slide: 5, pane: 5, bounds: []float64{1, 2}}
	s := newSlot("\x00\x01\"k\"\x00", sp)
	hm := heatmap.New(2)
	hm.Add(1.5, true, sp.bounds)
	s.panes = []pane{{start: -5, acc: acc{n: 2, sum: 3.5, distinct: []uint64{1, 9}}}, {start: 0, acc: acc{n: 1, hm: hm}}}
	s.sessions = []session{{start: 1, end: 7, fired: true, rev: 3, acc: acc{n: 4}}}
	s.fired = []firedWin{{start: -5, rev: 2}}
	s.firedEnd, s.timerAt = 5, 14
	return s
}

func TestSlotCodecRoundTrip(t *testing.T) {
	s := testSlot()
	b := encodeSlot(nil, s)
	got, err := decodeSlot(s.key, s.sp, b)
	if err != nil {
		t.Fatal(err)
	}
	if again := encodeSlot(nil, got); !reflect.DeepEqual(again, b) {
		t.Fatal("re-encoding a decoded slot changes it")
	}
	if got.firedEnd != 5 || got.timerAt != 14 || len(got.panes) != 2 || got.panes[0].sum != 3.5 ||
		!reflect.DeepEqual(got.panes[0].distinct, []uint64{1, 9}) || got.panes[1].hm.Count != 1 ||
		got.panes[1].hm.Degraded != 1 || !got.sessions[0].fired || got.sessions[0].end != 7 ||
		got.sessions[0].rev != 3 || got.fired[0] != (firedWin{start: -5, rev: 2}) {
		t.Fatalf("decoded slot differs: %+v", got)
	}
}

func TestSlotCodecRejectsCorruption(t *testing.T) {
	b := encodeSlot(nil, testSlot())
	for i := range len(b) - 1 {
		if _, err := decodeSlot("k", testSlot().sp, b[:i]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: no error", i, len(b))
		}
	}
	bad := append([]byte{slotVersion + 1}, b[1:]...)
	if _, err := decodeSlot("k", testSlot().sp, bad); err == nil {
		t.Fatal("unknown version: no error")
	}
}

// FuzzDecodeSlot: stored state from disk must never crash the job.
func FuzzDecodeSlot(f *testing.F) {
	f.Add(encodeSlot(nil, testSlot()))
	f.Add([]byte{slotVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSlot("k", testSlot().sp, b)
		if err == nil {
			encodeSlot(nil, s)
		}
	})
}

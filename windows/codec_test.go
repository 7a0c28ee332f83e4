package windows

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

func testSlot() *slot {
	sp := &spec{wtype: rules.Sliding, size: 10, slide: 5, pane: 5, bounds: []float64{1, 2}}
	s := newSlot("\x00\x01\"k\"\x00", sp)
	hm := heatmap.New(2)
	hm.Add(1.5, true, sp.bounds)
	s.wins = []win{{start: -5, acc: acc{n: 2, sum: 3.5, x: &accExtra{distinct: []uint64{1, 9}}}}, {start: 0, acc: acc{n: 1, x: &accExtra{hm: hm}}}}
	s.fired = []firedWin{{start: -5, rev: 2}}
	s.firedEnd, s.timerAt = 5, 14
	return s
}

func testSessionSlot() *slot {
	s := newSlot("\x00\x02\"k\"\x00", &spec{wtype: rules.Session, gap: 6})
	s.wins = append(s.wins, win{start: 1, end: 7, fired: true, rev: 3, acc: acc{n: 4}}, win{start: 20, end: 26, acc: acc{n: 1, sum: 2}})
	s.timerAt = 25
	return s
}

func TestSlotCodecRoundTrip(t *testing.T) {
	for _, s := range []*slot{testSlot(), testSessionSlot()} {
		b := encodeSlot(nil, s)
		got, err := decodeSlot(s.key, s.sp, b)
		if err != nil {
			t.Fatal(err)
		}
		if again := encodeSlot(nil, got); !reflect.DeepEqual(again, b) {
			t.Fatal("re-encoding a decoded slot changes it")
		}
		got.purgeAt = s.purgeAt // not stored
		if !reflect.DeepEqual(got.wins, s.wins) || !reflect.DeepEqual(got.fired, s.fired) ||
			got.firedEnd != s.firedEnd || got.timerAt != s.timerAt {
			t.Fatalf("decoded slot differs:\n got %+v\nwant %+v", got, s)
		}
	}
}

// TestSlotCodecRejectsWrongKind: a slot holds the windows its spec makes,
// so sessions stored under a sliding rule are corrupt state, not panes.
func TestSlotCodecRejectsWrongKind(t *testing.T) {
	b := encodeSlot(nil, testSessionSlot())
	if _, err := decodeSlot("k", testSlot().sp, b); err == nil {
		t.Fatal("sessions decoded as panes")
	}
	b = encodeSlot(nil, testSlot())
	if _, err := decodeSlot("k", testSessionSlot().sp, b); err == nil {
		t.Fatal("panes decoded as sessions")
	}
}

// TestSlotLayout keeps what an event touches in a slot within its first
// two cache lines, and the slot in a size class whose objects are 64-byte
// aligned (see slot).
func TestSlotLayout(t *testing.T) {
	var s slot
	if size := unsafe.Sizeof(s); size != 192 {
		t.Errorf("slot is %d bytes, want 192", size)
	}
	if end := unsafe.Offsetof(s.id) + unsafe.Sizeof(s.id); end > 128 {
		t.Errorf("the hot fields end at byte %d, past two cache lines", end)
	}
	if off := unsafe.Offsetof(s.fired); off < 128 {
		t.Errorf("cold field fired at byte %d, among the hot ones", off)
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

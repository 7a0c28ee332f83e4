package windows

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"unsafe"

	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/watermark"

	"github.com/riskstream/riskstream/heatmap"
	"github.com/riskstream/riskstream/rules"
)

// testSlots returns a slot of each kind the codec lays out differently:
// by window type, by the aggregate's fields, and with and without a timer,
// firedEnd and fired windows.
func testSlots() []*slot {
	sliding := func(agg rules.AggregateKind) *spec {
		return &spec{wtype: rules.Sliding, size: 10, slide: 5, pane: 5, agg: agg}
	}
	hm := heatmap.New(2)
	hm.Add(1.5, true, []float64{1, 2}, nil)
	q := heatmap.New(1)
	q.Add(7, false, nil, nil)
	var slots []*slot
	add := func(sp *spec, wins []win, timerAt int64) *slot {
		s := newSlot("\x00\x01\"k\"\x00", sp)
		s.wins = append(s.wins, wins...)
		s.timerAt = timerAt
		slots = append(slots, s)
		return s
	}
	add(sliding(rules.Count), []win{{start: -5, acc: acc{n: 2}}, {start: 0, acc: acc{n: 1}}, {start: 25, acc: acc{n: 300}}}, 34)
	add(&spec{wtype: rules.Tumbling, size: 86_400_000, slide: 86_400_000, pane: 86_400_000, agg: rules.Sum},
		[]win{{start: 1_732_147_200_000, acc: acc{n: 3, sum: -12.25}}}, 1_732_233_599_999)
	add(sliding(rules.Distinct), []win{{start: 10, acc: acc{n: 2, x: &accExtra{distinct: []uint64{1, 9}}}}}, noTimer)
	s := add(sliding(rules.Distinct), []win{{start: 0, acc: acc{n: 9, x: &accExtra{distinct: []uint64{3, 1 << 60}}}}, {start: 5, acc: acc{n: 1}}}, 19)
	s.extra().distinctLevel = 3 // sampled: values with the top 3 bits 0
	add(sliding(rules.Quantile), []win{{start: 0, acc: acc{n: 1, x: &accExtra{hm: q}}}}, 14)
	heat := sliding(rules.Count)
	heat.hm, heat.bounds = &rules.Heatmap{}, []float64{1, 2}
	s = add(heat, []win{{start: -5, acc: acc{n: 1, x: &accExtra{hm: hm}}}, {start: 0}}, 9)
	s.extra().fired = []firedWin{{start: -10, rev: 2}, {start: -5, rev: 0}}
	s.firedEnd = 5
	s = add(heat, nil, noTimer) // only windows kept for lateness
	s.extra().fired = []firedWin{{start: 1_000_000, rev: 1}}
	s.firedEnd = 1_000_010
	add(&spec{wtype: rules.Session, gap: 6, agg: rules.Count},
		[]win{{start: 1, end: 7, fired: true, rev: 3, acc: acc{n: 4}}, {start: 8, end: 14, acc: acc{n: 1}}, {start: 40, end: 52, acc: acc{n: 2}}}, 51)
	add(&spec{wtype: rules.Session, gap: 6, agg: rules.Max}, []win{{start: -100, end: -94, acc: acc{n: 1, sum: 2}}}, -95)
	return slots
}

func TestSlotCodecRoundTrip(t *testing.T) {
	for i, s := range testSlots() {
		b := encodeSlot(nil, s)
		got, err := decodeSlot(s.key, s.sp, b)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		if again := encodeSlot(nil, got); !reflect.DeepEqual(again, b) {
			t.Fatalf("slot %d: re-encoding a decoded slot changes it", i)
		}
		if !sameWins(got.wins, s.wins) ||
			!reflect.DeepEqual(got.firedWins(), s.firedWins()) || got.firedEnd != s.firedEnd || got.timerAt != s.timerAt || got.distinctLevel() != s.distinctLevel() {
			t.Fatalf("slot %d: decoded slot differs:\n got %+v\nwant %+v", i, got, s)
		}
		if got.storedTimer != s.timerAt {
			t.Fatalf("slot %d: stored timer %d, want the timer %d", i, got.storedTimer, s.timerAt)
		}
		if at, err := slotTimer(b); err != nil || at != s.timerAt {
			t.Fatalf("slot %d: slotTimer = %d, %v; want %d", i, at, err, s.timerAt)
		}
		if s.sp.hm != nil {
			continue
		}
		at, last, err := ruleSlotSpan(s.sp, b)
		want := watermark.Min
		if n := len(s.wins); n > 0 {
			want = s.wins[n-1].start
			if s.sp.wtype == rules.Session {
				want = s.wins[n-1].end
			}
		}
		if err != nil || at != s.timerAt || last != want {
			t.Fatalf("slot %d: ruleSlotSpan = %d, %d, %v; want %d, %d", i, at, last, err, s.timerAt, want)
		}
	}
}

// TestSlotCodecSizes: a state with one window costs close to its
// information (docs/format/state.md "Memory" gives these sizes).
func TestSlotCodecSizes(t *testing.T) {
	const ts = 1_732_150_007_000
	for _, c := range []struct {
		name string
		sp   *spec
		w    win
		at   int64
		want int
	}{
		{"one-pane sliding count", &spec{wtype: rules.Sliding, size: 60_000, slide: 1000, pane: 1000, agg: rules.Count}, win{start: ts, acc: acc{n: 1}}, ts + 60_999, 13},
		{"24 h tumbling sum", &spec{wtype: rules.Tumbling, size: 86_400_000, slide: 86_400_000, pane: 86_400_000, agg: rules.Sum}, win{start: 1_732_060_800_000, acc: acc{n: 1, sum: 12}}, 1_732_147_199_999, 22},
		{"session count", &spec{wtype: rules.Session, gap: 30_000, agg: rules.Count}, win{start: ts, end: ts + 30_000, acc: acc{n: 1}}, ts + 29_999, 17},
	} {
		s := newSlot("k", c.sp)
		s.wins = append(s.wins, c.w)
		s.timerAt = c.at
		if got := len(encodeSlot(nil, s)); got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, got, c.want)
		}
	}
}

// TestSlotCodecRejectsWrongKind: a slot holds the windows its spec makes,
// so sessions stored under a sliding rule are corrupt state, not panes.
func TestSlotCodecRejectsWrongKind(t *testing.T) {
	slots := testSlots()
	panes, sessions := slots[0], slots[len(slots)-1]
	if _, err := decodeSlot("k", panes.sp, encodeSlot(nil, sessions)); err == nil {
		t.Fatal("sessions decoded as panes")
	}
	_, err := decodeSlot("k", sessions.sp, encodeSlot(nil, panes))
	if err == nil {
		t.Fatal("panes decoded as sessions")
	}
	if want := `windows: state of "k": corrupt state`; err.Error() != want || !corrupt.Is(err) {
		t.Fatalf("error %q, want %q marked as corruption", err, want)
	}
	sampled := encodeSlot(nil, slots[3])
	if slots[3].distinctLevel() == 0 {
		t.Fatal("testSlots()[3] is no sampled distinct state")
	}
	if _, err := decodeSlot("k", panes.sp, sampled); err == nil {
		t.Fatal("a sampled distinct state decoded as a count's")
	}
	b := encodeSlot(nil, panes)
	b[0] = 99 // a version this build does not know
	if _, err := decodeSlot("k", panes.sp, b); err == nil || err.Error() != fmt.Sprintf(`windows: state of "k": state has version 99, want %d`, slotVersion) {
		t.Fatalf("error %v for an unknown version", err)
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
	if off := unsafe.Offsetof(s.more); off < 128 {
		t.Errorf("cold field more at byte %d, among the hot ones", off)
	}
}

// TestSlotReset: a slot with every field set, reset, equals a slot made
// empty for its key (but for num, which stays its number in the table).
func TestSlotReset(t *testing.T) {
	var s slot
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.CanSet() || v.Type().Field(i).Name == "_" {
			continue
		}
		// Unexported fields: set through their address.
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int32, reflect.Int64:
			f.SetInt(7)
		case reflect.Uint32, reflect.Uint64:
			f.SetUint(7)
		case reflect.String:
			f.SetString("old")
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 2, 2))
		case reflect.Array:
			for j := range f.Len() {
				if e := f.Index(j); e.Kind() == reflect.Uint64 {
					e.SetUint(7)
				} else {
					e.Set(reflect.ValueOf(win{start: 7, end: 7, rev: 7, fired: true, acc: acc{n: 7, sum: 7, x: &accExtra{}}}))
				}
			}
		default:
			t.Fatalf("field %s: set it here", v.Type().Field(i).Name)
		}
	}
	sp := &spec{}
	s.reset("k", sp)
	want := slot{key: "k", sp: sp, firedEnd: watermark.Min, timerAt: noTimer, storedTimer: noTimer, purgeAt: watermark.Max, ringIdx: -1, num: 7}
	if len(s.wins) != 0 || cap(s.wins) != 1 || &s.wins[:1][0] != &s.inline[0] {
		t.Fatalf("wins: len %d, cap %d, not the inline window", len(s.wins), cap(s.wins))
	}
	s.wins = nil
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("reset left %+v, want %+v", s, want)
	}
}

func TestSlotCodecRejectsCorruption(t *testing.T) {
	for _, s := range testSlots() {
		b := encodeSlot(nil, s)
		for i := range len(b) - 1 {
			if _, err := decodeSlot("k", s.sp, b[:i]); err == nil {
				t.Fatalf("%x truncated to %d of %d bytes: no error", b, i, len(b))
			}
		}
		bad := append([]byte{slotVersion - 1}, b[1:]...)
		if _, err := decodeSlot("k", s.sp, bad); err == nil {
			t.Fatal("an older version: no error")
		}
		if _, err := decodeSlot("k", s.sp, append(b, 0)); err == nil {
			t.Fatal("a trailing byte: no error")
		}
	}
}

// FuzzDecodeSlot: stored state from disk must never crash the job, under
// any spec's layout.
func FuzzDecodeSlot(f *testing.F) {
	slots := testSlots()
	for _, s := range slots {
		f.Add(encodeSlot(nil, s))
	}
	f.Add([]byte{slotVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, sp := range slots {
			s, err := decodeSlot("k", sp.sp, b)
			if err == nil {
				encodeSlot(nil, s)
			}
			ruleSlotSpan(sp.sp, b)
		}
		slotTimer(b)
	})
}

// newSlot returns an empty slot of key, outside any cache.
func newSlot(key string, sp *spec) *slot {
	s := &slot{}
	s.reset(key, sp)
	return s
}

// decodeSlot decodes b, an encoded slot of key, into a new slot.
func decodeSlot(key string, sp *spec, b []byte) (*slot, error) {
	s := newSlot(key, sp)
	return s, decodeSlotInto(s, b)
}

// sameWins reports whether a and b hold the same windows: the same fields,
// and distributions with the same encoding (a decoded one keeps a bin's
// value for each of a few values, not the values).
func sameWins(a, b []win) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		hx, hy := x.heatmap(), y.heatmap()
		if (hx == nil) != (hy == nil) || hx != nil && !bytes.Equal(hx.AppendBinary(nil), hy.AppendBinary(nil)) {
			return false
		}
		x.x, y.x = nil, nil
		if x != y || !slices.Equal(a[i].distinct(), b[i].distinct()) {
			return false
		}
	}
	return true
}

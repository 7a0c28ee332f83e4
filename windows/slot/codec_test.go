package slot

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
// FiredEnd and fired windows.
func testSlots() []*Slot {
	sliding := func(agg rules.AggregateKind) *Spec {
		return &Spec{WindowType: rules.Sliding, Size: 10, Slide: 5, Pane: 5, Agg: agg}
	}
	hm := heatmap.New(2)
	hm.Add(1.5, true, []float64{1, 2}, nil)
	q := heatmap.New(1)
	q.Add(7, false, nil, nil)
	var slots []*Slot
	add := func(sp *Spec, wins []Win, timerAt int64) *Slot {
		s := New("\x00\x01\"k\"\x00", sp)
		s.Wins = append(s.Wins, wins...)
		s.TimerAt = timerAt
		slots = append(slots, s)
		return s
	}
	add(sliding(rules.Count), []Win{{Start: -5, Acc: Acc{N: 2}}, {Start: 0, Acc: Acc{N: 1}}, {Start: 25, Acc: Acc{N: 300}}}, 34)
	add(&Spec{WindowType: rules.Tumbling, Size: 86_400_000, Slide: 86_400_000, Pane: 86_400_000, Agg: rules.Sum},
		[]Win{{Start: 1_732_147_200_000, Acc: Acc{N: 3, Sum: -12.25}}}, 1_732_233_599_999)
	add(sliding(rules.Distinct), []Win{{Start: 10, Acc: Acc{N: 2, X: &AccExtra{distinct: []uint64{1, 9}}}}}, NoTimer)
	s := add(sliding(rules.Distinct), []Win{{Start: 0, Acc: Acc{N: 9, X: &AccExtra{distinct: []uint64{3, 1 << 60}}}}, {Start: 5, Acc: Acc{N: 1}}}, 19)
	s.Extra().distinctLevel = 3 // sampled: values with the top 3 bits 0
	add(sliding(rules.Quantile), []Win{{Start: 0, Acc: Acc{N: 1, X: &AccExtra{Heatmap: q}}}}, 14)
	heat := sliding(rules.Count)
	heat.Heatmap, heat.Bounds = &rules.Heatmap{}, []float64{1, 2}
	s = add(heat, []Win{{Start: -5, Acc: Acc{N: 1, X: &AccExtra{Heatmap: hm}}}, {Start: 0}}, 9)
	s.Extra().fired = []firedWin{{Start: -10, rev: 2}, {Start: -5, rev: 0}}
	s.FiredEnd = 5
	s = add(heat, nil, NoTimer) // only windows kept for lateness
	s.Extra().fired = []firedWin{{Start: 1_000_000, rev: 1}}
	s.FiredEnd = 1_000_010
	add(&Spec{WindowType: rules.Session, Gap: 6, Agg: rules.Count},
		[]Win{{Start: 1, End: 7, Fired: true, Rev: 3, Acc: Acc{N: 4}}, {Start: 8, End: 14, Acc: Acc{N: 1}}, {Start: 40, End: 52, Acc: Acc{N: 2}}}, 51)
	add(&Spec{WindowType: rules.Session, Gap: 6, Agg: rules.Max}, []Win{{Start: -100, End: -94, Acc: Acc{N: 1, Sum: 2}}}, -95)
	return slots
}

func TestSlotCodecRoundTrip(t *testing.T) {
	for i, s := range testSlots() {
		b := Encode(nil, s)
		got, err := Decode(s.Key, s.Spec, b)
		if err != nil {
			t.Fatalf("slot %d: %v", i, err)
		}
		if again := Encode(nil, got); !reflect.DeepEqual(again, b) {
			t.Fatalf("slot %d: re-encoding a decoded slot changes it", i)
		}
		if !sameWins(got.Wins, s.Wins) ||
			!reflect.DeepEqual(got.FiredWins(), s.FiredWins()) || got.FiredEnd != s.FiredEnd || got.TimerAt != s.TimerAt || got.DistinctLevel() != s.DistinctLevel() {
			t.Fatalf("slot %d: decoded slot differs:\n got %+v\nwant %+v", i, got, s)
		}
		if got.StoredTimer != s.TimerAt {
			t.Fatalf("slot %d: stored timer %d, want the timer %d", i, got.StoredTimer, s.TimerAt)
		}
		if at, err := EncodedTimer(b); err != nil || at != s.TimerAt {
			t.Fatalf("slot %d: slotTimer = %d, %v; want %d", i, at, err, s.TimerAt)
		}
		if s.Spec.Heatmap != nil {
			continue
		}
		at, last, err := ruleSlotSpan(s.Spec, b)
		want := watermark.Min
		if n := len(s.Wins); n > 0 {
			want = s.Wins[n-1].Start
			if s.Spec.WindowType == rules.Session {
				want = s.Wins[n-1].End
			}
		}
		if err != nil || at != s.TimerAt || last != want {
			t.Fatalf("slot %d: ruleSlotSpan = %d, %d, %v; want %d, %d", i, at, last, err, s.TimerAt, want)
		}
	}
}

// TestSlotCodecSizes: a state with one window costs close to its
// information (docs/format/state.md "Memory" gives these sizes).
func TestSlotCodecSizes(t *testing.T) {
	const ts = 1_732_150_007_000
	for _, c := range []struct {
		name string
		sp   *Spec
		w    Win
		at   int64
		want int
	}{
		{"one-pane sliding count", &Spec{WindowType: rules.Sliding, Size: 60_000, Slide: 1000, Pane: 1000, Agg: rules.Count}, Win{Start: ts, Acc: Acc{N: 1}}, ts + 60_999, 13},
		{"24 h tumbling sum", &Spec{WindowType: rules.Tumbling, Size: 86_400_000, Slide: 86_400_000, Pane: 86_400_000, Agg: rules.Sum}, Win{Start: 1_732_060_800_000, Acc: Acc{N: 1, Sum: 12}}, 1_732_147_199_999, 22},
		{"session count", &Spec{WindowType: rules.Session, Gap: 30_000, Agg: rules.Count}, Win{Start: ts, End: ts + 30_000, Acc: Acc{N: 1}}, ts + 29_999, 17},
	} {
		s := New("k", c.sp)
		s.Wins = append(s.Wins, c.w)
		s.TimerAt = c.at
		if got := len(Encode(nil, s)); got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, got, c.want)
		}
	}
}

// TestSlotCodecRejectsWrongKind: a slot holds the windows its spec makes,
// so sessions stored under a sliding rule are corrupt state, not panes.
func TestSlotCodecRejectsWrongKind(t *testing.T) {
	slots := testSlots()
	panes, sessions := slots[0], slots[len(slots)-1]
	if _, err := Decode("k", panes.Spec, Encode(nil, sessions)); err == nil {
		t.Fatal("sessions decoded as panes")
	}
	_, err := Decode("k", sessions.Spec, Encode(nil, panes))
	if err == nil {
		t.Fatal("panes decoded as sessions")
	}
	if want := `windows: state of "k": corrupt state`; err.Error() != want || !corrupt.Is(err) {
		t.Fatalf("error %q, want %q marked as corruption", err, want)
	}
	sampled := Encode(nil, slots[3])
	if slots[3].DistinctLevel() == 0 {
		t.Fatal("testSlots()[3] is no sampled distinct state")
	}
	if _, err := Decode("k", panes.Spec, sampled); err == nil {
		t.Fatal("a sampled distinct state decoded as a count's")
	}
	b := Encode(nil, panes)
	b[0] = 99 // a version this build does not know
	if _, err := Decode("k", panes.Spec, b); err == nil || err.Error() != fmt.Sprintf(`windows: state of "k": state has version 99, want %d`, slotVersion) {
		t.Fatalf("error %v for an unknown version", err)
	}
}

// TestSlotLayout keeps what an event touches in a slot within its first
// two cache lines, and the slot in a size class whose objects are 64-byte
// aligned (see slot).
func TestSlotLayout(t *testing.T) {
	var s Slot
	if size := unsafe.Sizeof(s); size != 192 {
		t.Errorf("slot is %d bytes, want 192", size)
	}
	if end := unsafe.Offsetof(s.ID) + unsafe.Sizeof(s.ID); end > 128 {
		t.Errorf("the hot fields end at byte %d, past two cache lines", end)
	}
	if off := unsafe.Offsetof(s.More); off < 128 {
		t.Errorf("cold field more at byte %d, among the hot ones", off)
	}
}

// TestSlotReset: a slot with every field set, reset, equals a slot made
// empty for its key (but for num, which stays its number in the table).
func TestSlotReset(t *testing.T) {
	var s Slot
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if v.Type().Field(i).Name == "_" {
			continue
		}
		// Set through its address, which unexported fields need.
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
					e.Set(reflect.ValueOf(Win{Start: 7, End: 7, Rev: 7, Fired: true, Acc: Acc{N: 7, Sum: 7, X: &AccExtra{}}}))
				}
			}
		default:
			t.Fatalf("field %s: set it here", v.Type().Field(i).Name)
		}
	}
	sp := &Spec{}
	s.Reset("k", sp)
	want := Slot{Key: "k", Spec: sp, FiredEnd: watermark.Min, TimerAt: NoTimer, StoredTimer: NoTimer, purgeAt: watermark.Max, RingIdx: -1, Num: 7}
	if len(s.Wins) != 0 || cap(s.Wins) != 1 || &s.Wins[:1][0] != &s.Inline[0] {
		t.Fatalf("wins: len %d, cap %d, not the inline window", len(s.Wins), cap(s.Wins))
	}
	s.Wins = nil
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("reset left %+v, want %+v", s, want)
	}
}

func TestSlotCodecRejectsCorruption(t *testing.T) {
	for _, s := range testSlots() {
		b := Encode(nil, s)
		for i := range len(b) - 1 {
			if _, err := Decode("k", s.Spec, b[:i]); err == nil {
				t.Fatalf("%x truncated to %d of %d bytes: no error", b, i, len(b))
			}
		}
		bad := append([]byte{slotVersion - 1}, b[1:]...)
		if _, err := Decode("k", s.Spec, bad); err == nil {
			t.Fatal("an older version: no error")
		}
		if _, err := Decode("k", s.Spec, append(b, 0)); err == nil {
			t.Fatal("a trailing byte: no error")
		}
	}
}

// FuzzDecodeSlot: stored state from disk must never crash the job, under
// any spec's layout.
func FuzzDecodeSlot(f *testing.F) {
	slots := testSlots()
	for _, s := range slots {
		f.Add(Encode(nil, s))
	}
	f.Add([]byte{slotVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, sp := range slots {
			s, err := Decode("k", sp.Spec, b)
			if err == nil {
				Encode(nil, s)
			}
			ruleSlotSpan(sp.Spec, b)
		}
		EncodedTimer(b)
	})
}

// sameWins reports whether a and b hold the same windows: the same fields,
// and distributions with the same encoding (a decoded one keeps a bin's
// value for each of a few values, not the values).
func sameWins(a, b []Win) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		hx, hy := x.Heatmap(), y.Heatmap()
		if (hx == nil) != (hy == nil) || hx != nil && !bytes.Equal(hx.AppendBinary(nil), hy.AppendBinary(nil)) {
			return false
		}
		x.X, y.X = nil, nil
		if x != y || !slices.Equal(a[i].Distinct(), b[i].Distinct()) {
			return false
		}
	}
	return true
}

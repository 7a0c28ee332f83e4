package watermark

import "testing"

func TestValve(t *testing.T) {
	v := NewValve([]int32{0, 1})
	steps := []struct {
		id   int32
		wm   int64
		idle bool
		want int64
	}{
		{0, 100, false, Min}, // 1 has not reported
		{1, 50, false, 50},
		{1, 200, false, 100},
		{0, 90, false, 100}, // a channel's watermark never goes back
		{0, 150, true, 200}, // 0 idle: 1 alone
		{1, 300, false, 300},
		{0, 160, false, 300}, // back from idle behind: the valve never goes back
		{1, 400, false, 300},
		{0, 500, false, 400},
		{0, 600, true, 400},
		{1, 400, true, 400},  // every channel idle: it stays
		{2, 450, false, 450}, // an unknown channel is added
	}
	for i, s := range steps {
		if got := v.Set(s.id, s.wm, s.idle); got != s.want {
			t.Fatalf("step %d: Set(%d, %d, %v) = %d, want %d", i, s.id, s.wm, s.idle, got, s.want)
		}
	}
	if v.Channel(7) != Min || v.Set(2, 460, false) != 460 {
		t.Fatal("asking for an unknown channel's watermark added it to the valve")
	}
	b := v.AppendBinary(nil)
	r, rest, err := DecodeValve(b)
	if err != nil || len(rest) != 0 {
		t.Fatalf("DecodeValve: %v (%d bytes left)", err, len(rest))
	}
	if string(r.AppendBinary(nil)) != string(b) || r.Current() != 460 || r.Channel(1) != 400 {
		t.Fatalf("decoded valve differs: current %d, channel 1 at %d", r.Current(), r.Channel(1))
	}
	for n := range len(b) {
		if _, _, err := DecodeValve(b[:n]); err == nil {
			t.Errorf("DecodeValve of %d of %d bytes: no error", n, len(b))
		}
	}
}

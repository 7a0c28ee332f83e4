package rules

import (
	"testing"
	"time"
)

func TestWindowString(t *testing.T) {
	for _, tc := range []struct {
		w    Window
		want string
	}{
		{Window{Type: Tumbling, Size: 10 * time.Second}, "tumbling(10s)"},
		{Window{Type: Sliding, Size: time.Minute, Slide: time.Second}, "sliding(60s/1s)"},
		{Window{Type: Sliding, Size: 2 * time.Hour, Slide: 1500 * time.Millisecond}, "sliding(2h/1500ms)"},
		{Window{Type: Session, Gap: 90 * time.Minute}, "session(5400s)"},
		{Window{Type: Session, Gap: 250 * time.Millisecond}, "session(250ms)"},
	} {
		if got := tc.w.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.w, got, tc.want)
		}
	}
}

// TestReserved checks that every reserved field is refused as an attribute,
// with a reason of its own.
func TestReserved(t *testing.T) {
	for _, name := range Reserved {
		p := attrProblem(name)
		if p == "" || p == name+" is reserved for the event envelope" {
			t.Errorf("attrProblem(%q) = %q, want a specific reason", name, p)
		}
	}
}

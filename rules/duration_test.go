package rules

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "1m30s", want: 90 * time.Second},
		{in: "-2s", want: -2 * time.Second},
		{in: "0.5s", want: 500 * time.Millisecond},
		{in: "876000h", want: maxDuration},
		{in: "60", err: "durations need a unit, e.g. 2s (got 60)"},
		{in: ".5", err: "durations need a unit, e.g. 2s (got .5)"},
		{in: "inf", err: `"inf" is not a duration: use Go syntax such as 250ms, 2s or 1m`},
		{in: "1500us", err: `"1500us" is not a whole number of milliseconds`},
		{in: "876000h1ms", err: `"876000h1ms" is too long: at most 876000h (100 years)`},
		{in: "3000000h", err: `"3000000h" is too long: at most 876000h (100 years)`},
		{in: "2 s", err: `"2 s" is not a duration: use Go syntax such as 250ms, 2s or 1m`},
	} {
		got, err := parseDuration(tc.in)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("parseDuration(%q) error = %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("parseDuration(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

package event

import (
	"testing"
	"time"
)

func TestParseTimeMillis(t *testing.T) {
	tests := map[string]struct {
		in   string
		want int64
		ok   bool
	}{
		"utc":                       {"2024-11-21T01:26:40Z", 1732152400000, true},
		"epoch":                     {"1970-01-01T00:00:00Z", 0, true},
		"year zero":                 {"0000-01-01T00:00:00Z", -62167219200000, true},
		"year 9999":                 {"9999-12-31T23:59:59.999Z", 253402300799999, true},
		"nanoseconds truncated":     {"2024-11-21T01:26:40.999999999Z", 1732152400999, true},
		"more than nine digits":     {"2024-11-21T01:26:40.1239999999999Z", 1732152400123, true},
		"one digit":                 {"2024-11-21T01:26:40.1Z", 1732152400100, true},
		"offset":                    {"2024-11-21T09:26:40+08:00", 1732152400000, true},
		"negative offset":           {"2024-11-20T21:26:40-04:00", 1732152400000, true},
		"before epoch":              {"1969-12-31T23:59:59.999Z", -1, true},
		"before epoch, truncated":   {"1969-12-31T23:59:59.0001Z", -1000, true},
		"leap day":                  {"2000-02-29T00:00:00Z", 951782400000, true},
		"no leap day in 1900":       {"1900-02-29T00:00:00Z", 0, false},
		"no leap day in 2023":       {"2023-02-29T00:00:00Z", 0, false},
		"april 31":                  {"2024-04-31T00:00:00Z", 0, false},
		"hour 24":                   {"2024-11-21T24:00:00Z", 0, false},
		"second 60":                 {"2024-11-21T23:59:60Z", 0, false},
		"no zone":                   {"2024-11-21T01:26:40", 0, false},
		"lowercase":                 {"2024-11-21t01:26:40z", 0, false},
		"space":                     {"2024-11-21 01:26:40Z", 0, false},
		"dot without digits":        {"2024-11-21T01:26:40.Z", 0, false},
		"offset without colon":      {"2024-11-21T01:26:40+0800", 0, false},
		"comma fraction (fallback)": {"2024-11-21T01:26:40,5Z", 1732152400500, true},
		"one-digit hour (fallback)": {"2024-11-21T1:26:40Z", 1732152400000, true},
		"empty":                     {"", 0, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ParseTimeMillis([]byte(tt.in))
			if ok != tt.ok || ok && got != tt.want {
				t.Errorf("parseTimeMillis(%q) = %d, %v, want %d, %v", tt.in, got, ok, tt.want, tt.ok)
			}
			tm, err := time.Parse(time.RFC3339Nano, tt.in)
			if (err == nil) != tt.ok || err == nil && tm.UnixMilli() != tt.want {
				t.Errorf("the table disagrees with time.Parse: %v, %v", tm.UnixMilli(), err)
			}
		})
	}
}

func TestParseTimeDoesNotAllocate(t *testing.T) {
	for _, s := range []string{"2024-11-21T01:26:40.123Z", "2024-11-21T09:26:40.123+08:00"} {
		b := []byte(s)
		if n := testing.AllocsPerRun(100, func() { ParseTimeMillis(b) }); n != 0 {
			t.Errorf("parseTimeMillis(%s) allocates %v times", s, n)
		}
	}
}

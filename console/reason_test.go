package console

import "testing"

// TestReasonKind: a dlq reason's varying numbers (offsets, sizes, ids)
// count as one kind; numbers that are part of a name (RFC 3339, int64) are
// kept.
func TestReasonKind(t *testing.T) {
	for in, want := range map[string]string{
		`ts: want integer epoch milliseconds or an RFC 3339 string, got "x" at byte 17`: `ts: want integer epoch milliseconds or an RFC 3339 string, got "x" at byte #`,
		`line 12: 4096 bytes, more than 1024`:                                           `line #: # bytes, more than #`,
		`latency_ms: not an int64: 1e400`:                                               `latency_ms: not an int64: #e#`,
		`duplicate of r-000123`:                                                         `duplicate of r-#`,
	} {
		if got := reasonKind(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

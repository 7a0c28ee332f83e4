package event

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestShortNumberMatchesParseNumber checks the word-at-a-time conversion
// against parseNumber, to the bit, for numbers it takes and numbers it must
// leave to parseNumber, at the end of a record and not.
func TestShortNumberMatchesParseNumber(t *testing.T) {
	numbers := []string{
		"0", "7", "12.5", "99.0", "0.1", "0.3", "200", "12345678", "9999999.9", "0.000001",
		"1.2345678", "123456.78", "5.0000001", "99999999", "0.9999999",
		// Not short: parseNumber's.
		"-1", "-0.5", "1e5", "1.5e3", "1E+2", "123456789", "1234567.89", "1.23456789",
	}
	for i := range 2000 {
		numbers = append(numbers, strconv.FormatFloat(float64(i)*1.37, 'f', i%5, 64))
	}
	for _, s := range numbers {
		for _, tail := range []string{"", "}", ",\"abcdefgh\":1}"} {
			b := []byte(s + tail)
			got, ok := shortNumber(b, 0, len(s))
			want, wantOK := parseNumber([]byte(s))
			short := len(s) <= 8 && len(b) >= 8 && s[0] != '-' && !strings.ContainsAny(s, "eE")
			if ok != short || ok && math.Float64bits(got) != math.Float64bits(want) || !wantOK {
				t.Fatalf("shortNumber(%q) = %v, %v; parseNumber gives %v, %v; short %v", b, got, ok, want, wantOK, short)
			}
		}
	}
}

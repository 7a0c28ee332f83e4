package event

import (
	"math"
	"strconv"
	"testing"
)

func TestParseMillis(t *testing.T) {
	tests := map[string]struct {
		lit  string
		want int64
		ok   bool
	}{
		"zero":             {"0", 0, true},
		"minus zero":       {"-0", 0, true},
		"seven digits":     {"1234567", 1234567, true},
		"eight digits":     {"12345678", 12345678, true},
		"thirteen digits":  {"1732150000123", 1732150000123, true},
		"negative":         {"-1732150000123", -1732150000123, true},
		"max":              {"9007199254740992", MaxTS, true},
		"min":              {"-9007199254740992", MinTS, true},
		"above max":        {"9007199254740993", 0, false},
		"below min":        {"-9007199254740993", 0, false},
		"max uint64":       {"18446744073709551615", 0, false},
		"nineteen digits":  {"9999999999999999999", 0, false},
		"twenty digits":    {"99999999999999999999", 0, false},
		"max int64":        {"9223372036854775807", 0, false},
		"wraps to small":   {"18446744073709551617", 0, false},
		"sixteen, leading": {"1000000000000001", 1000000000000001, true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := parseMillis([]byte(tt.lit))
			if ok != tt.ok || ok && got != tt.want {
				t.Errorf("parseMillis(%s) = %d, %v, want %d, %v", tt.lit, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestEightDigits(t *testing.T) {
	for _, n := range []uint64{0, 1, 9, 10, 12345678, 87654321, 99999999, 10000000, 1000001} {
		s := []byte(strconv.FormatUint(n+100000000, 10)[1:]) // zero-padded to eight
		x := uint64(0)
		for i := 7; i >= 0; i-- {
			x = x<<8 | uint64(s[i])
		}
		if got := eightDigits(x); got != n {
			t.Errorf("eightDigits(%s) = %d", s, got)
		}
	}
}

// TestNonDigits checks the word-at-a-time digit test against isDigit for
// every byte value in every position.
func TestNonDigits(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			x := uint64(0)
			for i := 7; i >= 0; i-- {
				b := uint64('5')
				if i == pos {
					b = uint64(c)
				}
				x = x<<8 | b
			}
			m := nonDigits(x)
			first := 8
			for k := range 8 {
				if m&(0x80<<(8*k)) != 0 {
					first = k
					break
				}
			}
			want := 8
			if !isDigit(byte(c)) {
				want = pos
			}
			if first != want {
				t.Fatalf("byte %#x at %d: first non-digit at %d, want %d", c, pos, first, want)
			}
		}
	}
}

func TestParseNumber(t *testing.T) {
	for _, s := range []string{
		"0", "-0", "-0.0", "12.5", "99.0", "0.1", "0.3", "1732150000123", "9007199254740992",
		"9007199254740993", "123456789012345678901", "0.000000000000000000000001", "1e22",
		"1.5e-3", "-2.5E+3", "4.9e-324", "1.7976931348623157e308", "3.14159265358979323846",
		"0.1234567890123456789", "1234567890123456789", "12345678901234567890",
	} {
		want, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := parseNumber([]byte(s))
		if !ok || math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("parseNumber(%s) = %v, %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"1e309", "-1e400", "123456789e999"} {
		if got, ok := parseNumber([]byte(s)); ok {
			t.Errorf("parseNumber(%s) = %v, want out of range", s, got)
		}
	}
}

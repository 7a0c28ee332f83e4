package event

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unsafe"
)

// parseMillis parses a JSON integer literal (the scanner has checked its
// syntax) as epoch milliseconds, and reports whether it is in [MinTS, MaxTS].
func parseMillis(lit []byte) (int64, bool) {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	// 19 digits cannot overflow a uint64, and anything longer is out of
	// range anyway.
	if len(lit) > 19 {
		return 0, false
	}
	var u uint64
	if n := len(lit); n < 8 {
		for _, c := range lit {
			u = u*10 + uint64(c-'0')
		}
	} else {
		// Eight digits at a time, then the last eight, of which those
		// already counted are cleared: zeros in front add nothing.
		k := 0
		for ; n-k > 8; k += 8 {
			u = u*1e8 + eightDigits(binary.LittleEndian.Uint64(lit[k:]))
		}
		last := binary.LittleEndian.Uint64(lit[n-8:])
		last &^= 1<<(8*(k-(n-8))) - 1
		u = u*uint64pow10[n-k] + eightDigits(last)
	}
	if u > uint64(MaxTS) {
		return 0, false
	}
	if neg {
		return -int64(u), -int64(u) >= MinTS
	}
	return int64(u), true
}

// uint64pow10 holds the powers of ten up to eight digits.
var uint64pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// eightDigits returns the value of the eight ASCII digits in x, the first in
// the lowest byte, combining neighbours in three multiplications (D. Lemire's
// method): pairs into bytes, then into 16-bit halves, then the whole.
func eightDigits(x uint64) uint64 {
	x = ((x & 0x0f0f0f0f0f0f0f0f) * (10<<8 + 1)) >> 8
	x = ((x & 0x00ff00ff00ff00ff) * (100<<16 + 1)) >> 16
	return ((x & 0x0000ffff0000ffff) * (10000<<32 + 1)) >> 32
}

// pow10 holds the powers of ten that a float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseNumber returns the value of a JSON number the scanner has checked,
// rounded as strconv.ParseFloat rounds it, and false when it does not fit a
// float64. Numbers like 12.5 or 1732150000123 have a mantissa and a power
// of ten that are both exact float64s, and one multiplication or division of
// exact operands is correctly rounded, so they are converted here;
// strconv.ParseFloat, several times slower, takes the others.
func parseNumber(text []byte) (float64, bool) {
	i := 0
	neg := text[0] == '-'
	if neg {
		i++
	}
	var mant uint64
	digits, exp := 0, 0
	for ; i < len(text) && isDigit(text[i]); i++ {
		mant = mant*10 + uint64(text[i]-'0')
		digits++
	}
	if i < len(text) && text[i] == '.' {
		for i++; i < len(text) && isDigit(text[i]); i++ {
			mant = mant*10 + uint64(text[i]-'0')
			digits++
			exp--
		}
	}
	if i < len(text) {
		// An exponent: leave it to strconv, it is rare in events.
		return parseFloat(text)
	}
	// Beyond 19 digits mant may have overflowed.
	if digits > 19 || mant > 1<<53 || -exp >= len(pow10) {
		return parseFloat(text)
	}
	f := float64(mant) / pow10[-exp]
	if neg {
		f = -f
	}
	return f, true
}

// shortNumber is parseNumber for the commonest numbers, like 12.5 or 200:
// unsigned, with no exponent and at most eight bytes, which it converts as a
// word. The number is b[start:end], which the scanner has checked, and b must
// have eight bytes from start. It reports false for any other number.
func shortNumber(b []byte, start, end int) (float64, bool) {
	n := end - start
	if n > 8 || start+8 > len(b) {
		return 0, false
	}
	// The number's bytes go to the top of the word, and '0's below them,
	// which, as leading zeros, do not change its value.
	w := load64(b, start)<<(64-8*n) | '0'*ones>>(8*n)
	scale := 0
	if m := nonDigits(w); m != 0 {
		// The lowest byte that is not a digit must be a '.', with only
		// digits above it: remove it, moving the bytes below it up.
		dot := bits.TrailingZeros64(m) >> 3
		if byte(w>>(8*dot)) != '.' {
			return 0, false
		}
		below := uint64(1)<<(8*dot) - 1
		w = w&^(below<<8|below) | (w&below)<<8 | '0'
		if nonDigits(w) != 0 {
			return 0, false
		}
		scale = 7 - dot
	}
	// As parseNumber: one exact division, correctly rounded.
	return float64(int64(eightDigits(w))) / pow10[scale], true
}

// parseFloat is strconv.ParseFloat without copying text into a string.
func parseFloat(text []byte) (float64, bool) {
	// text is only read during the call; an error (which would keep a copy)
	// is dropped.
	f, err := strconv.ParseFloat(unsafe.String(&text[0], len(text)), 64)
	return f, err == nil
}

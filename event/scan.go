package event

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// The scanner validates JSON syntax in one pass without building anything:
// the decoder only needs to know where each top-level value starts and ends,
// what type it is, and whether a string needs unescaping. Everything else
// (nested values, unknown fields) is checked and skipped.

// maxDepth bounds the nesting of objects and arrays, the top-level object
// included. It is encoding/json's limit, so that Decode accepts exactly what
// json.Valid accepts; the scanner is iterative, so a level costs one bit of
// the Decoder's stack, never a goroutine stack frame.
const maxDepth = 10000

// Kinds of scanned values: the byte a value starts with, except that every
// number is kNumber. The zero kind means absent.
const (
	kAbsent byte = 0
	kString byte = '"'
	kNumber byte = '0'
	kTrue   byte = 't'
	kFalse  byte = 'f'
	kNull   byte = 'n'
	kObject byte = '{'
	kArray  byte = '['
)

// Flags the scanner records about a value, so that decoding it later can take
// the fast path without looking at its bytes again.
const (
	// fEscaped: the string has a backslash escape.
	fEscaped uint8 = 1 << iota
	// fHigh: the string has bytes >= 0x80, which may be invalid UTF-8.
	fHigh
	// fInt: the number has no fraction and no exponent.
	fInt
)

// Classes of bytes inside a string, for the scanner's inner loop.
const (
	cPlain uint8 = iota
	cQuote
	cBackslash
	cControl
	cHigh
)

// strClass classifies every byte value, for the slow path of scanString.
var strClass = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c < 0x20:
			t[c] = cControl
		case c == '"':
			t[c] = cQuote
		case c == '\\':
			t[c] = cBackslash
		case c >= 0x80:
			t[c] = cHigh
		}
	}
	return t
}()

// skipWS returns the index of the first byte at or after i that is not JSON
// whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// load64 returns b[i:i+8] as a little-endian word, for a caller that has
// checked that 0 <= i and i+8 <= len(b). binary.LittleEndian.Uint64(b[i:])
// would check again, and in the scanner's inner loops the checks (and the
// masking of b[i:]) cost as much as the load itself.
func load64(b []byte, i int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), i))[:])
}

// scanString scans the string whose opening quote is at b[i] and returns the
// index after its closing quote.
func scanString(b []byte, i int) (int, uint8, error) {
	j := skipPlain(b, i+1)
	if j < len(b) && b[j] == '"' {
		return j + 1, 0, nil
	}
	return scanStringFrom(b, i, j)
}

// skipPlain returns the index of the first byte at or after i that is not
// plain string text, looking at eight bytes at a time; when fewer than eight
// remain before it finds one, it returns where it stopped.
func skipPlain(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := specialBytes(load64(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	return i
}

// shortString is the fast path for the many keys that are plain strings of
// fewer than eight bytes: when the body that starts at b[i] is one, it
// returns its length and its bytes as a little-endian word.
func shortString(b []byte, i int) (int, uint64, bool) {
	if i+8 > len(b) {
		return 0, 0, false
	}
	x := load64(b, i)
	n := bits.TrailingZeros64(specialBytes(x)) >> 3
	// With no special byte n is 8, and the shift yields 0.
	if byte(x>>(8*n)) != '"' {
		return 0, 0, false
	}
	return n, x & (1<<(8*n) - 1), true
}

// scanStringFrom is scanString for strings that are not plain or end in the
// last bytes of b: it goes on from b[i], the bytes before which (from the
// opening quote at b[start]) are plain.
func scanStringFrom(b []byte, start, i int) (int, uint8, error) {
	var flags uint8
	for {
		i = skipPlain(b, i)
		if i >= len(b) {
			return 0, 0, unterminated(start)
		}
		switch strClass[b[i]] {
		case cPlain:
			i++
		case cQuote:
			return i + 1, flags, nil
		case cHigh:
			flags |= fHigh
			i++
		case cBackslash:
			flags |= fEscaped
			if i+1 >= len(b) {
				return 0, 0, unterminated(start)
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(b) {
						return 0, 0, unterminated(start)
					}
					if hexValue(b[k]) < 0 {
						return 0, 0, syntaxError("invalid \\u escape at byte %d", i)
					}
				}
				i += 6
			default:
				return 0, 0, syntaxError("invalid escape %s at byte %d", quoteBytes(b[i:i+2]), i)
			}
		default:
			return 0, 0, syntaxError("control character 0x%02x in string at byte %d", b[i], i)
		}
	}
}

// Bytes repeated in a word, for specialBytes.
const (
	ones        = 0x0101010101010101
	highs       = 0x80 * ones
	quotes      = '"' * ones
	backslashes = '\\' * ones
	spaces      = ' ' * ones
)

// specialBytes returns x (eight string bytes, little-endian) with the high
// bit set in the lowest byte that is not cPlain, and possibly in bytes above
// it, but in no byte below it. A subtraction sets a byte's high bit when the
// byte is zero (after the xor: equal to '"' or '\\') or below 0x20 (a
// control character), and otherwise only when the byte is >= 0x80, which
// the final "| x" flags anyway; it borrows only out of a flagged byte.
func specialBytes(x uint64) uint64 {
	// The parentheses matter: in Go, | binds like -, not tighter.
	return (((x ^ quotes) - ones) | ((x ^ backslashes) - ones) | (x - spaces) | x) & highs
}

// scanNumber scans the number that starts at b[i] (with '-' or a digit) and
// returns the index after it, and fInt if it is an integer literal.
func scanNumber(b []byte, i int) (int, uint8, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return 0, 0, unexpectedIn(b, i, " in number")
	}
	flags := fInt
	if i < len(b) && b[i] == '.' {
		flags = 0
		j := skipDigits(b, i+1)
		if j == i+1 {
			return 0, 0, unexpectedIn(b, j, " in number")
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		flags = 0
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return 0, 0, unexpectedIn(b, j, " in number")
		}
		i = j
	}
	return i, flags, nil
}

// skipDigits returns the index of the first byte at or after i that is not a
// digit, eight bytes at a time: timestamps have thirteen.
func skipDigits(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if m := nonDigits(load64(b, i)); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// nonDigits is like specialBytes, for bytes that are not ASCII digits: the
// subtraction flags bytes below '0' and the addition bytes above '9'. Only
// flagged bytes borrow or carry (a carry out of a byte >= 0xba clears its
// high bit, which is why "| x" flags those again).
func nonDigits(x uint64) uint64 {
	return ((x - '0'*ones) | (x + (0x7f-'9')*ones) | x) & highs
}

// scanLiteral scans lit (true, false or null), whose first byte is at b[i].
func scanLiteral(b []byte, i int, lit string) (int, error) {
	for k := 1; k < len(lit); k++ {
		if i+k >= len(b) || b[i+k] != lit[k] {
			return 0, unexpected(b, i+k)
		}
	}
	return i + len(lit), nil
}

// scanValue scans the value at b[i], which is nested in depth objects and
// arrays, and returns the index after it, its kind and its flags.
func (d *Decoder) scanValue(b []byte, i, depth int) (int, byte, uint8, error) {
	if i >= len(b) {
		return 0, 0, 0, unexpected(b, i)
	}
	switch c := b[i]; c {
	case '"':
		end, flags, err := scanString(b, i)
		return end, kString, flags, err
	case '{', '[':
		end, err := d.skipNested(b, i, depth)
		return end, c, 0, err
	case 't':
		end, err := scanLiteral(b, i, "true")
		return end, kTrue, 0, err
	case 'f':
		end, err := scanLiteral(b, i, "false")
		return end, kFalse, 0, err
	case 'n':
		end, err := scanLiteral(b, i, "null")
		return end, kNull, 0, err
	default:
		if c == '-' || isDigit(c) {
			end, flags, err := scanNumber(b, i)
			return end, kNumber, flags, err
		}
		return 0, 0, 0, unexpected(b, i)
	}
}

// skipNested scans the object or array that opens at b[i], nested in outer
// objects and arrays, and returns the index after it. It keeps one bit per
// open level (array or object) in d.stack instead of recursing, so that
// hostile nesting costs neither stack nor time beyond the linear scan.
func (d *Decoder) skipNested(b []byte, i, outer int) (int, error) {
	depth := outer
	var err error

open: // b[i] opens a container at level depth.
	if depth >= maxDepth {
		return 0, syntaxError("nesting deeper than %d levels at byte %d", maxDepth, i)
	}
	if b[i] == '[' {
		d.stack[depth>>6] |= 1 << (depth & 63)
	} else {
		d.stack[depth>>6] &^= 1 << (depth & 63)
	}
	depth++
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == d.closer(depth) {
		i++
		goto closed
	}

element: // b[i] should start an element of the innermost container.
	if d.closer(depth) == '}' {
		if i >= len(b) || b[i] != '"' {
			return 0, unexpected(b, i)
		}
		if i, _, err = scanString(b, i); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i >= len(b) || b[i] != ':' {
			return 0, unexpected(b, i)
		}
		i = skipWS(b, i+1)
	}
	if i < len(b) && (b[i] == '{' || b[i] == '[') {
		goto open
	}
	if i, _, _, err = d.scanValue(b, i, depth); err != nil {
		return 0, err
	}

next: // A value ended before b[i]: what follows must continue or close it.
	i = skipWS(b, i)
	if i < len(b) && b[i] == ',' {
		i = skipWS(b, i+1)
		goto element
	}
	if i >= len(b) || b[i] != d.closer(depth) {
		return 0, unexpected(b, i)
	}
	i++

closed: // The container at level depth just closed.
	depth--
	if depth > outer {
		goto next
	}
	return i, nil
}

// closer is the byte that closes the container open at level depth-1.
func (d *Decoder) closer(depth int) byte {
	level := depth - 1
	if d.stack[level>>6]&(1<<(level&63)) != 0 {
		return ']'
	}
	return '}'
}

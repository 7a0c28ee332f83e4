package event

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Canonical string text is what makes equal strings have equal bytes, so that
// keys built from Value.Text group the same string however it was written
// ("\u0061" and "a"). It escapes only what JSON requires, so that most strings
// as written are already canonical and can be used without copying.

const hexDigits = "0123456789abcdef"

// AppendString appends s as canonical JSON string text, quotes included: the
// encoding Value.Text and Event.ID use, so that other packages writing output
// JSON produce the same bytes for the same string. Only '"', '\' and control
// characters are escaped; invalid UTF-8 becomes U+FFFD.
func AppendString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendCanonicalRune(dst, rune(c))
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = utf8.AppendRune(dst, utf8.RuneError)
			start = i + 1
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendCanonicalRune appends r as it appears inside canonical string text.
func appendCanonicalRune(dst []byte, r rune) []byte {
	switch r {
	case '"', '\\':
		return append(dst, '\\', byte(r))
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	}
	if r < 0x20 {
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	}
	return utf8.AppendRune(dst, r)
}

// isCanonical reports whether the body of a scanned string (between its
// quotes) is already canonical, so that it can be used in place. The scanner
// has rejected raw control characters, so only escapes and invalid UTF-8 can
// make it otherwise.
func isCanonical(body []byte, flags uint8) bool {
	return flags&fEscaped == 0 && (flags&fHigh == 0 || utf8.Valid(body))
}

// appendCanonical appends the canonical text (quoted) of the body of a
// scanned JSON string.
func appendCanonical(dst, body []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(body); {
		var r rune
		r, i = nextRune(body, i)
		dst = appendCanonicalRune(dst, r)
	}
	return append(dst, '"')
}

// appendUnescaped appends the value of the body of a scanned JSON string, as
// encoding/json would unmarshal it into a Go string.
func appendUnescaped(dst, body []byte) []byte {
	for i := 0; i < len(body); {
		var r rune
		r, i = nextRune(body, i)
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// nextRune decodes the rune at body[i] of a scanned (so syntactically valid)
// JSON string body and returns it with the index after it. It decodes as
// encoding/json does: surrogate pairs combine, a lone surrogate and each
// byte of invalid UTF-8 become U+FFFD.
func nextRune(body []byte, i int) (rune, int) {
	c := body[i]
	if c >= utf8.RuneSelf {
		r, n := utf8.DecodeRune(body[i:])
		return r, i + n
	}
	if c != '\\' {
		return rune(c), i + 1
	}
	switch body[i+1] {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		r := hex4(body[i+2 : i+6])
		i += 6
		if !utf16.IsSurrogate(r) {
			return r, i
		}
		if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(body[i+2:i+6])); pair != utf8.RuneError {
				return pair, i + 6
			}
		}
		return utf8.RuneError, i
	default: // '"', '\\' and '/' stand for themselves.
		return rune(body[i+1]), i + 2
	}
}

// hex4 decodes four hex digits the scanner has already checked.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		r = r<<4 | rune(hexValue(c))
	}
	return r
}

// hexValue is the value of hex digit c, or -1 when c is not one.
func hexValue(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

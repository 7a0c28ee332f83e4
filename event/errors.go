package event

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Reasons are read by people triaging the dlq output, so they name the field
// or the byte offset (counted from 0) and show the offending text. Building
// them allocates, which is fine: only invalid records pay for it.

func syntaxError(format string, args ...any) error {
	return &Error{Reason: "invalid JSON: " + fmt.Sprintf(format, args...)}
}

func unterminated(start int) error {
	return syntaxError("unterminated string at byte %d", start)
}

// unexpected reports the byte at b[i], or the end of input when i is past it.
func unexpected(b []byte, i int) error {
	return unexpectedIn(b, i, "")
}

// unexpectedIn is unexpected with where, e.g. " in number", for context.
func unexpectedIn(b []byte, i int, where string) error {
	if i >= len(b) {
		return syntaxError("unexpected end of input%s at byte %d", where, len(b))
	}
	return syntaxError("unexpected %s%s at byte %d", quoteBytes(b[i:i+1]), where, i)
}

// quoteBytes shows printable ASCII in single quotes and anything else in hex,
// so that a reason stays readable and valid UTF-8 whatever the record holds.
func quoteBytes(s []byte) string {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f {
			if len(s) == 1 {
				return fmt.Sprintf("byte 0x%02x", c)
			}
			return fmt.Sprintf("bytes % x", s)
		}
	}
	return "'" + string(s) + "'"
}

func fieldError(name string, format string, args ...any) error {
	return &Error{Reason: fmt.Sprintf("field %s: ", strconv.Quote(name)) + fmt.Sprintf(format, args...)}
}

func missingField(name string) error {
	return &Error{Reason: fmt.Sprintf("missing required field %s", strconv.Quote(name))}
}

// maxShown bounds how much of a value a reason quotes.
const maxShown = 40

// describe shows a scanned value for a reason: scalars as (at most maxShown
// bytes of) their text, containers by their type.
func describe(b []byte, r rawValue) string {
	switch r.kind {
	case kObject, kArray:
		return kindName(r.kind)
	case kString:
		s := appendUnescaped(nil, b[r.start+1:r.end-1])
		if len(s) > maxShown {
			cut := maxShown
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			s = append(s[:cut], "..."...)
		}
		return string(AppendString(nil, s))
	}
	text := b[r.start:r.end]
	if len(text) > maxShown {
		return string(text[:maxShown]) + "..."
	}
	return string(text)
}

// kindName names the type of a scanned value, as in "want a number, got a
// string".
func kindName(kind byte) string {
	switch kind {
	case kString:
		return "a string"
	case kNumber:
		return "a number"
	case kTrue, kFalse:
		return "a boolean"
	case kObject:
		return "an object"
	case kArray:
		return "an array"
	}
	return "null"
}

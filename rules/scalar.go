package rules

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// jsonNumber matches number text as JSON writes it.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// scalar reads a filter value: a string, a number or a boolean, the JSON
// types an event attribute can be compared with.
func (c *checker) scalar(n *yaml.Node, what string) (Scalar, bool) {
	if n.Kind != yaml.ScalarNode {
		c.addf(n.Line, "%s: values must be strings, numbers or booleans, got %s", what, describe(n))
		return Scalar{}, false
	}
	switch n.ShortTag() {
	case "!!str", "!!timestamp":
		// A date is text in a JSON event, so it is matched as one.
		return Scalar{Kind: String, Text: jsonQuote(n.Value)}, true
	case "!!int", "!!float":
		v, ok := c.number(n, what)
		if !ok {
			return Scalar{}, false
		}
		text := n.Value
		if !jsonNumber.MatchString(text) {
			text = strconv.FormatFloat(v, 'g', -1, 64)
		}
		return Scalar{Kind: Number, Text: text, Num: v}, true
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			c.addf(n.Line, "%s: %q is not a boolean", what, n.Value)
			return Scalar{}, false
		}
		return Scalar{Kind: Bool, Text: strconv.FormatBool(b)}, true
	case "!!null":
		c.addf(n.Line, "%s: null cannot be matched; an event without the attribute never matches", what)
	default:
		c.addf(n.Line, "%s: values must be strings, numbers or booleans, got %s", what, describe(n))
	}
	return Scalar{}, false
}

// number reads a finite number; what names it in messages.
func (c *checker) number(n *yaml.Node, what string) (float64, bool) {
	if tag := n.ShortTag(); n.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!float" {
		c.addf(n.Line, "%s must be a number, got %s", what, describe(n))
		return 0, false
	}
	var v float64
	if err := n.Decode(&v); err != nil {
		c.addf(n.Line, "%s: %q is not a number", what, n.Value)
		return 0, false
	}
	if math.IsInf(v, 0) || math.IsNaN(v) {
		c.addf(n.Line, "%s must be a finite number, got %s", what, n.Value)
		return 0, false
	}
	if v == 0 {
		v = 0 // -0 is zero: no output should show "-0"
	}
	return v, true
}

// jsonQuote renders s as a JSON string the way events are compared: only
// the quote, the backslash and control characters are escaped, everything
// else stays literal UTF-8.
func jsonQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				const hex = "0123456789abcdef"
				b.WriteString(`\u00`)
				b.WriteByte(hex[r>>4])
				b.WriteByte(hex[r&0xf])
				continue
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

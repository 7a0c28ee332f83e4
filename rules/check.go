package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// checker walks the YAML tree of a rules file and collects its problems, so
// that all of them are reported together rather than one per attempt.
type checker struct {
	file     string
	problems []Problem
	warnings []Problem
}

// addf records a problem at line.
func (c *checker) addf(line int, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: c.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// warnf records a warning at line: a setting that is valid but probably
// not what was meant.
func (c *checker) warnf(line int, format string, args ...any) {
	c.warnings = append(c.warnings, Problem{File: c.file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// err returns the problems found as a *ValidationError, or nil. A node
// reached through several aliases is checked once per alias; its problems are
// reported once.
func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	seen := make(map[Problem]bool, len(c.problems))
	var ps []Problem
	for _, p := range c.problems {
		if !seen[p] {
			seen[p] = true
			ps = append(ps, p)
		}
	}
	slices.SortStableFunc(ps, func(a, b Problem) int { return cmp.Compare(a.Line, b.Line) })
	return &ValidationError{Problems: ps}
}

// field is one key/value pair of a mapping.
type field struct {
	key *yaml.Node
	// val has its alias resolved.
	val *yaml.Node
}

// mapping returns the fields of n, which must be a mapping (what names it in
// messages, e.g. "rule"). Fields not in allowed, and fields given twice, are
// reported and left out.
func (c *checker) mapping(n *yaml.Node, what string, allowed ...string) (map[string]field, bool) {
	if n.Kind != yaml.MappingNode {
		c.addf(n.Line, "%s must be a mapping of %s, got %s", what, strings.Join(allowed, ", "), describe(n))
		return nil, false
	}
	fs := make(map[string]field, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			c.addf(k.Line, "field names in %s must be strings, got %s", what, describe(k))
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			c.addf(k.Line, "unknown field %q in %s; expected one of: %s", k.Value, what, strings.Join(allowed, ", "))
			continue
		}
		if prev, dup := fs[k.Value]; dup {
			c.addf(k.Line, "duplicate field %q in %s (first at line %d)", k.Value, what, prev.key.Line)
			continue
		}
		fs[k.Value] = field{key: k, val: v}
	}
	return fs, true
}

// require reports, in one problem at the line of the mapping n, the names
// missing from fs.
func (c *checker) require(n *yaml.Node, fs map[string]field, what string, names ...string) {
	var missing []string
	for _, name := range names {
		if _, ok := fs[name]; !ok {
			missing = append(missing, strconv.Quote(name))
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		c.addf(n.Line, "missing field %s in %s", missing[0], what)
	default:
		last := len(missing) - 1
		c.addf(n.Line, "missing fields %s and %s in %s", strings.Join(missing[:last], ", "), missing[last], what)
	}
}

// list returns the items of an optional list (absent or null is empty), with
// their aliases left unresolved so that each item keeps its own line.
func (c *checker) list(f field, name string) ([]*yaml.Node, bool) {
	switch {
	case f.val == nil || isNull(f.val):
		return nil, true
	case f.val.Kind != yaml.SequenceNode:
		c.addf(f.val.Line, "%s must be a list, got %s", name, describe(f.val))
		return nil, false
	}
	return f.val.Content, true
}

// str reads a string value. Only YAML strings qualify: `name: 42` is more
// likely a mistake than a name.
func (c *checker) str(f field) (string, bool) {
	if f.val.Kind != yaml.ScalarNode || f.val.ShortTag() != "!!str" {
		c.addf(f.val.Line, "%s must be a string, got %s", f.key.Value, describe(f.val))
		return "", false
	}
	return f.val.Value, true
}

// choice reads a string value that must be one of names, and returns its
// position among them: the rules file's spelling of an enumeration whose
// values are numbered in that order.
func (c *checker) choice(f field, names ...string) (int, bool) {
	s, ok := c.str(f)
	if !ok {
		return 0, false
	}
	if i := slices.Index(names, s); i >= 0 {
		return i, true
	}
	last := len(names) - 1
	c.addf(f.val.Line, "%s must be %s or %s, got %q", f.key.Value, strings.Join(names[:last], ", "), names[last], s)
	return 0, false
}

// nonEmpty reads a string value that must not be empty.
func (c *checker) nonEmpty(f field) string {
	s, ok := c.str(f)
	if ok && s == "" {
		c.addf(f.val.Line, "%s must not be empty", f.key.Value)
	}
	return s
}

// resolve follows an alias to its anchored node, so that anchors can be used
// wherever a value is expected.
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// isNull reports an explicit or empty YAML null.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names a node's type and value for "got ..." in messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!null":
			return "null"
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!str":
			return "the string " + strconv.Quote(n.Value)
		default:
			return tag + " " + strconv.Quote(n.Value)
		}
	}
	return "an unexpected YAML node"
}

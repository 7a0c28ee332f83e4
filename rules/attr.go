package rules

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// attrProblem says what is wrong with an attribute name, "" if nothing.
func attrProblem(name string) string {
	switch {
	case name == "":
		return "attribute names must not be empty"
	case strings.TrimSpace(name) != name:
		// Almost always a stray space after a colon ("sum: amount"); the
		// rule would silently never match.
		return fmt.Sprintf("attribute name %q has leading or trailing spaces", name)
	case slices.Contains(Reserved, name):
		return reservedReason(name)
	}
	return ""
}

// reservedReason explains why a reserved field cannot be a rule attribute.
func reservedReason(name string) string {
	switch name {
	case "ts":
		return "ts is reserved: windows are by event time already"
	case "id":
		return "id is reserved: it is unique per request, so there is nothing to group or filter"
	case "ingest_ts":
		return "ingest_ts is reserved: it is the reference clock for skew, not an attribute"
	}
	return name + " is reserved for the event envelope"
}

// attr reads an attribute name; what says where it is used ("key").
func (c *checker) attr(n *yaml.Node, what string) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		c.addf(n.Line, "%s: attribute names must be strings, got %s", what, describe(n))
		return "", false
	}
	if p := attrProblem(n.Value); p != "" {
		c.addf(n.Line, "%s: %s", what, p)
		return "", false
	}
	return n.Value, true
}

// key reads a rule's or heatmap's group-by attributes: a list of distinct
// names, or a single name as a shorthand for a list of one.
func (c *checker) key(f field) []string {
	n := f.val
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		if name, ok := c.attr(n, "key"); ok {
			return []string{name}
		}
		return nil
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		c.addf(n.Line, "key must be a non-empty list of attribute names, got %s", describeEmpty(n))
		return nil
	}
	var names []string
	first := map[string]int{}
	for _, item := range n.Content {
		name, ok := c.attr(item, "key")
		if !ok {
			continue
		}
		if line, dup := first[name]; dup {
			c.addf(resolve(item).Line, "key: duplicate attribute %q (first at line %d)", name, line)
			continue
		}
		first[name] = resolve(item).Line
		names = append(names, name)
	}
	return names
}

// where reads the equality filters of a rule or heatmap: attribute → value,
// or attribute → list of values meaning any of them. Null means no filter.
// what is the field they are read from, where or match.
func (c *checker) where(f field, what string) []Filter {
	n := f.val
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		c.addf(n.Line, "%s must be a mapping of attribute to value or list of values, got %s", what, describe(n))
		return nil
	}
	var filters []Filter
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		name, ok := c.attr(k, what)
		if !ok {
			continue
		}
		if line, dup := first[name]; dup {
			c.addf(k.Line, "%s: duplicate attribute %q (first at line %d)", what, name, line)
			continue
		}
		first[name] = k.Line
		filters = append(filters, Filter{Field: name, Values: c.filterValues(what+" "+name, v)})
	}
	return filters
}

// filterValues reads the value or list of values a filter accepts.
// what names the filter in messages ("where status").
func (c *checker) filterValues(what string, n *yaml.Node) []Scalar {
	if n.Kind != yaml.SequenceNode {
		if s, ok := c.scalar(n, what); ok {
			return []Scalar{s}
		}
		return nil
	}
	if len(n.Content) == 0 {
		c.addf(n.Line, "%s: an empty list matches nothing; give at least one value", what)
		return nil
	}
	var values []Scalar
	for _, item := range n.Content {
		item = resolve(item)
		if item.Kind == yaml.SequenceNode {
			c.addf(item.Line, "%s: lists cannot be nested; a list already means any of its values", what)
			continue
		}
		if s, ok := c.scalar(item, what); ok {
			values = append(values, s)
		}
	}
	return values
}

// describeEmpty is describe, naming an empty list as such.
func describeEmpty(n *yaml.Node) string {
	if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
		return "an empty list"
	}
	return describe(n)
}

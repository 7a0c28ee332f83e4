package rules

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

// ruleFields and heatmapFields are the fields of a rule and of a heatmap, in
// the order messages list them.
var (
	ruleFields    = []string{"name", "where", "key", "window", "aggregate", "match", "threshold", "min_events", "action", "mode"}
	heatmapFields = []string{"name", "where", "key", "field", "window", "buckets"}
)

// rule reads one item of the rules list. names maps the rule names seen so
// far to their lines, to refuse duplicates.
func (c *checker) rule(item *yaml.Node, names map[string]int) Rule {
	r := Rule{Line: item.Line}
	n := resolve(item)
	fs, ok := c.mapping(n, "rule", ruleFields...)
	if !ok {
		return r
	}
	c.require(n, fs, "rule", "name", "key", "window", "aggregate", "threshold", "action")
	if f, ok := fs["name"]; ok {
		r.Name = c.name(f, "rule", r.Line, names)
	}
	if f, ok := fs["where"]; ok {
		r.Where = c.where(f, "where")
	}
	if f, ok := fs["key"]; ok {
		r.Key = c.key(f)
	}
	if f, ok := fs["window"]; ok {
		r.Window = c.window(f)
	}
	agg, hasAgg := fs["aggregate"]
	if hasAgg {
		r.Aggregate = c.aggregate(agg)
	}
	if f, ok := fs["match"]; ok {
		r.Match = c.where(f, "match")
		if hasAgg && r.Aggregate.Kind != Ratio {
			c.addf(f.key.Line, "match is only for aggregate: ratio, which counts the share of events that match")
		} else if len(r.Match) == 0 {
			c.addf(f.val.Line, "match must name at least one attribute: a ratio of every event is always 1")
		}
	} else if hasAgg && r.Aggregate.Kind == Ratio {
		c.addf(agg.val.Line, "aggregate: ratio needs match, the filters of the events whose share it computes, e.g. match: {status: [500, 502, 503]}")
	}
	if f, ok := fs["threshold"]; ok {
		r.Threshold = c.threshold(f)
	}
	if f, ok := fs["min_events"]; ok {
		r.MinEvents = c.minEvents(f)
	}
	if f, ok := fs["action"]; ok {
		r.Action = c.nonEmpty(f)
	}
	if f, ok := fs["mode"]; ok {
		if i, ok := c.choice(f, Enforce.String(), Shadow.String()); ok {
			r.Mode = Mode(i)
		}
	}
	return r
}

// minEvents reads the number of events a window needs to make a decision.
func (c *checker) minEvents(f field) int64 {
	v, _ := c.wholeNumber(f, "min_events", 0)
	return v
}

// wholeNumber reads field what, a whole number from lo to 1e9; ok is
// false, the problem noted, for anything else.
func (c *checker) wholeNumber(f field, what string, lo int64) (int64, bool) {
	v, ok := c.number(f.val, what)
	if !ok {
		return 0, false
	}
	if v < float64(lo) || v != math.Trunc(v) || v > 1e9 {
		c.addf(f.val.Line, "%s must be a whole number from %d to 1000000000, got %s", what, lo, f.val.Value)
		return 0, false
	}
	return int64(v), true
}

// heatmap reads one item of the heatmaps list; names is as for rule.
func (c *checker) heatmap(item *yaml.Node, names map[string]int) Heatmap {
	h := Heatmap{Line: item.Line}
	n := resolve(item)
	fs, ok := c.mapping(n, "heatmap", heatmapFields...)
	if !ok {
		return h
	}
	c.require(n, fs, "heatmap", "name", "key", "field", "window", "buckets")
	if f, ok := fs["name"]; ok {
		h.Name = c.name(f, "heatmap", h.Line, names)
	}
	if f, ok := fs["where"]; ok {
		h.Where = c.where(f, "where")
	}
	if f, ok := fs["key"]; ok {
		h.Key = c.key(f)
	}
	if f, ok := fs["field"]; ok {
		h.Field, _ = c.attr(f.val, "field")
	}
	if f, ok := fs["window"]; ok {
		h.Window = c.window(f)
	}
	if f, ok := fs["buckets"]; ok {
		h.Buckets = c.buckets(f)
	}
	return h
}

// name reads the name of a rule or heatmap (kind), which outputs and metrics
// identify it by, so it must be unique among its kind.
func (c *checker) name(f field, kind string, line int, names map[string]int) string {
	name := c.nonEmpty(f)
	if name == "" {
		return ""
	}
	if first, dup := names[name]; dup {
		c.addf(f.val.Line, "duplicate %s name %q (first at line %d)", kind, name, first)
	} else {
		names[name] = line
	}
	return name
}

// aggregate reads count, sum:FIELD, distinct:FIELD, avg:FIELD, min:FIELD,
// max:FIELD, ratio or quantile:FIELD:Q.
func (c *checker) aggregate(f field) Aggregate {
	s, ok := c.str(f)
	if !ok {
		return Aggregate{}
	}
	line := f.val.Line
	kind, attr, hasField := strings.Cut(s, ":")
	i := slices.Index(aggregateNames[:], kind)
	if i < 0 {
		c.addf(line, "aggregate must be count, sum:FIELD, distinct:FIELD, avg:FIELD, min:FIELD, max:FIELD, ratio or quantile:FIELD:Q, got %q", s)
		return Aggregate{}
	}
	a := Aggregate{Kind: AggregateKind(i)}
	switch a.Kind {
	case Count, Ratio:
		if hasField {
			c.addf(line, "aggregate: %s takes no field, got %q", kind, s)
		}
		return a
	case Quantile:
		var q string
		var hasQ bool
		attr, q, hasQ = strings.Cut(attr, ":")
		if !hasField || !hasQ {
			c.addf(line, "aggregate: quantile needs a field and a quantile, e.g. quantile:latency_ms:0.99, got %q", s)
			return a
		}
		v, err := strconv.ParseFloat(q, 64)
		if err != nil || !(v > 0 && v <= 1) {
			c.addf(line, "aggregate: the quantile must be a number above 0 and at most 1, got %q", q)
			return a
		}
		a.Q = v
	}
	if !hasField || attr == "" {
		example := kind + ":amount"
		if a.Kind == Quantile {
			example = "quantile:latency_ms:0.99"
		}
		c.addf(line, "aggregate: %s needs a field, e.g. %s", kind, example)
		return a
	}
	if p := attrProblem(attr); p != "" {
		c.addf(line, "aggregate: %s", p)
	}
	a.Field = attr
	return a
}

// threshold reads the value a rule's aggregate must exceed.
func (c *checker) threshold(f field) float64 {
	v, ok := c.number(f.val, "threshold")
	if !ok {
		return 0
	}
	if v < 0 {
		c.addf(f.val.Line, "threshold must not be negative, got %s", f.val.Value)
		return 0
	}
	if v == 0 {
		// -0 would render differently from 0 in the fingerprint.
		return 0
	}
	return v
}

// buckets reads a heatmap's histogram upper bounds.
func (c *checker) buckets(f field) []float64 {
	n := f.val
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		c.addf(n.Line, "buckets must be a non-empty list of increasing numbers, got %s", describeEmpty(n))
		return nil
	}
	var bounds []float64
	var prev *yaml.Node
	for _, item := range n.Content {
		item = resolve(item)
		v, ok := c.number(item, "each bucket bound")
		if !ok {
			continue
		}
		if len(bounds) > 0 && v <= bounds[len(bounds)-1] {
			c.addf(item.Line, "buckets must be strictly increasing: %s is not above %s", item.Value, prev.Value)
			continue
		}
		bounds = append(bounds, v)
		prev = item
	}
	return bounds
}

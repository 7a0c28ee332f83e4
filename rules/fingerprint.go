package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Fingerprint is a hex SHA-256 of everything in the config that shapes the
// state a job keeps: the watermark settings and, in file order, every rule's
// and heatmap's name, filters, key, window, aggregate, field and buckets. A
// state directory records it, so that a job started with different rules does
// not misread state written under others.
//
// Thresholds, min_events, actions, modes, the watermark's max_ahead and skew
// settings are left out:
// they change what is decided from the state, not the state, so tuning them
// keeps the state usable. So are the file's name, layout and comments, and the order of
// filters and of their values, which do not change what matches.
func (c *Config) Fingerprint() string {
	var b strings.Builder
	b.WriteString("riskstream rules v1\n")
	b.WriteString(c.Watermark.stateLine())
	for _, r := range c.Rules {
		b.WriteString(r.definition())
	}
	for _, h := range c.Heatmaps {
		b.WriteString(h.definition())
	}
	return hashHex(b.String())
}

// stateLine renders the watermark settings that shape every state.
func (wm *WatermarkConfig) stateLine() string {
	return fmt.Sprintf("watermark %d %d %d\n", wm.OutOfOrderness.Milliseconds(), wm.IdleTimeout.Milliseconds(), wm.AllowedLateness.Milliseconds())
}

// hashHex is the hex SHA-256 of s.
func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// definition renders what shapes a rule's state: its name, filters, key,
// window and aggregate (with the quantile and the match filters of the
// aggregates that have them), one line. Threshold, min_events, action and
// mode only read the state. Rules of the aggregates that came first render
// as they always have, so that their state dirs stay usable.
func (r *Rule) definition() string {
	agg := fmt.Sprintf("%s %q", r.Aggregate.Kind, r.Aggregate.Field)
	if r.Aggregate.Kind == Quantile {
		agg += " " + strconv.FormatFloat(r.Aggregate.Q, 'g', -1, 64)
	}
	if r.Aggregate.Kind == Ratio {
		agg += " match " + canonicalWhere(r.Match)
	}
	return fmt.Sprintf("rule %q where %s key %q window %s aggregate %s\n",
		r.Name, canonicalWhere(r.Where), r.Key, r.Window, agg)
}

// definition renders what shapes a heatmap's state, as Rule.definition.
func (h *Heatmap) definition() string {
	return fmt.Sprintf("heatmap %q where %s key %q field %q window %s buckets %s\n",
		h.Name, canonicalWhere(h.Where), h.Key, h.Field, h.Window, formatFloats(h.Buckets))
}

// canonicalWhere renders filters sorted by field, each with its values sorted
// and numbers by value, so that equivalent filters render the same.
func canonicalWhere(filters []Filter) string {
	parts := make([]string, 0, len(filters))
	for _, f := range filters {
		values := make([]string, 0, len(f.Values))
		for _, v := range f.Values {
			text := v.Text
			if v.Kind == Number {
				text = strconv.FormatFloat(v.Num, 'g', -1, 64)
			}
			values = append(values, strconv.Itoa(int(v.Kind))+":"+text)
		}
		slices.Sort(values)
		values = slices.Compact(values)
		parts = append(parts, fmt.Sprintf("%q=%q", f.Field, values))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// formatFloats renders numbers exactly, space-separated in brackets.
func formatFloats(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// render prints a config compactly for scenario files: one line per setting,
// an indented line per part of a rule or heatmap.
func render(cfg *Config) string {
	var b strings.Builder
	wm, sk := cfg.Watermark, cfg.Skew
	fmt.Fprintf(&b, "watermark out_of_orderness=%s idle_timeout=%s allowed_lateness=%s max_ahead=%s\n",
		formatDuration(wm.OutOfOrderness), formatDuration(wm.IdleTimeout), formatDuration(wm.AllowedLateness), formatDuration(wm.MaxAhead))
	fmt.Fprintf(&b, "skew threshold=%s recover_after=%s scope=%s max_sources=%d\n",
		formatDuration(sk.Threshold), formatDuration(sk.RecoverAfter), sk.Scope, sk.MaxSources)
	if cfg.Dedupe != defaultDedupe {
		fmt.Fprintf(&b, "dedupe horizon=%s\n", formatDuration(cfg.Dedupe.Horizon))
	}
	for _, r := range cfg.Rules {
		fmt.Fprintf(&b, "rule %s (line %d)\n", r.Name, r.Line)
		renderWhere(&b, "where", r.Where)
		fmt.Fprintf(&b, "  key %s\n", strings.Join(r.Key, ", "))
		fmt.Fprintf(&b, "  window %s\n", r.Window)
		fmt.Fprintf(&b, "  aggregate %s\n", r.Aggregate)
		renderWhere(&b, "match", r.Match)
		fmt.Fprintf(&b, "  threshold %s\n", strconv.FormatFloat(r.Threshold, 'g', -1, 64))
		if r.MinEvents > 0 {
			fmt.Fprintf(&b, "  min_events %d\n", r.MinEvents)
		}
		fmt.Fprintf(&b, "  action %s\n", r.Action)
		if r.Mode != Enforce {
			fmt.Fprintf(&b, "  mode %s\n", r.Mode)
		}
	}
	for _, h := range cfg.Heatmaps {
		fmt.Fprintf(&b, "heatmap %s (line %d)\n", h.Name, h.Line)
		renderWhere(&b, "where", h.Where)
		fmt.Fprintf(&b, "  key %s\n", strings.Join(h.Key, ", "))
		fmt.Fprintf(&b, "  field %s\n", h.Field)
		fmt.Fprintf(&b, "  window %s\n", h.Window)
		fmt.Fprintf(&b, "  buckets %s\n", formatFloats(h.Buckets))
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(&b, "warning %s\n", w)
	}
	return b.String()
}

// renderWhere prints one line per filter of a where or match (what), each value with its kind; numbers
// show their value too when it reads differently from their text.
func renderWhere(b *strings.Builder, what string, filters []Filter) {
	for _, f := range filters {
		values := make([]string, len(f.Values))
		for i, v := range f.Values {
			switch v.Kind {
			case String:
				values[i] = "string " + v.Text
			case Bool:
				values[i] = "bool " + v.Text
			default:
				values[i] = "number " + v.Text
				if num := strconv.FormatFloat(v.Num, 'g', -1, 64); num != v.Text {
					values[i] += " (=" + num + ")"
				}
			}
		}
		fmt.Fprintf(b, "  %s %s in [%s]\n", what, f.Field, strings.Join(values, ", "))
	}
}

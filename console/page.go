package console

import (
	_ "embed"
	"fmt"
	"io"
	"strings"
)

// style is the style sheet of the console and the report, inlined into
// each page so that a page needs no other file.
//
//go:embed assets/console.css
var style string

// script is the live console's script, which refreshes its content.
//
//go:embed assets/console.js
var script string

// pageHead writes the page up to the opening of its content.
func pageHead(b *strings.Builder, title, sub, status string, links []Link, self string) {
	fmt.Fprintf(b, "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>%s</title>\n<style>\n%s</style>\n</head>\n", esc(title), style)
	fmt.Fprintf(b, "<body>\n<header><h1>%s</h1><span class=\"sub\">%s</span>", esc(title), esc(sub))
	renderLinks(b, links, self)
	if status != "" {
		fmt.Fprintf(b, `<span class="status">%s</span>`, esc(status))
	}
	b.WriteString("</header>\n<main id=\"content\">\n")
}

// renderLinks writes links to the views of the job, this one, self,
// marked.
func renderLinks(b *strings.Builder, links []Link, self string) {
	if len(links) == 0 {
		return
	}
	b.WriteString(`<nav class="views">`)
	for _, l := range links {
		current := ""
		if l.Href == self {
			current = ` aria-current="page"`
		}
		fmt.Fprintf(b, `<a href="%s"%s>%s</a>`, esc(l.Href), current, esc(l.Label))
	}
	b.WriteString("</nav>")
}

// tile is one figure of the tiles row.
type tile struct{ label, value, detail string }

func renderTiles(b *strings.Builder, tiles []tile) {
	b.WriteString(`<section class="tiles">`)
	for _, t := range tiles {
		fmt.Fprintf(b, `<div class="tile"><div class="label">%s</div><div class="value">%s</div><div class="detail">%s</div></div>`,
			esc(t.label), esc(t.value), esc(t.detail))
	}
	b.WriteString("</section>\n")
}

// renderHeatmaps writes the heatmaps' section, a figure each.
func renderHeatmaps(b *strings.Builder, figures []string, note string) {
	b.WriteString(`<section id="heatmaps"><h2>Latency heatmaps</h2>`)
	fmt.Fprintf(b, `<p class="note">%s</p>`, esc(note))
	if len(figures) == 0 {
		b.WriteString(`<p class="note">No heatmap window has fired.</p>`)
	}
	size := 0
	for _, f := range figures {
		size += len(f)
	}
	b.Grow(size + 1024)
	if len(figures) > 0 {
		countScaleGradient(b)
	}
	b.WriteString(`<div class="heatmap-grid">`)
	for _, f := range figures {
		b.WriteString(f)
	}
	b.WriteString("</div></section>\n")
}

// heatmapFigure is a heatmap series' figure: its title and drawing.
func heatmapFigure(s HeatmapSeries) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<figure class="heatmap" data-heatmap="%s" data-key="%s"><h3>%s · %s <span class="note">%s windows, %s values</span></h3>`,
		esc(s.Heatmap), esc(s.Key), esc(s.Heatmap), esc(s.Key), formatCount(int64(len(s.Windows))), formatCount(s.values()))
	renderHeatmap(&b, s, "ms")
	b.WriteString("</figure>\n")
	return b.String()
}

// renderTopKeys writes the table of the keys with the most decisions.
func renderTopKeys(b *strings.Builder, keys []KeyCount, note string) {
	fmt.Fprintf(b, `<section id="top-keys"><h2>Keys with the most decisions</h2><p class="note">%s</p>`, esc(note))
	if len(keys) == 0 {
		b.WriteString(`<p class="note">No decision.</p></section>`)
		return
	}
	b.WriteString(`<table><tr><th>rule</th><th>key</th><th class="n">decisions</th></tr>`)
	for _, k := range keys {
		fmt.Fprintf(b, `<tr><td>%s</td><td>%s</td><td class="n">%s</td></tr>`, esc(k.Rule), esc(k.Key), formatCount(k.Count))
	}
	b.WriteString("</table></section>\n")
}

// WriteReport writes the report as one HTML page that needs nothing else:
// style inline, charts as inline SVG, no script.
func WriteReport(w io.Writer, r *Report) error {
	var b strings.Builder
	sub := "no output"
	if r.To > 0 {
		sub = "event time " + stamp(r.From) + " – " + stamp(r.To)
	}
	pageHead(&b, "riskstream replay report", sub, "", nil, "")
	var decisions int64
	for _, d := range r.Decisions {
		decisions += d.Count
	}
	var windows int
	for _, s := range r.Heatmaps {
		windows += len(s.Windows)
	}
	degradedSources := plural(len(r.Skew), "source degraded", "sources degraded")
	if !r.SkewRecorded {
		degradedSources = "no skew.jsonl"
	}
	renderTiles(&b, []tile{
		{"decisions", formatCount(decisions), fmt.Sprintf("%s, %s on re-timed events", plural(len(r.Decisions), "rule", "rules"), formatCount(r.Processing))},
		{"heatmap windows", formatCount(int64(windows)), plural(len(r.Heatmaps), "heatmap key", "heatmap keys")},
		{"late", formatCount(r.Late), "events after their windows were purged"},
		{"dlq", formatCount(r.DLQ), "invalid records"},
		{"clock skew", fmt.Sprint(len(r.Skew)), degradedSources},
	})
	figures := make([]string, len(r.Heatmaps))
	for i, hs := range r.Heatmaps {
		figures[i] = heatmapFigure(hs)
	}
	note := "Per window (column) and latency bucket (row), the number of values, colour by count; the lines are each window's p50 and p99. A red mark over a column: the window has re-timed events."
	if r.HiddenHeatmaps > 0 {
		note += fmt.Sprintf(" The %d keys with the most values; %d more are not drawn.", len(r.Heatmaps), r.HiddenHeatmaps)
	}
	renderHeatmaps(&b, figures, note)

	b.WriteString(`<section id="decisions"><h2>Decisions by rule over event time</h2>`)
	fmt.Fprintf(&b, `<p class="note">Decisions per %s of event time, per rule and action.</p>`, formatDuration(r.Interval))
	lineChart{label: "decisions per rule over event time", yLabel: "decisions", series: r.DecisionSeries,
		from: floorTo(r.From, r.Interval), to: floorTo(r.To, r.Interval) + r.Interval, steps: true, whole: true}.render(&b)
	b.WriteString(`<table><tr><th>rule</th><th>action</th><th class="n">decisions</th></tr>`)
	for _, d := range r.Decisions {
		fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td class="n">%s</td></tr>`, esc(d.Rule), esc(d.Action), formatCount(d.Count))
	}
	b.WriteString("</table></section>\n")
	renderTopKeys(&b, r.TopKeys, "Over the whole replay.")

	b.WriteString(`<section id="skew"><h2>Clock skew</h2>`)
	switch {
	case !r.SkewRecorded:
		b.WriteString(`<p class="note">The folder has no skew.jsonl (written by replays since the report exists): degraded periods unknown.</p>`)
	case len(r.Skew) == 0:
		b.WriteString(`<p class="note">No source was degraded: every event was windowed by its own time.</p>`)
	default:
		b.WriteString(`<p class="note">Periods, in reference time, when a source's clock was judged skewed and its events re-timed.</p>`)
		rows := make([]timelineRow, len(r.Skew))
		from, to := r.From, r.To
		for i, s := range r.Skew {
			rows[i] = timelineRow{label: s.Source, periods: s.Periods}
			for _, p := range s.Periods {
				from, to = min(from, p.From), max(to, p.To)
			}
		}
		renderTimeline(&b, "degraded periods per source", "reference time (UTC)", rows, from, to)
	}
	b.WriteString("</section>\n")

	fmt.Fprintf(&b, `<section id="late"><h2>Late: %s</h2>`, formatCount(r.Late))
	if len(r.LateExamples) > 0 {
		fmt.Fprintf(&b, `<p class="note">The first %d, in the order of the input.</p>`, len(r.LateExamples))
		b.WriteString(`<table><tr><th>event</th><th>event time</th><th>watermark</th><th class="n">behind</th><th>from</th></tr>`)
		for _, l := range r.LateExamples {
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%s</td><td class="n">%s</td><td>%s</td></tr>`,
				esc(l.EventID), stamp(l.EventTS), stamp(l.Watermark), formatDuration(l.Watermark-l.EventTS), esc(l.From))
		}
		b.WriteString(`</table>`)
	}
	b.WriteString("</section>\n")

	fmt.Fprintf(&b, `<section id="dlq"><h2>Dead letters: %s</h2>`, formatCount(r.DLQ))
	if len(r.DLQReasons) > 0 {
		b.WriteString(`<table><tr><th>reason (numbers as #)</th><th class="n">records</th></tr>`)
		for _, d := range r.DLQReasons {
			fmt.Fprintf(&b, `<tr><td>%s</td><td class="n">%s</td></tr>`, esc(d.Reason), formatCount(d.Count))
		}
		b.WriteString(`</table>`)
		fmt.Fprintf(&b, `<h3>The first %d</h3><table><tr><th>reason</th><th>record</th><th>from</th></tr>`, len(r.DLQExamples))
		for _, d := range r.DLQExamples {
			fmt.Fprintf(&b, `<tr><td>%s</td><td><code>%s</code></td><td>%s</td></tr>`, esc(d.Reason), esc(d.Raw), esc(d.From))
		}
		b.WriteString(`</table>`)
	}
	b.WriteString("</section>\n</main>\n</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

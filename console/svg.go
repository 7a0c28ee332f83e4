package console

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in SVG user units: a chart is drawn in a viewBox of
// chartWidth (a heatmap of heatmapWidth, two side by side on a wide
// page) and scaled to the page's width by the style sheet.
const (
	chartWidth   = 960
	heatmapWidth = 620
	marginLeft   = 84
	marginRight  = 130 // a heatmap's legend
	// chartMarginRight is a line chart's legend, with the series' names.
	chartMarginRight = 200
	marginTop        = 14
	marginBottom     = 34
)

// palette is Tableau 10, a categorical palette whose colours stay apart
// on white and for the common colour blindnesses; series take them in
// order.
var palette = [...]string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// seriesColors gives each series a colour by its name's place among the
// chart's names in order, so that a rule has the same colour in the
// console and in the report, whose charts draw the rules that decided.
func seriesColors(series []Series) []string {
	names := make([]string, len(series))
	for i, s := range series {
		names[i] = s.Name
	}
	slices.Sort(names)
	names = slices.Compact(names)
	colors := make([]string, len(series))
	for i, s := range series {
		k, _ := slices.BinarySearch(names, s.Name)
		colors[i] = palette[k%len(palette)]
	}
	return colors
}

// countScale is the heatmap's sequential scale (ColorBrewer YlGnBu), light
// for few values and dark for many, so that the p50 and p99 lines drawn
// over it stay visible at both ends.
var countScale = [...][3]float64{{255, 255, 217}, {199, 233, 180}, {65, 182, 196}, {34, 94, 168}, {8, 29, 88}}

// emptyCell is the colour of a bucket without values: apart from the
// scale's lightest colour, so that one value is not mistaken for none.
const emptyCell = "#f3f3f3"

// countColor is the colour of a cell counting n values where the fullest
// counts max. The scale follows the square root of the share, so that
// buckets with a few values are not lost beside the mode.
func countColor(n, max int64) string {
	if n <= 0 || max <= 0 {
		return emptyCell
	}
	return scaleColor(math.Sqrt(float64(n) / float64(max)))
}

// scaleColor interpolates countScale at f in [0, 1].
func scaleColor(f float64) string {
	f = math.Min(math.Max(f, 0), 1) * float64(len(countScale)-1)
	i := min(int(f), len(countScale)-2)
	t := f - float64(i)
	a, b := countScale[i], countScale[i+1]
	c := func(k int) int { return int(math.Round(a[k] + (b[k]-a[k])*t)) }
	return fmt.Sprintf("#%02x%02x%02x", c(0), c(1), c(2))
}

// num formats a coordinate: one decimal, enough at this scale, and the
// same bytes on every machine.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// esc escapes text for HTML and SVG.
func esc(s string) string { return html.EscapeString(s) }

// clock formats epoch ms as a UTC time of day, with milliseconds only
// when the time has them.
func clock(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	if ms%1000 != 0 {
		return t.Format("15:04:05.000")
	}
	return t.Format("15:04:05")
}

// stamp formats epoch ms as a full UTC time.
func stamp(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z")
}

// niceStep is the step of about n ticks over span: 1, 2 or 5 times a
// power of ten.
func niceStep(span float64, n int) float64 {
	if span <= 0 || n <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// timeSteps are the steps of time axes, ms: whole seconds, minutes and
// hours, so ticks fall on times a reader expects.
var timeSteps = []int64{1, 10, 100, 250, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000,
	120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000}

// timeStep is the step of about n ticks over span ms.
func timeStep(span int64, n int) int64 {
	for _, s := range timeSteps {
		if span/s <= int64(n) {
			return s
		}
	}
	return timeSteps[len(timeSteps)-1]
}

// formatCount formats a count with thousands separators.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatValue formats a measured value with at most 4 significant digits.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return formatCount(int64(v))
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// formatBytes formats a size in bytes with a binary unit.
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v, u = v/1024, u+1
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}

// formatDuration formats ms for people: 850 ms, 12.5 s, 3 min 20 s.
func formatDuration(ms int64) string {
	switch {
	case ms < 0:
		return "-" + formatDuration(-ms)
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000 && ms%1000 == 0:
		return fmt.Sprintf("%d s", ms/1000)
	case ms < 60_000:
		return strconv.FormatFloat(float64(ms)/1000, 'f', 1, 64) + " s"
	case ms < 3_600_000 && ms%60_000 < 1000:
		return fmt.Sprintf("%d min", ms/60_000)
	case ms < 3_600_000:
		return fmt.Sprintf("%d min %d s", ms/60_000, ms%60_000/1000)
	case ms%3_600_000 < 60_000:
		return fmt.Sprintf("%d h", ms/3_600_000)
	default:
		return fmt.Sprintf("%d h %d min", ms/3_600_000, ms%3_600_000/60_000)
	}
}

// svgOpen starts an SVG of the given size, with an accessible name.
func svgOpen(b *strings.Builder, width, height int, class, label string) {
	fmt.Fprintf(b, `<svg class="%s" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		class, width, height, esc(label))
}

// text writes a text element.
func text(b *strings.Builder, x, y float64, anchor, class, s string) {
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="%s" class="%s">%s</text>`, num(x), num(y), anchor, class, esc(s))
}

// legendItem writes the idx-th line of a legend starting at x: a swatch
// (a line, dashed when dash is set) and its label.
func legendItem(b *strings.Builder, x float64, idx int, color string, dash bool, label string) {
	y := float64(marginTop + 8 + idx*18)
	style := ""
	if dash {
		style = ` stroke-dasharray="5 3"`
	}
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2.5"%s/>`,
		num(x), num(y), num(x+18), num(y), color, style)
	// A long name is cut; the whole shows on hover.
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="start" class="legend"><title>%s</title>%s</text>`,
		num(x+24), num(y+4), esc(label), esc(truncate(label, 28)))
}

// truncate shortens s to n runes, with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

package console

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/riskstream/riskstream/sink"
)

// HeatmapSeries is the fired windows of one heatmap and key, in the order
// of their starts: one column of the drawing each.
type HeatmapSeries struct {
	// Heatmap is the heatmap's name, Key its key as name=value pairs.
	Heatmap, Key string
	// Bounds are the buckets' upper bounds, +Inf not included.
	Bounds  []float64
	Windows []HeatmapWindow
}

// put keeps w among s's windows, which are in start order: in place of the
// same window at an earlier revision, else inserted. It reports whether it
// kept w: an older revision than the one kept is not.
func (s *HeatmapSeries) put(w HeatmapWindow) bool {
	i, found := slices.BinarySearchFunc(s.Windows, w, func(a, b HeatmapWindow) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End))
	})
	switch {
	case !found:
		s.Windows = slices.Insert(s.Windows, i, w)
	case w.Revision >= s.Windows[i].Revision:
		s.Windows[i] = w
	default:
		return false
	}
	return true
}

// values is the number of values in s's windows.
func (s *HeatmapSeries) values() int64 {
	var n int64
	for _, w := range s.Windows {
		n += w.Count
	}
	return n
}

// HeatmapWindow is one fired window of a heatmap and key, at its latest
// revision.
type HeatmapWindow struct {
	Start, End int64
	Revision   int32
	Count      int64
	// Buckets count the values of each bucket (not cumulative), +Inf last.
	Buckets  []int64
	P50, P99 float64
	// Degraded counts the window's re-timed events (degraded_events).
	Degraded int64
}

// heatmapRowHeight is the height of a bucket's row.
const heatmapRowHeight = 17

// bucketLabel names the i-th bucket of bounds by its upper bound, the
// last by the bound it is over.
func bucketLabel(bounds []float64, i int) string {
	if i < len(bounds) {
		return "≤ " + formatValue(bounds[i])
	}
	if len(bounds) == 0 {
		return "all"
	}
	return "> " + formatValue(bounds[len(bounds)-1])
}

// bucketLE is the le of the i-th bucket as the heatmaps output writes it.
func bucketLE(bounds []float64, i int) string {
	if i < len(bounds) {
		return string(sink.AppendNumber(nil, bounds[i]))
	}
	return "+Inf"
}

// valueRow is where a value falls on the bucket rows, 0 at the bottom of
// the first bucket and len(bounds)+1 at the top of +Inf: the bucket's
// index plus the value's place within it, linear in the first bucket, on
// a log scale in the others (bounds grow geometrically), and in +Inf as
// if it were as wide, in ratio, as the bucket below it.
func valueRow(bounds []float64, v float64) float64 {
	if len(bounds) == 0 || v <= 0 {
		return 0
	}
	for i, le := range bounds {
		if v > le {
			continue
		}
		if i == 0 {
			return v / le
		}
		lo := bounds[i-1]
		if lo <= 0 {
			return float64(i) + (v-lo)/(le-lo)
		}
		return float64(i) + math.Log(v/lo)/math.Log(le/lo)
	}
	last := bounds[len(bounds)-1]
	ratio := 2.0
	if n := len(bounds); n > 1 && bounds[n-2] > 0 {
		ratio = last / bounds[n-2]
	}
	if last <= 0 || ratio <= 1 {
		return float64(len(bounds)) + 1
	}
	return float64(len(bounds)) + math.Min(1, math.Log(v/last)/math.Log(ratio))
}

// renderHeatmap draws a heatmap series as SVG: a column per window, a row
// per bucket, each cell coloured by its count, the p50 and p99 lines over
// them, time along the bottom and the buckets up the left. Every cell
// carries its window, bucket and count in data- attributes and a tooltip,
// which the browser tests read back. Windows with re-timed events are
// marked above their column. Its colour scale is the page's one gradient
// (countScaleGradient).
func renderHeatmap(b *strings.Builder, hs HeatmapSeries, unit string) {
	rows := len(hs.Bounds) + 1
	plotH := float64(rows * heatmapRowHeight)
	height := int(plotH) + marginTop + marginBottom + 8
	svgOpen(b, heatmapWidth, height, "heatmap", hs.Heatmap+" "+hs.Key+" latency heatmap")
	left, top := float64(marginLeft), float64(marginTop+8)
	plotW := float64(heatmapWidth - marginLeft - marginRight)
	bottom := top + plotH
	n := len(hs.Windows)
	var maxCount int64
	for _, w := range hs.Windows {
		for _, c := range w.Buckets {
			maxCount = max(maxCount, c)
		}
	}
	// Bucket labels, low latency at the bottom.
	for i := range rows {
		y := bottom - float64(i)*heatmapRowHeight - heatmapRowHeight/2 + 4
		text(b, left-6, y, "end", "tick", bucketLabel(hs.Bounds, i))
	}
	text(b, 12, top+plotH/2, "middle", "axis-label rot", unit)
	if n == 0 {
		text(b, left+plotW/2, top+plotH/2, "middle", "empty", "no window fired yet")
		b.WriteString(`</svg>`)
		return
	}
	colW := plotW / float64(n)
	lx := float64(heatmapWidth - marginRight + 14)
	// A column per window: its window on the group, each cell's bucket
	// and count on the cell, a tooltip on the cells with values.
	for j, w := range hs.Windows {
		x := left + float64(j)*colW
		fmt.Fprintf(b, `<g class="col" data-start="%d" data-end="%d" transform="translate(%s 0)">`, w.Start, w.End, num(x))
		for i, c := range w.Buckets {
			y := bottom - float64(i+1)*heatmapRowHeight
			fmt.Fprintf(b, `<rect class="cell" y="%s" width="%s" height="%d" fill="%s" data-le="%s" data-count="%d"`,
				num(y), num(colW+0.3), heatmapRowHeight, countColor(c, maxCount), bucketLE(hs.Bounds, i), c)
			if c == 0 {
				b.WriteString("/>")
				continue
			}
			fmt.Fprintf(b, `><title>%s–%s %s %s: %s</title></rect>`,
				clock(w.Start), clock(w.End), bucketLabel(hs.Bounds, i), unit, formatCount(c))
		}
		if w.Degraded > 0 {
			fmt.Fprintf(b, `<rect class="degraded-mark" y="%s" width="%s" height="4" fill="#d62728"><title>%s re-timed events (degraded clock)</title></rect>`,
				num(top-6), num(colW), formatCount(w.Degraded))
		}
		b.WriteString("</g>")
	}
	// The quantile lines, through the middle of each column with values.
	for _, q := range []struct {
		name  string
		dash  bool
		value func(HeatmapWindow) float64
	}{{"p50", true, func(w HeatmapWindow) float64 { return w.P50 }}, {"p99", false, func(w HeatmapWindow) float64 { return w.P99 }}} {
		var pts []string
		for j, w := range hs.Windows {
			if w.Count == 0 {
				continue
			}
			x := left + (float64(j)+0.5)*colW
			y := bottom - valueRow(hs.Bounds, q.value(w))*heatmapRowHeight
			pts = append(pts, num(x)+","+num(y))
		}
		if len(pts) == 0 {
			continue
		}
		dash := ""
		if q.dash {
			dash = ` stroke-dasharray="6 4"`
		}
		// A white halo under the line keeps it visible on dark cells.
		fmt.Fprintf(b, `<polyline class="halo" points="%s" fill="none" stroke="#fff" stroke-width="4.5" stroke-opacity="0.85"/>`, strings.Join(pts, " "))
		fmt.Fprintf(b, `<polyline class="quantile %s" points="%s" fill="none" stroke="#d62728" stroke-width="2"%s/>`, q.name, strings.Join(pts, " "), dash)
	}
	// Time ticks at the windows starting on whole steps, at least a label
	// apart; the first window's when none does.
	first, last := hs.Windows[0].Start, hs.Windows[n-1].Start
	step := timeStep(last-first, 4)
	prevX := math.Inf(-1)
	tick := func(j int) {
		x := left + float64(j)*colW
		prevX = x
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="tickline"/>`, num(x), num(bottom), num(x), num(bottom+4))
		text(b, x, bottom+16, "middle", "tick", clock(hs.Windows[j].Start))
	}
	for j, w := range hs.Windows {
		if floorTo(w.Start, step) == w.Start && left+float64(j)*colW-prevX >= 60 {
			tick(j)
		}
	}
	if math.IsInf(prevX, -1) {
		tick(0)
	}
	text(b, left+plotW/2, bottom+30, "middle", "axis-label", "window start (UTC)")
	// Legend: the colour scale, then the lines.
	legendItem(b, lx, 0, "#d62728", false, "p99")
	legendItem(b, lx, 1, "#d62728", true, "p50")
	sy := top + 44
	sh := math.Max(plotH-56, 30)
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="14" height="%s" fill="url(#count-scale)" stroke="#999" stroke-width="0.5"/>`, num(lx), num(sy), num(sh))
	text(b, lx+20, sy+8, "start", "tick", formatCount(maxCount))
	text(b, lx+20, sy+sh/4+4, "start", "tick", formatCount(int64(math.Round(float64(maxCount)*0.5625))))
	text(b, lx+20, sy+sh/2+4, "start", "tick", formatCount(int64(math.Round(float64(maxCount)*0.25))))
	text(b, lx+20, sy+sh, "start", "tick", "1")
	text(b, lx, sy+sh+16, "start", "legend", "values per cell")
	b.WriteString(`</svg>`)
}

// countScaleGradient is the gradient of the heatmaps' colour scale, one for the
// page in an SVG of no size, which every figure's legend draws with.
func countScaleGradient(b *strings.Builder) {
	b.WriteString(`<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs><linearGradient id="count-scale" x1="0" x2="0" y1="1" y2="0">`)
	for i := range 5 {
		f := float64(i) / 4
		fmt.Fprintf(b, `<stop offset="%s" stop-color="%s"/>`, num(f), scaleColor(f))
	}
	b.WriteString(`</linearGradient></defs></svg>`)
}

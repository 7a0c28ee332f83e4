package console

import (
	"fmt"
	"math"
	"strings"
)

// Point is one value of a series at a time, epoch ms.
type Point struct {
	T int64
	V float64
}

// Series is a named line of a chart.
type Series struct {
	Name   string
	Points []Point
}

// Period is a span of time [From, To), epoch ms, with a tooltip.
type Period struct {
	From, To int64
	Title    string
}

// lineChart is a chart of series over time.
type lineChart struct {
	label, yLabel string
	series        []Series
	// from and to bound the time axis.
	from, to int64
	// guides are dashed horizontal lines at these values (a threshold).
	guides []float64
	// shaded are periods drawn as bands behind the lines (a source
	// degraded).
	shaded []Period
	// steps draws each point as a step held until the next, for counts
	// per interval.
	steps bool
	// whole is set for counts: the value axis has no ticks between whole
	// numbers.
	whole bool
}

// chartHeight is the height of a line chart.
const chartHeight = 230

// render draws the chart as SVG.
func (c lineChart) render(b *strings.Builder) {
	svgOpen(b, chartWidth, chartHeight, "chart", c.label)
	left, top := float64(marginLeft), float64(marginTop)
	plotW := float64(chartWidth - marginLeft - chartMarginRight)
	plotH := float64(chartHeight - marginTop - marginBottom)
	bottom := top + plotH
	lo, hi := 0.0, 0.0
	for _, s := range c.series {
		for _, p := range s.Points {
			lo, hi = math.Min(lo, p.V), math.Max(hi, p.V)
		}
	}
	for _, g := range c.guides {
		lo, hi = math.Min(lo, g), math.Max(hi, g)
	}
	if hi == lo {
		hi = lo + 1
	}
	step := niceStep(hi-lo, 4)
	if c.whole {
		step = max(step, 1)
	}
	lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	from, to := c.from, c.to
	if to <= from {
		to = from + 1000
	}
	x := func(t int64) float64 { return left + float64(t-from)/float64(to-from)*plotW }
	y := func(v float64) float64 { return bottom - (v-lo)/(hi-lo)*plotH }
	for _, p := range c.shaded {
		x0, x1 := x(max(p.From, from)), x(min(p.To, to))
		if x1 <= x0 {
			continue
		}
		fmt.Fprintf(b, `<rect class="shaded" x="%s" y="%s" width="%s" height="%s" fill="#d62728" fill-opacity="0.13"><title>%s</title></rect>`,
			num(x0), num(top), num(x1-x0), num(plotH), esc(p.Title))
	}
	for v := lo; v <= hi+step/2; v += step {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="grid"/>`, num(left), num(y(v)), num(left+plotW), num(y(v)))
		text(b, left-6, y(v)+4, "end", "tick", formatValue(math.Round(v/step)*step))
	}
	for _, g := range c.guides {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="guide"/>`, num(left), num(y(g)), num(left+plotW), num(y(g)))
	}
	tstep := timeStep(to-from, 7)
	for t := (from + tstep - 1) / tstep * tstep; t <= to; t += tstep {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="tickline"/>`, num(x(t)), num(bottom), num(x(t)), num(bottom+4))
		text(b, x(t), bottom+16, "middle", "tick", clock(t))
	}
	fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="axis"/>`, num(left), num(bottom), num(left+plotW), num(bottom))
	text(b, left+plotW/2, bottom+30, "middle", "axis-label", "time (UTC)")
	text(b, 12, top+plotH/2, "middle", "axis-label rot", c.yLabel)
	colors := seriesColors(c.series)
	for i, s := range c.series {
		var pts []string
		for k, p := range s.Points {
			if c.steps && k > 0 {
				pts = append(pts, num(x(p.T))+","+num(y(s.Points[k-1].V)))
			}
			pts = append(pts, num(x(p.T))+","+num(y(p.V)))
		}
		if len(pts) == 1 {
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, num(x(s.Points[0].T)), num(y(s.Points[0].V)), colors[i])
		}
		fmt.Fprintf(b, `<polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"/>`,
			esc(s.Name), strings.Join(pts, " "), colors[i])
		legendItem(b, float64(chartWidth-chartMarginRight+14), i, colors[i], false, s.Name)
	}
	if len(c.series) == 0 {
		text(b, left+plotW/2, top+plotH/2, "middle", "empty", "nothing yet")
	}
	if len(c.shaded) > 0 {
		ly := float64(marginTop + 8 + len(c.series)*18)
		lx := float64(chartWidth - chartMarginRight + 14)
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="18" height="10" fill="#d62728" fill-opacity="0.13"/>`, num(lx), num(ly-5))
		text(b, lx+24, ly+4, "start", "legend", "degraded")
	}
	b.WriteString(`</svg>`)
}

// timelineRow is one row of a timeline: a label and its periods.
type timelineRow struct {
	label   string
	periods []Period
}

// renderTimeline draws rows of periods over [from, to): which sources
// were degraded when, on a time axis named xLabel.
func renderTimeline(b *strings.Builder, label, xLabel string, rows []timelineRow, from, to int64) {
	const rowH = 22
	height := len(rows)*rowH + marginTop + marginBottom
	svgOpen(b, chartWidth, height, "timeline", label)
	left, top := float64(marginLeft), float64(marginTop)
	plotW := float64(chartWidth - marginLeft - chartMarginRight)
	bottom := top + float64(len(rows)*rowH)
	if to <= from {
		to = from + 1000
	}
	x := func(t int64) float64 { return left + float64(min(max(t, from), to)-from)/float64(to-from)*plotW }
	for i, r := range rows {
		y := top + float64(i*rowH)
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="%d" fill="#f3f3f3"/>`, num(left), num(y+3), num(plotW), rowH-6)
		text(b, left-6, y+rowH/2+4, "end", "tick", truncate(r.label, 12))
		for _, p := range r.periods {
			fmt.Fprintf(b, `<rect class="period" x="%s" y="%s" width="%s" height="%d" fill="#d62728"><title>%s</title></rect>`,
				num(x(p.From)), num(y+3), num(math.Max(x(p.To)-x(p.From), 1.5)), rowH-6, esc(p.Title))
		}
	}
	tstep := timeStep(to-from, 7)
	for t := (from + tstep - 1) / tstep * tstep; t <= to; t += tstep {
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="tickline"/>`, num(x(t)), num(bottom), num(x(t)), num(bottom+4))
		text(b, x(t), bottom+16, "middle", "tick", clock(t))
	}
	text(b, left+plotW/2, bottom+30, "middle", "axis-label", xLabel)
	lx := float64(chartWidth - chartMarginRight + 14)
	fmt.Fprintf(b, `<rect x="%s" y="%s" width="18" height="10" fill="#d62728"/>`, num(lx), num(top+3))
	text(b, lx+24, top+12, "start", "legend", "degraded")
	b.WriteString(`</svg>`)
}

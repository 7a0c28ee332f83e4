package console

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// chartedSources is how many sources the skew chart draws: those degraded
// first, then those furthest from zero.
const chartedSources = 8

// The parts of the live page, each drawn and fetched on its own: the
// figures and charts change at every sample, the heatmaps only when a
// window fires.
const (
	partStatus   = "status"
	partHeatmaps = "heatmaps"
	partCharts   = "charts"
)

var parts = []string{partStatus, partHeatmaps, partCharts}

// drawing is a part of the page as drawn, with what it was drawn from: the
// version of its data and the second it was drawn in.
type drawing struct {
	version uint64
	second  int64
	html    string
}

// Handler serves the console: the page at /, and at
// /console/content?part=status|heatmaps|charts each part of it drawn
// anew, which the page's script fetches every Push. The heatmaps part has
// an ETag, so that a page asks for it again without getting it when no
// window fired. Any other path is not found.
func (l *Live) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", l.page)
	mux.HandleFunc("GET /console/content", l.content)
	return mux
}

// page serves the whole page, drawn now, with the script that keeps it
// up to date.
func (l *Live) page(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	pageHead(&b, l.opts.Title, l.opts.Subtitle, "live", l.opts.Links, l.opts.Self)
	for _, part := range parts {
		fmt.Fprintf(&b, "<div id=\"live-%s\">%s</div>\n", part, l.draw(part).html)
	}
	fmt.Fprintf(&b, "</main>\n<script>\nconst refreshMillis = %d;\n%s</script>\n</body>\n</html>\n", l.opts.Push.Milliseconds(), script)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(b.String()))
}

// content serves a part of the page, drawn now: the charts' times move
// even when the job is stuck, and a stuck job is when the checkpoint age
// matters.
func (l *Live) content(w http.ResponseWriter, r *http.Request) {
	part := r.URL.Query().Get("part")
	if !slices.Contains(parts, part) {
		http.Error(w, fmt.Sprintf("part: want one of %v, not %q", parts, part), http.StatusNotFound)
		return
	}
	d := l.draw(part)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if part == partHeatmaps {
		etag := fmt.Sprintf(`"%d"`, d.version)
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", etag)
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	} else {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.Write([]byte(d.html))
}

// draw returns a part of the page, drawn at most once a second whatever
// the number of pages open, and the heatmaps only when a window fired.
func (l *Live) draw(part string) drawing {
	l.mu.Lock()
	version, second := l.version, l.opts.Now().Unix()
	if part == partHeatmaps {
		version = l.heatmaps
	}
	d, ok := l.drawn[part]
	l.mu.Unlock()
	fresh := d.version == version && d.second == second
	if part == partHeatmaps {
		fresh = d.version == version || d.second == second
	}
	if ok && fresh {
		return d
	}
	var b strings.Builder
	switch part {
	case partHeatmaps:
		figures, hidden, v := l.figures()
		version = v
		note := fmt.Sprintf("The last %d fired windows per heatmap and key: per window (column) and latency bucket (row), the number of values, colour by count; the lines are each window's p50 and p99. A red mark over a column: the window has re-timed events.", l.opts.Windows)
		if hidden > 0 {
			more := strconv.Itoa(hidden)
			if hidden >= l.hiddenLimit() {
				more = "At least " + more
			}
			note += fmt.Sprintf(" %s more keys fired windows and are not drawn (the console draws the first %d).", more, l.opts.Series)
		}
		renderHeatmaps(&b, figures, note)
	case partStatus:
		renderStatus(&b, l.snapshot(), l.opts)
	case partCharts:
		renderCharts(&b, l.snapshot(), l.opts)
	}
	d = drawing{version: version, second: second, html: b.String()}
	l.mu.Lock()
	l.drawn[part] = d
	l.mu.Unlock()
	return d
}

// renderStatus draws what an operator asks first: is the job healthy and
// keeping up, which rules fire now and how much, which sources are
// degraded, what p99 is now per heatmap key, and how many records went
// to late and dlq. The charts come below it.
func renderStatus(b *strings.Builder, s snapshot, o LiveOptions) {
	health := o.Health
	var last, prev *Sample
	if n := len(s.samples); n > 0 {
		last = &s.samples[n-1]
		if n > 1 {
			prev = &s.samples[n-2]
		}
	}
	var tiles []tile
	if health != nil {
		t := tile{"health", "ok", "as /healthz answers"}
		if err := health(); err != nil {
			t = tile{"health", "unhealthy", shorten(err.Error(), 90)}
		}
		tiles = append(tiles, t)
	}
	rate, decRate, lag := "–", "–", int64(0)
	// perSecond is a counter's rate over the last interval.
	perSecond := func(now, before int64) string {
		if prev == nil || last.At <= prev.At {
			return "–"
		}
		return formatValue(math.Round(float64(now-before) / (float64(last.At-prev.At) / 1000)))
	}
	if last != nil {
		for _, p := range last.Partitions {
			lag += p.ConsumerLag
		}
		if prev != nil {
			rate = perSecond(last.Records, prev.Records)
			decRate = perSecond(sumDecisions(last.Decisions), sumDecisions(prev.Decisions))
		}
	}
	wm := tile{"watermark", "none yet", "no event time seen"}
	if last != nil && last.Watermark > 0 {
		wm = tile{"watermark", clock(last.Watermark), time.UnixMilli(last.Watermark).UTC().Format("2006-01-02") + " UTC, " + formatDuration(last.At-last.Watermark) + " behind"}
	}
	late, dlq := tile{"late", "–", "records"}, tile{"dlq", "–", "records"}
	degraded := tile{"sources degraded", "–", "no source seen"}
	if last != nil {
		late = tile{"late", formatCount(last.Late), "since start, " + perSecondOf(perSecond, last.Late, prev, func(p *Sample) int64 { return p.Late }) + "/s now"}
		dlq = tile{"dlq", formatCount(last.DLQ), "since start, " + perSecondOf(perSecond, last.DLQ, prev, func(p *Sample) int64 { return p.DLQ }) + "/s now"}
		var names []string
		for _, src := range last.Sources {
			if src.Degraded {
				names = append(names, src.Source)
			}
		}
		switch {
		case len(names) > 0:
			degraded = tile{"sources degraded", strconv.Itoa(len(names)), shorten(strings.Join(names, ", "), 60)}
		case len(last.Sources) > 0:
			degraded = tile{"sources degraded", "0", plural(len(last.Sources), "source", "sources") + " on time"}
		}
	}
	ckpt := tile{"checkpoint age", "none yet", "no checkpoint durable"}
	if s.checkpointed > 0 {
		ckpt = tile{"checkpoint age", formatDuration(s.now - s.checkpointed), "since the last durable checkpoint"}
	}
	size := "–"
	if last != nil {
		size = formatBytes(last.StateBytes)
	}
	if o.FromOutputs {
		tiles = append(tiles, tile{"decisions/s", decRate, "all rules, as the decisions topic has them"}, late, dlq)
	} else {
		tiles = append(tiles,
			tile{"events/s", rate, "input records, last interval"},
			tile{"decisions/s", decRate, "all rules"},
			tile{"consumer lag", formatCount(lag), "records not consumed yet"},
			wm, degraded, late, dlq, ckpt,
			tile{"state", size, "Pebble on disk"})
	}
	renderTiles(b, tiles)
	b.WriteString(`<div class="now">`)
	renderFiring(b, s.samples)
	renderP99Now(b, s.latest)
	b.WriteString("</div>\n")
}

// perSecondOf is perSecond of a counter of the last sample and prev.
func perSecondOf(perSecond func(now, before int64) string, now int64, prev *Sample, of func(*Sample) int64) string {
	if prev == nil {
		return "–"
	}
	return perSecond(now, of(prev))
}

// firingWindow is how far back "last minute" looks.
const firingWindow = 60_000

// renderFiring draws each rule and action that decided: per second now,
// in the last minute, and since the job started.
func renderFiring(b *strings.Builder, samples []Sample) {
	b.WriteString(`<section id="firing"><h2>Rules firing</h2>`)
	n := len(samples)
	if n == 0 || sumDecisions(samples[n-1].Decisions) == 0 {
		b.WriteString(`<p class="note">No rule has decided yet.</p></section>`)
		return
	}
	last := &samples[n-1]
	prev, minuteAgo := last, &samples[0]
	if n > 1 {
		prev = &samples[n-2]
	}
	// The newest sample a minute old or more, else the oldest.
	for i := n - 1; i >= 0; i-- {
		if last.At-samples[i].At >= firingWindow {
			minuteAgo = &samples[i]
			break
		}
	}
	count := func(s *Sample, i int) int64 {
		if i < len(s.Decisions) && s.Decisions[i].Rule == last.Decisions[i].Rule {
			return s.Decisions[i].Count
		}
		return 0 // a reload changed the rules since
	}
	type row struct {
		rc           RuleCount
		now          float64
		total, delta int64
	}
	var rows []row
	for i, rc := range last.Decisions {
		if rc.Count == 0 {
			continue
		}
		r := row{rc: rc, total: rc.Count}
		if dt := float64(last.At-prev.At) / 1000; dt > 0 {
			r.now = float64(rc.Count-count(prev, i)) / dt
		}
		r.delta = rc.Count - count(minuteAgo, i)
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		if c := cmp.Compare(b.now, a.now); c != 0 {
			return c
		}
		return cmp.Compare(b.delta, a.delta)
	})
	fmt.Fprintf(b, `<table><tr><th>rule</th><th>action</th><th class="n">per second now</th><th class="n">last %s</th><th class="n">since start</th></tr>`,
		formatDuration(last.At-minuteAgo.At))
	for _, r := range rows {
		fmt.Fprintf(b, `<tr><td><code>%s</code></td><td>%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td></tr>`,
			esc(r.rc.Rule), esc(r.rc.Action), formatValue(math.Round(r.now*10)/10), formatCount(r.delta), formatCount(r.total))
	}
	b.WriteString("</table></section>\n")
}

// p99Rows is how many heatmap keys the p99 table lists: the highest.
const p99Rows = 10

// renderP99Now draws the p99 of each heatmap key's last fired window, the
// highest first.
func renderP99Now(b *strings.Builder, latest []latestWindow) {
	b.WriteString(`<section id="p99-now"><h2>p99 now</h2>`)
	if len(latest) == 0 {
		b.WriteString(`<p class="note">No heatmap window has fired yet.</p></section>`)
		return
	}
	slices.SortFunc(latest, func(a, b latestWindow) int {
		if c := cmp.Compare(b.w.P99, a.w.P99); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.heatmap, b.heatmap), strings.Compare(a.key, b.key))
	})
	note := "The last fired window of each heatmap key"
	if len(latest) > p99Rows {
		note += fmt.Sprintf(", the %d highest of %d", p99Rows, len(latest))
	}
	fmt.Fprintf(b, `<p class="note">%s.</p><table><tr><th>heatmap</th><th>key</th><th class="n">p99</th><th class="n">p50</th><th class="n">values</th><th>window end</th></tr>`, esc(note))
	for _, l := range latest[:min(len(latest), p99Rows)] {
		fmt.Fprintf(b, `<tr><td>%s</td><td><code>%s</code></td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td>%s</td></tr>`,
			esc(l.heatmap), esc(l.key), formatValue(l.w.P99), formatValue(l.w.P50), formatCount(l.w.Count), clock(l.w.End))
	}
	b.WriteString("</table></section>\n")
}

// shorten cuts s to about n characters, on a rune boundary.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// plural is n and the noun's form for it.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// renderCharts draws the charts of the last Span.
func renderCharts(b *strings.Builder, s snapshot, o LiveOptions) {
	// The charts span the last Span, or from the first sample when the
	// job is younger.
	from, to := s.now-o.Span.Milliseconds(), s.now
	if len(s.samples) > 0 {
		from = max(from, s.samples[0].At)
	}
	all := s.samples
	s.samples = thin(s.samples, chartPoints)
	b.WriteString(`<section id="decisions"><h2>Decisions per second, per rule and action</h2>`)
	lineChart{label: "decisions per second per rule", yLabel: "decisions/s", series: decisionRates(s.samples), from: from, to: to, steps: true}.render(b)
	b.WriteString("</section>\n")
	if o.FromOutputs {
		renderTopKeys(b, mergeTopKeys(all), fmt.Sprintf("Over the last %s.", formatDuration(o.Span.Milliseconds())))
		return
	}
	threshold := float64(o.SkewThreshold.Milliseconds())
	// Periods and the sources' order from every sample: thinning could
	// drop a short degraded spell.
	skews, periods := sourceSeries(all, to)
	for i := range skews {
		skews[i].Points = thin(skews[i].Points, chartPoints)
	}
	b.WriteString(`<section id="skew"><h2>Clock skew per source</h2>`)
	fmt.Fprintf(b, `<p class="note">Estimated skew (event time minus reference time) of the sources, the degraded ones and those furthest from zero; the dashed lines are ±skew.threshold (%s), red bands the periods a source was degraded.</p>`, formatDuration(int64(threshold)))
	var shaded []Period
	var rows []timelineRow
	for _, sp := range periods {
		shaded = append(shaded, sp.Periods...)
		rows = append(rows, timelineRow{label: sp.Source, periods: sp.Periods})
	}
	guides := []float64{}
	if threshold > 0 {
		guides = []float64{-threshold, threshold}
	}
	lineChart{label: "clock skew per source", yLabel: "ms", series: skews, from: from, to: to, guides: guides, shaded: shaded}.render(b)
	if len(rows) > 0 {
		renderTimeline(b, "degraded periods per source", "time (UTC)", rows, from, to)
	}
	b.WriteString("</section>\n")

	b.WriteString(`<section id="watermarks"><h2>Watermark lag per partition</h2><p class="note">Wall clock minus the partition's watermark: the age of its event time.</p>`)
	lineChart{label: "watermark lag per partition", yLabel: "seconds", series: partitionSeries(s.samples, func(p PartitionSample) (float64, bool) {
		return float64(p.WatermarkLag) / 1000, p.Known
	}), from: from, to: to}.render(b)
	b.WriteString("</section>\n")
	b.WriteString(`<section id="consumer-lag"><h2>Consumer lag per partition</h2><p class="note">Records of the partition not consumed yet.</p>`)
	lineChart{label: "consumer lag per partition", yLabel: "records", series: partitionSeries(s.samples, func(p PartitionSample) (float64, bool) {
		return float64(p.ConsumerLag), true
	}), from: from, to: to, whole: true}.render(b)
	b.WriteString("</section>\n")

	renderTopKeys(b, mergeTopKeys(all), fmt.Sprintf("Over the last %s.", formatDuration(o.Span.Milliseconds())))
}

// chartPoints is about how many points a chart's series has at most:
// about one per two units of its width, which no eye tells apart from
// more.
const chartPoints = 200

// thin keeps about n of xs, evenly, the first and the last among them: of
// samples, counters between two kept ones still give their rate.
func thin[T any](xs []T, n int) []T {
	if len(xs) <= n {
		return xs
	}
	step := (len(xs) + n - 1) / n
	var out []T
	for i := 0; i < len(xs); i += step {
		out = append(out, xs[i])
	}
	if (len(xs)-1)%step != 0 {
		out = append(out, xs[len(xs)-1])
	}
	return out
}

func sumDecisions(rs []RuleCount) int64 {
	var n int64
	for _, r := range rs {
		n += r.Count
	}
	return n
}

// decisionRates is decisions per second of each rule and action between
// consecutive samples, matched by rule and action: a rules reload may
// reorder, add or remove rules between two samples.
func decisionRates(samples []Sample) []Series {
	var out []Series
	series := map[string]int{} // out's index by name
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		dt := float64(cur.At-prev.At) / 1000
		if dt <= 0 {
			continue
		}
		before := make(map[string]int64, len(prev.Decisions))
		for _, d := range prev.Decisions {
			before[d.Rule+" → "+d.Action] = d.Count
		}
		for _, d := range cur.Decisions {
			name := d.Rule + " → " + d.Action
			k, ok := series[name]
			if !ok {
				k, series[name] = len(out), len(out)
				out = append(out, Series{Name: name})
			}
			out[k].Points = append(out[k].Points, Point{T: cur.At, V: float64(d.Count-before[name]) / dt})
		}
	}
	// The rules that decided, as the report draws them.
	return slices.DeleteFunc(out, func(s Series) bool {
		return !slices.ContainsFunc(s.Points, func(p Point) bool { return p.V != 0 })
	})
}

// mergeTopKeys adds up the top keys of the samples.
func mergeTopKeys(samples []Sample) []KeyCount {
	counts := map[[2]string]int64{}
	for _, s := range samples {
		for _, k := range s.TopKeys {
			counts[[2]string{k.Rule, k.Key}] += k.Count
		}
	}
	return topKeys(counts, topKeyCount)
}

// partitionSeries is a value of each partition over the samples.
func partitionSeries(samples []Sample, value func(PartitionSample) (float64, bool)) []Series {
	byPartition := map[int32]*Series{}
	for _, s := range samples {
		for _, p := range s.Partitions {
			v, ok := value(p)
			if !ok {
				continue
			}
			ser := byPartition[p.Partition]
			if ser == nil {
				ser = &Series{Name: fmt.Sprintf("partition %d", p.Partition)}
				byPartition[p.Partition] = ser
			}
			ser.Points = append(ser.Points, Point{T: s.At, V: v})
		}
	}
	var out []Series
	for _, p := range slices.Sorted(maps.Keys(byPartition)) {
		out = append(out, *byPartition[p])
	}
	return out
}

// CompareSources orders sources as the console shows them: the degraded
// first, then by the size of their skew, the largest first.
func CompareSources(a, b SourceSample) int {
	if a.Degraded != b.Degraded {
		if a.Degraded {
			return -1
		}
		return 1
	}
	return cmp.Compare(math.Abs(b.Skew), math.Abs(a.Skew))
}

// sourceSeries is the skew of the charted sources over the samples, and
// the periods each source was degraded (consecutive samples that found it
// so), up to end for a source still degraded.
func sourceSeries(samples []Sample, end int64) ([]Series, []SourcePeriods) {
	type state struct {
		worst   float64
		series  Series
		periods []Period
		since   int64 // when its current degraded period began; -1 when none
	}
	sources := map[string]*state{}
	for _, s := range samples {
		for _, src := range s.Sources {
			st := sources[src.Source]
			if st == nil {
				st = &state{series: Series{Name: src.Source}, since: -1}
				sources[src.Source] = st
			}
			if src.Known {
				st.series.Points = append(st.series.Points, Point{T: s.At, V: src.Skew})
				st.worst = math.Max(st.worst, math.Abs(src.Skew))
			}
			switch {
			case src.Degraded && st.since < 0:
				st.since = s.At
			case !src.Degraded && st.since >= 0:
				st.periods = append(st.periods, Period{From: st.since, To: s.At, Title: src.Source + " degraded " + clock(st.since) + "–" + clock(s.At)})
				st.since = -1
			}
		}
	}
	names := slices.Sorted(maps.Keys(sources))
	var periods []SourcePeriods
	for _, name := range names {
		st := sources[name]
		if st.since >= 0 {
			st.periods = append(st.periods, Period{From: st.since, To: end, Title: name + " degraded since " + clock(st.since)})
		}
		if len(st.periods) > 0 {
			periods = append(periods, SourcePeriods{Source: name, Periods: st.periods})
		}
	}
	slices.SortStableFunc(names, func(a, b string) int {
		// Every period is closed by now: a source was degraded if it has one.
		sa, sb := sources[a], sources[b]
		return CompareSources(SourceSample{Degraded: len(sa.periods) > 0, Skew: sa.worst},
			SourceSample{Degraded: len(sb.periods) > 0, Skew: sb.worst})
	})
	var series []Series
	for _, name := range names[:min(len(names), chartedSources)] {
		if len(sources[name].series.Points) > 0 {
			series = append(series, sources[name].series)
		}
	}
	return series, periods
}

package console

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/riskstream/riskstream/sink"
)

// Report is what a replay wrote, gathered for one page: read by
// LoadReport from an output folder, drawn by WriteReport.
type Report struct {
	// From and To bound the event time of the decisions and heatmap
	// windows, epoch ms (0 and 0 with none); spanned says whether any was
	// seen.
	From, To int64
	spanned  bool
	// Heatmaps are the heatmap keys with the most values, at most
	// reportHeatmapKeys of them; HiddenHeatmaps counts the others.
	Heatmaps       []HeatmapSeries
	HiddenHeatmaps int
	// Decisions counts the decisions per rule and action, in the order
	// the rules first decided.
	Decisions []RuleCount
	// DecisionSeries is the decisions per rule and action over event
	// time, per Interval ms.
	DecisionSeries []Series
	Interval       int64
	// Processing counts the decisions on re-timed events.
	Processing int64
	TopKeys    []KeyCount
	Late       int64
	// LateExamples are the first late records, in the file's order.
	LateExamples []LateExample
	DLQ          int64
	DLQReasons   []ReasonCount
	DLQExamples  []DLQExample
	// Skew is the degraded periods per source, from skew.jsonl, and
	// SkewRecorded says whether the folder has that file (a replay older
	// than it does not).
	Skew         []SourcePeriods
	SkewRecorded bool
}

// RuleCount is the number of decisions of a rule and action.
type RuleCount struct {
	Rule, Action string
	Count        int64
}

// KeyCount is the number of decisions of a rule for a key.
type KeyCount struct {
	Rule, Key string
	Count     int64
}

// ReasonCount is the number of dlq records with a reason, its numbers
// (byte offsets, sizes) replaced by #.
type ReasonCount struct {
	Reason string
	Count  int64
}

// LateExample is a late record.
type LateExample struct {
	EventID   string
	EventTS   int64
	Watermark int64
	From      string
}

// DLQExample is a dlq record.
type DLQExample struct {
	Reason, Raw, From string
}

// SourcePeriods is the periods a source was degraded.
type SourcePeriods struct {
	Source  string
	Periods []Period
}

// exampleCount is how many late and dlq records a report shows.
const exampleCount = 5

// reportHeatmapKeys is how many heatmap keys a report draws: a heatmap
// keyed by user could have millions, and a page of them no one reads.
const reportHeatmapKeys = 48

// topKeyCount is how many keys a top-keys table shows.
const topKeyCount = 10

// Output file names in a replay's folder (docs/outputs.md).
const (
	decisionsFile = sink.Decisions + ".jsonl"
	heatmapsFile  = sink.Heatmaps + ".jsonl"
	lateFile      = sink.Late + ".jsonl"
	dlqFile       = sink.DLQ + ".jsonl"
	skewFile      = sink.Skew + ".jsonl"
)

// LoadReport reads the outputs of a replay in dir. decisions.jsonl and
// heatmaps.jsonl must be there; late.jsonl, dlq.jsonl and skew.jsonl are
// read when they are.
func LoadReport(dir string) (*Report, error) {
	r := &Report{}
	cells := map[string]*HeatmapSeries{}
	err := eachLine(filepath.Join(dir, heatmapsFile), true, func(line []byte) error {
		rec, err := decodeHeatmapRecord(line)
		if err != nil {
			return err
		}
		id := rec.Heatmap + "\x00" + rec.Key
		s := cells[id]
		if s == nil {
			s = &HeatmapSeries{Heatmap: rec.Heatmap, Key: rec.Key, Bounds: rec.Bounds}
			cells[id] = s
		}
		w := rec.Window
		if len(w.Buckets) != len(s.Bounds)+1 {
			return fmt.Errorf("%d buckets where the heatmap's first window had %d", len(w.Buckets), len(s.Bounds)+1)
		}
		r.span(w.Start, w.End-1)
		s.put(w)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, s := range cells {
		r.Heatmaps = append(r.Heatmaps, *s)
	}
	if len(r.Heatmaps) > reportHeatmapKeys {
		// The keys with the most values, ties by name.
		slices.SortFunc(r.Heatmaps, func(a, b HeatmapSeries) int {
			return cmp.Or(cmp.Compare(b.values(), a.values()), strings.Compare(a.Heatmap, b.Heatmap), strings.Compare(a.Key, b.Key))
		})
		r.HiddenHeatmaps = len(r.Heatmaps) - reportHeatmapKeys
		r.Heatmaps = r.Heatmaps[:reportHeatmapKeys]
	}
	slices.SortFunc(r.Heatmaps, func(a, b HeatmapSeries) int {
		return cmp.Or(strings.Compare(a.Heatmap, b.Heatmap), strings.Compare(a.Key, b.Key))
	})

	// Decisions are kept as the index of their rule and action (in the
	// order first seen) and their time, 16 bytes each, until the span,
	// and so the chart's interval, is known.
	type decision struct {
		rule int
		ts   int64
	}
	var decisions []decision
	ruleIndex := map[[2]string]int{}
	keys := map[[2]string]int64{}
	err = eachLine(filepath.Join(dir, decisionsFile), true, func(line []byte) error {
		var d struct {
			EventTS    int64           `json:"event_ts"`
			Rule       string          `json:"rule"`
			Action     string          `json:"action"`
			Key        json.RawMessage `json:"key"`
			TimeDomain string          `json:"time_domain"`
		}
		if err := json.Unmarshal(line, &d); err != nil {
			return err
		}
		if len(d.Key) == 0 || d.Key[0] != '{' {
			return fmt.Errorf("key %s: not an object", d.Key)
		}
		// Counted by the key's JSON text: only the top keys are named.
		keys[[2]string{d.Rule, string(d.Key)}]++
		if d.TimeDomain == "processing" {
			r.Processing++
		}
		r.span(d.EventTS, d.EventTS)
		id := [2]string{d.Rule, d.Action}
		i, ok := ruleIndex[id]
		if !ok {
			i = len(r.Decisions)
			ruleIndex[id] = i
			r.Decisions = append(r.Decisions, RuleCount{Rule: d.Rule, Action: d.Action})
		}
		decisions = append(decisions, decision{i, d.EventTS})
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Interval = timeStep(r.To-r.From, 60)
	series := make([]map[int64]int64, len(r.Decisions))
	for i := range series {
		series[i] = map[int64]int64{}
	}
	for _, d := range decisions {
		series[d.rule][floorTo(d.ts, r.Interval)]++
	}
	for i, rc := range r.Decisions {
		counts := series[i]
		s := Series{Name: rc.Rule + " → " + rc.Action}
		for t := floorTo(r.From, r.Interval); t <= r.To; t += r.Interval {
			s.Points = append(s.Points, Point{T: t, V: float64(counts[t])})
			r.Decisions[i].Count += counts[t]
		}
		r.DecisionSeries = append(r.DecisionSeries, s)
	}
	r.TopKeys = topKeys(keys, topKeyCount)
	for i := range r.TopKeys {
		if r.TopKeys[i].Key, err = keyLabel(json.RawMessage(r.TopKeys[i].Key)); err != nil {
			return nil, fmt.Errorf("report: %s: %w", decisionsFile, err)
		}
	}

	err = eachLine(filepath.Join(dir, lateFile), false, func(line []byte) error {
		var l struct {
			Event struct {
				ID string          `json:"id"`
				TS json.RawMessage `json:"ts"`
			} `json:"event"`
			Watermark int64 `json:"watermark"`
			provenance
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return err
		}
		r.Late++
		if len(r.LateExamples) < exampleCount {
			ts, _ := strconv.ParseInt(string(l.Event.TS), 10, 64)
			r.LateExamples = append(r.LateExamples, LateExample{EventID: l.Event.ID, EventTS: ts, Watermark: l.Watermark, From: l.String()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	reasons := map[string]int64{}
	err = eachLine(filepath.Join(dir, dlqFile), false, func(line []byte) error {
		var d struct {
			Reason    string `json:"reason"`
			Raw       string `json:"raw"`
			RawBase64 string `json:"raw_base64"`
			provenance
		}
		if err := json.Unmarshal(line, &d); err != nil {
			return err
		}
		r.DLQ++
		reasons[reasonKind(d.Reason)]++
		if len(r.DLQExamples) < exampleCount {
			raw := d.Raw
			if d.RawBase64 != "" {
				raw = "base64: " + d.RawBase64
			}
			r.DLQExamples = append(r.DLQExamples, DLQExample{Reason: d.Reason, Raw: truncate(raw, 160), From: d.String()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for reason, n := range reasons {
		r.DLQReasons = append(r.DLQReasons, ReasonCount{Reason: reason, Count: n})
	}
	slices.SortFunc(r.DLQReasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
	})

	if err := r.loadSkew(filepath.Join(dir, skewFile)); err != nil {
		return nil, err
	}
	return r, nil
}

// numbers are the numbers of a dlq reason, which vary from record to
// record of one kind, and names with a number in them, which do not
// (RFC 3339, int64), which the second group keeps.
var numbers = regexp.MustCompile(`([0-9]+)|(RFC [0-9]+|\b[A-Za-z_][A-Za-z_0-9]*[0-9][A-Za-z_0-9]*)`)

// reasonKind is a dlq reason with its varying numbers as #: the kind of
// record it is, for counting.
func reasonKind(reason string) string {
	return numbers.ReplaceAllStringFunc(reason, func(m string) string {
		if m[0] >= '0' && m[0] <= '9' {
			return "#"
		}
		return m
	})
}

// heatmapRecord is a record of the heatmaps output (docs/outputs.md).
type heatmapRecord struct {
	// Heatmap is the heatmap's name, Key its key as name=value pairs.
	Heatmap, Key string
	// Bounds are the buckets' upper bounds, +Inf not included.
	Bounds []float64
	Window HeatmapWindow
}

// decodeHeatmapRecord reads a record of the heatmaps output.
func decodeHeatmapRecord(line []byte) (heatmapRecord, error) {
	var h struct {
		Heatmap  string          `json:"heatmap"`
		Key      json.RawMessage `json:"key"`
		Window   window          `json:"window"`
		Revision int32           `json:"revision"`
		Count    int64           `json:"count"`
		P50      float64         `json:"p50"`
		P99      float64         `json:"p99"`
		Buckets  []struct {
			LE    json.RawMessage `json:"le"`
			Count int64           `json:"count"`
		} `json:"buckets"`
		Degraded int64 `json:"degraded_events"`
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return heatmapRecord{}, err
	}
	key, err := keyLabel(h.Key)
	if err != nil {
		return heatmapRecord{}, err
	}
	rec := heatmapRecord{Heatmap: h.Heatmap, Key: key, Window: HeatmapWindow{Start: h.Window.Start, End: h.Window.End,
		Revision: h.Revision, Count: h.Count, P50: h.P50, P99: h.P99, Degraded: h.Degraded}}
	for _, b := range h.Buckets {
		if le, err := strconv.ParseFloat(string(b.LE), 64); err == nil {
			rec.Bounds = append(rec.Bounds, le)
		}
		rec.Window.Buckets = append(rec.Window.Buckets, b.Count)
	}
	return rec, nil
}

// window is a record's window.
type window struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

// provenance is where a late or dlq record came from.
type provenance struct {
	File      string `json:"file"`
	Line      int64  `json:"line"`
	Partition *int64 `json:"partition"`
	Offset    int64  `json:"offset"`
}

// String says where the record came from: file:line or partition/offset.
func (p provenance) String() string {
	if p.File != "" {
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	if p.Partition != nil {
		return fmt.Sprintf("partition %d offset %d", *p.Partition, p.Offset)
	}
	return ""
}

// span widens the report's event time to [from, to].
func (r *Report) span(from, to int64) {
	if !r.spanned {
		r.From, r.To, r.spanned = from, to, true
	}
	r.From, r.To = min(r.From, from), max(r.To, to)
}

// loadSkew reads the skew transitions of a replay into degraded periods
// per source; a period still open at the end lasts to the report's end.
func (r *Report) loadSkew(path string) error {
	open := map[string]int64{}
	skewAt := map[string]int64{}
	periods := map[string][]Period{}
	last := int64(0)
	if _, err := os.Stat(path); err == nil {
		r.SkewRecorded = true
	}
	err := eachLine(path, false, func(line []byte) error {
		var tr struct {
			Source   string `json:"source"`
			Degraded bool   `json:"degraded"`
			SkewMS   int64  `json:"skew_ms"`
			At       int64  `json:"at"`
		}
		if err := json.Unmarshal(line, &tr); err != nil {
			return err
		}
		last = max(last, tr.At)
		if tr.Degraded {
			open[tr.Source], skewAt[tr.Source] = tr.At, tr.SkewMS
			return nil
		}
		if from, ok := open[tr.Source]; ok {
			periods[tr.Source] = append(periods[tr.Source], Period{From: from, To: tr.At,
				Title: fmt.Sprintf("%s degraded %s–%s, skew %+d ms", tr.Source, clock(from), clock(tr.At), skewAt[tr.Source])})
			delete(open, tr.Source)
		}
		return nil
	})
	if err != nil {
		return err
	}
	end := max(r.To, last)
	for src, from := range open {
		periods[src] = append(periods[src], Period{From: from, To: end,
			Title: fmt.Sprintf("%s degraded from %s to the end, skew %+d ms", src, clock(from), skewAt[src])})
	}
	for src, ps := range periods {
		r.Skew = append(r.Skew, SourcePeriods{Source: src, Periods: ps})
	}
	slices.SortFunc(r.Skew, func(a, b SourcePeriods) int { return strings.Compare(a.Source, b.Source) })
	return nil
}

// floorTo rounds t down to a multiple of step (floor modulo, as windows
// are aligned).
func floorTo(t, step int64) int64 {
	m := t % step
	if m < 0 {
		m += step
	}
	return t - m
}

// topKeys returns the n keys with the most decisions, ties by rule and key.
func topKeys(counts map[[2]string]int64, n int) []KeyCount {
	var out []KeyCount
	for k, c := range counts {
		out = append(out, KeyCount{Rule: k[0], Key: k[1], Count: c})
	}
	slices.SortFunc(out, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Rule, b.Rule), strings.Compare(a.Key, b.Key))
	})
	return out[:min(n, len(out))]
}

// keyLabel turns a record's key object into name=value pairs in the
// object's order, the order of the rule's key.
func keyLabel(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("key %s: not an object", raw)
	}
	var parts []string
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("key %s: %w", raw, err)
		}
		value, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("key %s: %w", raw, err)
		}
		parts = append(parts, fmt.Sprintf("%v=%v", name, value))
	}
	return strings.Join(parts, ", "), nil
}

// eachLine calls fn with each line of the file at path, saying which line
// an error is on. A missing file is an error only when required.
func eachLine(path string, required bool, fn func([]byte) error) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil
	}
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 1<<16)
	for n := 1; ; n++ {
		line, err := rd.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if ferr := fn(line); ferr != nil {
				return fmt.Errorf("report: %s:%d: %w", path, n, ferr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("report: %s: %w", path, err)
		}
	}
}

package console

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/riskstream/riskstream/rules"
	"github.com/riskstream/riskstream/windows"
)

// LiveOptions bound what the live console keeps and say how it draws.
type LiveOptions struct {
	// SkewThreshold is the rules' skew.threshold, drawn on the skew chart.
	SkewThreshold time.Duration
	// Span is how far back the charts go, in wall-clock time; samples
	// older than it are dropped. The default value is 5 minutes.
	Span time.Duration
	// Windows is how many fired windows are kept per heatmap and key, the
	// latest. The default value is 60.
	Windows int
	// Series is how many heatmap keys (over all heatmaps) are kept: the
	// first ones to fire; later keys are counted, not drawn, as the
	// metrics bound their labels. The default value is 24.
	Series int
	// Push is how often an open page asks for a new drawing. The default
	// value is 1 second.
	Push time.Duration
	// Now is the wall clock. The default value is time.Now.
	Now func() time.Time
	// Health says whether the job is healthy (nil), as /healthz does; nil
	// leaves it off the page.
	Health func() error
	// Title and Subtitle head the page. The default values are
	// "riskstream live" and "the job as it runs".
	Title, Subtitle string
	// FromOutputs says the console is fed from the job's output topics
	// (OutputFeed), not by the job itself: it shows what the outputs say
	// (decisions, late and dlq records, heatmaps), and leaves out what only
	// the job knows of itself (events read, lag, watermark, skew,
	// checkpoints, state).
	FromOutputs bool
	// Links are other pages to offer at the top of this one, such as a
	// distributed instance's own view and the whole job's; the one whose
	// Href is Self is marked as this page.
	Links []Link
	Self  string
}

// Link is a page the console's header links to.
type Link struct{ Label, Href string }

func (o *LiveOptions) ensureDefaults() {
	if o.Span <= 0 {
		o.Span = 5 * time.Minute
	}
	if o.Windows <= 0 {
		o.Windows = 60
	}
	if o.Series <= 0 {
		o.Series = 24
	}
	if o.Push <= 0 {
		o.Push = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Title == "" {
		o.Title, o.Subtitle = "riskstream live", cmp.Or(o.Subtitle, "the job as it runs")
	}
}

// Sample is the job's state at one moment, taken by the job between
// batches (at a checkpoint): what the charts of the console are drawn
// from.
type Sample struct {
	// At is the wall clock, epoch ms.
	At int64
	// Records counts input records since the job started.
	Records int64
	// Decisions counts decisions per rule and action since the job
	// started, in rules file order.
	Decisions []RuleCount
	// Watermark is the job's watermark, epoch ms, 0 before there is one.
	Watermark  int64
	Partitions []PartitionSample
	Sources    []SourceSample
	StateBytes int64
	// TopKeys are the keys with the most decisions since the previous
	// sample (DecisionKeys.Take).
	TopKeys []KeyCount
	// Late and DLQ count the late and dead-letter records since the job
	// started.
	Late, DLQ int64
}

// PartitionSample is one input partition's lags.
type PartitionSample struct {
	Partition int32
	// WatermarkLag is the wall clock minus the partition's watermark, ms;
	// Known says whether the partition has a watermark yet.
	WatermarkLag int64
	Known        bool
	ConsumerLag  int64
}

// SourceSample is one source's clock.
type SourceSample struct {
	Source string
	// Skew is the estimate in ms, judged when Known.
	Skew            float64
	Known, Degraded bool
}

// Live holds what the live console shows: the latest fired windows of
// each heatmap and key, and the samples of the last Span. Its methods are
// safe for concurrent use; the job calls them per fired window and per
// sample, never per event.
type Live struct {
	opts LiveOptions
	mu   sync.Mutex
	// series are the kept heatmap keys by heatmap name and key, hidden
	// the keys not kept.
	series map[string]*liveSeries
	hidden map[string]bool
	// heatmaps counts the changes to series.
	heatmaps uint64
	// samples are in time order, the oldest first.
	samples []Sample
	// checkpointed is when the last checkpoint became durable, epoch ms.
	checkpointed int64
	// version counts the samples added.
	version uint64
	// drawn caches the last drawing of each part of the page.
	drawn map[string]drawing
}

// liveSeries is a kept heatmap key, with its figure as last drawn: a
// key's figure is drawn again only when a window of it fires.
type liveSeries struct {
	HeatmapSeries
	// version counts its changes; figure was drawn at drawnVersion.
	version, drawnVersion uint64
	figure                string
}

// NewLive returns an empty console.
func NewLive(opts LiveOptions) *Live {
	opts.ensureDefaults()
	return &Live{opts: opts, series: map[string]*liveSeries{}, hidden: map[string]bool{}, drawn: map[string]drawing{}}
}

// Heatmap keeps a fired window (or a later revision of it). A window of a
// key not kept costs a map lookup and its id: figures are made only for the
// kept.
func (l *Live) Heatmap(w *windows.HeatmapWindow) {
	id := w.Heatmap.Name + "\x00" + w.Key
	l.keep(id, func() HeatmapSeries {
		return HeatmapSeries{Heatmap: w.Heatmap.Name, Key: keyText(w.Heatmap.Key, w.Key), Bounds: w.Heatmap.Buckets}
	}, func() HeatmapWindow {
		hw := HeatmapWindow{Start: w.Start, End: w.End, Revision: w.Revision, Count: w.Acc.Count,
			Buckets: slices.Clone(w.Acc.Buckets), Degraded: w.Acc.Degraded}
		if w.Acc.Count > 0 {
			hw.P50, hw.P99 = w.Acc.Quantile(0.5), w.Acc.Quantile(0.99)
		}
		return hw
	})
}

// keep keeps a fired window of the heatmap key id, made by window, in its
// series, made by series when the key is new and there is room.
func (l *Live) keep(id string, series func() HeatmapSeries, window func() HeatmapWindow) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.series[id]
	if s == nil {
		if len(l.series) >= l.opts.Series {
			if len(l.hidden) < l.hiddenLimit() {
				l.hidden[id] = true
			}
			return
		}
		s = &liveSeries{HeatmapSeries: series()}
		l.series[id] = s
		delete(l.hidden, id) // not drawn before a reload freed a place
	}
	if !s.put(window()) {
		return // nothing to draw anew
	}
	s.version++
	l.heatmaps++
	if n := len(s.Windows) - l.opts.Windows; n > 0 {
		s.Windows = slices.Delete(s.Windows, 0, n)
	}
}

// Reload makes the console follow a rules reload, d, as the engine's
// state does: the keys of a heatmap that keeps its state keep their
// windows; those of a heatmap that restarts (its key, filters, field,
// window or buckets changed) or is removed are forgotten, the keys not
// drawn included.
func (l *Live) Reload(d rules.Diff) {
	kept := d.KeptHeatmaps()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.series {
		if !kept[s.Heatmap] {
			delete(l.series, id)
			l.heatmaps++
		}
	}
	for id := range l.hidden {
		if name, _, _ := strings.Cut(id, "\x00"); !kept[name] {
			delete(l.hidden, id)
			l.heatmaps++ // the note of keys not drawn changes
		}
	}
}

// Add keeps a sample and drops those older than the span.
func (l *Live) Add(s Sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, s)
	cut := s.At - l.opts.Span.Milliseconds()
	i := 0
	for i < len(l.samples)-1 && l.samples[i].At < cut {
		i++
	}
	l.samples = slices.Delete(l.samples, 0, i)
	l.version++
}

// Checkpointed notes that a checkpoint became durable at t.
func (l *Live) Checkpointed(t time.Time) {
	l.mu.Lock()
	l.checkpointed = t.UnixMilli()
	l.mu.Unlock()
}

// snapshot is a copy of the samples, drawn without the lock.
type snapshot struct {
	samples      []Sample
	checkpointed int64
	now          int64
	// latest is the last fired window of each kept heatmap key.
	latest []latestWindow
}

// latestWindow is a heatmap key's last fired window.
type latestWindow struct {
	heatmap, key string
	w            HeatmapWindow
}

// snapshot copies what the figures and charts are drawn from; samples
// are never changed once kept, so copying the slice is enough.
func (l *Live) snapshot() snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := snapshot{samples: slices.Clone(l.samples), checkpointed: l.checkpointed, now: l.opts.Now().UnixMilli()}
	for _, ls := range l.series {
		if n := len(ls.Windows); n > 0 {
			s.latest = append(s.latest, latestWindow{ls.Heatmap, ls.Key, ls.Windows[n-1]})
		}
	}
	return s
}

// figures returns the figures of the kept heatmap keys in key order, how
// many keys are not kept, and the version of the heatmaps they show. The
// figures of keys that changed since last drawn are drawn anew, outside
// the lock, so that the job's calls do not wait for a drawing.
func (l *Live) figures() (figures []string, hidden int, version uint64) {
	type stale struct {
		i       int
		s       *liveSeries
		copy    HeatmapSeries
		version uint64
	}
	var todo []stale
	l.mu.Lock()
	ids := slices.Sorted(maps.Keys(l.series))
	figures = make([]string, len(ids))
	for i, id := range ids {
		s := l.series[id]
		if s.figure != "" && s.drawnVersion == s.version {
			figures[i] = s.figure
			continue
		}
		c := s.HeatmapSeries
		c.Windows = slices.Clone(c.Windows)
		todo = append(todo, stale{i, s, c, s.version})
	}
	hidden, version = len(l.hidden), l.heatmaps
	l.mu.Unlock()
	for _, t := range todo {
		figures[t.i] = heatmapFigure(t.copy)
	}
	l.mu.Lock()
	for _, t := range todo {
		if t.s.version == t.version {
			t.s.figure, t.s.drawnVersion = figures[t.i], t.version
		}
	}
	l.mu.Unlock()
	return figures, hidden, version
}

// hiddenLimit is how many keys not drawn Heatmap counts, at most: a bound
// on its memory with a heatmap keyed by user.
func (l *Live) hiddenLimit() int { return 100 * l.opts.Series }

// keyText renders an operator's key as name=value pairs, as the report
// shows a record's key.
func keyText(names []string, key string) string { return windows.KeyText(names, key, ", ") }

// DecisionKeys counts decisions per rule and key between two samples. It
// is owned by the job's loop, which emits the decisions, and so has no
// lock. Between two takes it counts at most limit keys, the first to have
// a decision: a key first seen past the limit is not counted, which bounds
// its memory whatever the number of keys.
type DecisionKeys struct {
	limit  int
	counts map[decisionKey]int64
}

// decisionKey is a rule's key; key is the operator's key text.
type decisionKey struct {
	rule *rules.Rule
	key  string
}

// NewDecisionKeys returns a counter of at most limit keys between takes.
func NewDecisionKeys(limit int) *DecisionKeys {
	return &DecisionKeys{limit: limit, counts: map[decisionKey]int64{}}
}

// Add counts a decision.
func (k *DecisionKeys) Add(d *windows.Decision) {
	id := decisionKey{d.Rule, d.Key}
	if n, ok := k.counts[id]; ok {
		k.counts[id] = n + 1
		return
	}
	if len(k.counts) >= k.limit {
		return
	}
	// The operator reuses the key's bytes after the call.
	id.key = strings.Clone(id.key)
	k.counts[id] = 1
}

// Take returns the n keys with the most decisions since the last take,
// and starts counting afresh. Keys are ranked by their operator text and
// only the top n rendered for people: Take runs on the job's loop. Rules
// are told apart by name, which a reload keeps.
func (k *DecisionKeys) Take(n int) []KeyCount {
	counts := make(map[[2]string]int64, len(k.counts))
	keyNames := map[string][]string{}
	for id, c := range k.counts {
		counts[[2]string{id.rule.Name, id.key}] += c
		keyNames[id.rule.Name] = id.rule.Key
	}
	clear(k.counts)
	top := topKeys(counts, n)
	for i := range top {
		top[i].Key = keyText(keyNames[top[i].Rule], top[i].Key)
	}
	return top
}

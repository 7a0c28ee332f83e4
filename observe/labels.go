package observe

import "sync"

// otherLabel is the label value that stands for every input-derived value
// past a boundedLabels' limit.
const otherLabel = "other"

// boundedLabels admits the first limit distinct values of a label taken from
// the input (a source, a heatmap key) and maps every later one to
// otherLabel: any producer can send new values, and each would otherwise
// be a new time series in the job's memory and in the monitoring system's.
// The first come keep their label for the job's life, so a series never
// changes meaning.
type boundedLabels struct {
	mu       sync.Mutex
	limit    int
	admitted map[string]struct{}
}

func newBoundedLabels(limit int) *boundedLabels {
	return &boundedLabels{limit: limit, admitted: make(map[string]struct{})}
}

// value returns v if it has, or may take, a label of its own, else
// otherLabel.
func (b *boundedLabels) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.admitted[v]; ok {
		return v
	}
	if len(b.admitted) >= b.limit || v == otherLabel {
		return otherLabel
	}
	b.admitted[v] = struct{}{}
	return v
}

package testinput

import (
	"strings"

	"github.com/riskstream/riskstream/event"
	"github.com/riskstream/riskstream/sink"
	"github.com/riskstream/riskstream/windows"
)

// Recorder is an engine output that renders every record as the sinks
// would, one line each, prefixed with the output's name: what scenario
// files expect.
type Recorder struct {
	enc *sink.Encoder
	buf []byte
	sb  strings.Builder
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{enc: sink.NewEncoder()} }

func (r *Recorder) line(name string, b []byte) {
	r.sb.WriteString(name)
	r.sb.WriteByte(' ')
	r.sb.Write(b)
	if len(b) == 0 || b[len(b)-1] != '\n' {
		r.sb.WriteByte('\n')
	}
}

// Decision records d.
func (r *Recorder) Decision(d *windows.Decision) {
	r.buf = r.enc.AppendDecision(r.buf[:0], d)
	r.line("decision", r.buf)
}

// Heatmap records h.
func (r *Recorder) Heatmap(h *windows.HeatmapWindow) {
	r.buf = r.enc.AppendHeatmap(r.buf[:0], h)
	r.line("heatmap", r.buf)
}

// Late records a late event.
func (r *Recorder) Late(raw []byte, wm int64, p *event.Provenance) {
	r.line("late", sink.AppendLate(nil, raw, wm, p))
}

// DLQ records an invalid record.
func (r *Recorder) DLQ(raw []byte, reason string, p *event.Provenance) {
	r.line("dlq", sink.AppendDLQ(nil, raw, reason, p))
}

// Take returns what was recorded since the last Take.
func (r *Recorder) Take() string {
	s := r.sb.String()
	r.sb.Reset()
	return s
}

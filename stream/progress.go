package stream

import (
	"fmt"
	"io"
	"time"

	"github.com/riskstream/riskstream/engine"
)

// progress prints a one-line status at most twice a second, overwriting
// itself on a terminal.
type progress struct {
	w     io.Writer
	now   func() time.Time
	start time.Time
	last  time.Time
}

func newProgress(w io.Writer, now func() time.Time) *progress {
	t := now()
	return &progress{w: w, now: now, start: t, last: t}
}

func (p *progress) update(e statser) {
	if p.w == nil {
		return
	}
	if t := p.now(); t.Sub(p.last) >= 500*time.Millisecond {
		p.last = t
		p.print(e, t)
	}
}

func (p *progress) done(e statser) {
	if p.w == nil {
		return
	}
	p.print(e, p.now())
	fmt.Fprintln(p.w)
}

// statser is the engine as progress sees it.
type statser interface{ Stats() engine.Stats }

func (p *progress) print(e statser, t time.Time) {
	s := e.Stats()
	var decisions int64
	for _, n := range s.Decisions {
		decisions += n
	}
	rate := float64(s.Records) / max(t.Sub(p.start).Seconds(), 1e-9)
	fmt.Fprintf(p.w, "\r%12d records  %9.0f/s  decisions %d  late %d  invalid %d  \x1b[K",
		s.Records, rate, decisions, s.Late, s.Invalid)
}

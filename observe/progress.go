package observe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/riskstream/riskstream/engine"
)

// Progress prints a one-line status at most twice a second, overwriting
// itself on a terminal. Log records go through its logger, which clears the
// line first, so that a record never lands on it.
type Progress struct {
	w     io.Writer
	now   func() time.Time
	start time.Time
	last  time.Time
	// mu orders the line and the log records: records come from other
	// goroutines than the updates.
	mu sync.Mutex
	// shown is true while the line is on screen, not yet ended or cleared.
	shown bool
}

func NewProgress(w io.Writer, now func() time.Time) *Progress {
	t := now()
	return &Progress{w: w, now: now, start: t, last: t}
}

func (p *Progress) Update(e statser) {
	if p.w == nil {
		return
	}
	if t := p.now(); t.Sub(p.last) >= 500*time.Millisecond {
		p.last = t
		p.print(e, t)
	}
}

func (p *Progress) Done(e statser) {
	if p.w == nil {
		return
	}
	p.print(e, p.now())
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.w)
	p.shown = false
}

// statser is the engine as progress sees it.
type statser interface{ Stats() engine.Stats }

func (p *Progress) print(e statser, t time.Time) {
	s := e.Stats()
	var decisions int64
	for _, n := range s.Decisions {
		decisions += n
	}
	rate := float64(s.Records) / max(t.Sub(p.start).Seconds(), 1e-9)
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "\r%12d records  %9.0f/s  decisions %d  late %d  invalid %d  \x1b[K",
		s.Records, rate, decisions, s.Late, s.Invalid)
	p.shown = true
}

// Logger returns l writing through p: each record first clears the progress
// line, and the next update draws it again below the record. Without a
// progress line it returns l.
func (p *Progress) Logger(l *slog.Logger) *slog.Logger {
	if p.w == nil {
		return l
	}
	return slog.New(&clearingHandler{Handler: l.Handler(), p: p})
}

// clearingHandler clears the progress line before each record it passes on.
type clearingHandler struct {
	slog.Handler
	p *Progress
}

// Handle clears the progress line, then writes r.
func (h *clearingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	if h.p.shown {
		io.WriteString(h.p.w, "\r\x1b[K")
		h.p.shown = false
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the clearing for the derived handler.
func (h *clearingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &clearingHandler{Handler: h.Handler.WithAttrs(attrs), p: h.p}
}

// WithGroup keeps the clearing for the derived handler.
func (h *clearingHandler) WithGroup(name string) slog.Handler {
	return &clearingHandler{Handler: h.Handler.WithGroup(name), p: h.p}
}

package observe

import (
	"log/slog"

	"github.com/riskstream/riskstream/watermark"
)

// LogTransition writes one line per skew transition, with the source and
// the measured skew (docs/time.md "Clock skew").
func LogTransition(l *slog.Logger, tr watermark.Transition) {
	if tr.Degraded {
		l.Warn("source clock skewed: windowing its events by reference time",
			"source", tr.Source, "skew", tr.Skew, "at", tr.At)
		return
	}
	l.Info("source clock recovered: windowing its events by event time again",
		"source", tr.Source, "skew", tr.Skew, "at", tr.At)
}

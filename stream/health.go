package stream

import (
	"errors"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/corrupt"
	"github.com/riskstream/riskstream/state"
)

// healthz serves /healthz: 200 "ok" while health returns nil, else 503
// with what is wrong (a state write failing, a commit in flight too long,
// a slow disk, the state store's failure).
func healthz(health func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := health(); err != nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("unhealthy: " + err.Error() + "\n"))
			return
		}
		w.Write([]byte("ok\n"))
	}
}

// registerStateMetrics exports the state store's failed writes, read at
// each scrape, so that they show while the job's loop waits on the store.
func registerStateMetrics(reg prometheus.Registerer, db *state.DB) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "riskstream_state_write_errors_total",
		Help: "Writes of the state store that failed: flushes and compactions Pebble retried, commits."},
		func() float64 { return float64(db.WriteErrors()) }))
}

// stateFault is a failure of the state store, told as one message: the
// store's (which names the folder or file) and what to do. The errors
// that wrap it on its way up (a window state load, a restore) add nothing
// a user needs.
type stateFault struct {
	err    error
	advice string
}

func (e *stateFault) Error() string { return e.err.Error() + ": " + e.advice }
func (e *stateFault) Unwrap() error { return e.err }

// explainState returns err as a stateFault if it is a failure of the state
// store, or stored state that does not decode (corruption found above the
// store: a checkpoint, a slot), with what to do about it in the live job
// (live) or replay; other errors as they are.
func explainState(err error, live bool) error {
	var se *state.Error
	if errors.As(err, &se) {
		return &stateFault{err: se, advice: stateAdvice(se, live)}
	}
	if corrupt.Is(err) {
		return &stateFault{err: err, advice: stateAdvice(err, live)}
	}
	return err
}

// stateAdvice says what to do about a failed state store. Live, a
// checkpoint is one atomic batch and offsets are committed after it, so
// the job resumes from the last one; without its state it reads the input
// topic from the earliest offsets.
func stateAdvice(err error, live bool) string {
	const stopped = "the job stopped at its last checkpoint, nothing is lost"
	switch {
	case corrupt.Is(err) && live:
		advice := "restore the state dir from a backup (nothing is lost); or move the state dir aside and start on an empty one: " +
			"the job reads the input topic again from its earliest offsets and writes those records' outputs again, " +
			"so the output topics hold them twice, and its windows lack the events the topic no longer holds"
		var se *state.Error
		if errors.As(err, &se) && strings.HasSuffix(se.Path, ".log") && !se.Missing {
			advice += "; or move the WAL " + filepath.Base(se.Path) + " aside: the job resumes from the last checkpoint " +
				"written to the tables before it (from the earliest offsets if none was), and outputs it finds already written are not written again"
		}
		return advice
	case corrupt.Is(err):
		return "delete the --state-dir folder and run the replay again"
	case errors.Is(err, state.ErrDiskFull) && live:
		return "free space or move --state-dir; " + stopped
	case errors.Is(err, state.ErrDiskFull):
		return "free space, or point --state-dir (by default a temporary folder) at a disk with room, and run the replay again"
	case live:
		return "check the disk; " + stopped
	}
	return "check the disk and run the replay again"
}

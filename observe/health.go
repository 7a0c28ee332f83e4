package observe

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/state"
)

// Healthz serves /healthz: 200 "ok" while health returns nil, else 503
// with what is wrong (a state write failing, a commit in flight too long,
// a slow disk, the state store's failure).
func Healthz(health func() error) http.HandlerFunc {
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

// RegisterStateMetrics exports the state store's failed writes, read at
// each scrape, so that they show while the job's loop waits on the store.
func RegisterStateMetrics(reg prometheus.Registerer, db *state.DB) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "riskstream_state_write_errors_total",
		Help: "Writes of the state store that failed: flushes and compactions Pebble retried, commits."},
		func() float64 { return float64(db.WriteErrors()) }))
}

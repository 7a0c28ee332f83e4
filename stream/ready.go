package stream

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// readiness answers /readyz: 503 until the job has restored its checkpoint,
// verified the checksums of its state's tables and had a fetch answered by
// the leader of every input partition it started with, then 200 until the
// job stops. Once ready it stays so through
// broker outages (the job retries them; /metrics tells them apart) and
// partitions added later: a readiness probe gates a rollout, and a job that
// ran is past what it checks. The zero value is not ready.
type readiness struct {
	mu       sync.Mutex
	fetchers []*fetcher
	started  bool // consuming was called
	ready    bool
	stopping bool
	// verify says that the state's checksums are being verified, checked
	// and tables how far (0, 0 once done).
	verify          bool
	checked, tables int
	// all are the fetchers of every input partition, for stalled.
	all []*fetcher
	// writing is when the output write in flight started, in Unix
	// nanoseconds; 0 when none is.
	writing atomic.Int64
}

// track adds fetchers to those stalled looks at.
func (r *readiness) track(fetchers ...*fetcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, fetchers...)
}

// stalled returns, at now, why the brokers look stalled, for /healthz: an
// input partition whose leader has answered no fetch, or an output write
// unacknowledged, for stallAfter (fetches are answered within
// fetchMaxWait even when nothing arrives); nil when neither.
func (r *readiness) stalled(now time.Time) error {
	if since := r.writing.Load(); since != 0 && now.Sub(time.Unix(0, since)) > stallAfter {
		return fmt.Errorf("brokers: outputs unacknowledged for %s", now.Sub(time.Unix(0, since)).Round(time.Second))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.all {
		if quiet := now.Sub(time.Unix(0, f.lastAnswer.Load())); quiet > stallAfter {
			return fmt.Errorf("brokers: no fetch of %s partition %d answered for %s", f.topic, f.partition, quiet.Round(time.Second))
		}
	}
	return nil
}

// verifying makes the job not ready until verified says the state's
// checksums are verified.
func (r *readiness) verifying() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verify, r.tables = true, -1
}

// verified tells the readiness that checked of the state's tables have
// had their checksums verified; 0 of 0 when all have.
func (r *readiness) verified(checked, tables int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked, r.tables = checked, tables
}

// consuming tells the readiness the fetchers the job started with, once
// it restored its checkpoint.
func (r *readiness) consuming(fetchers []*fetcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetchers, r.started = append([]*fetcher(nil), fetchers...), true
}

// stop makes the job not ready again, for good.
func (r *readiness) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
}

// check reports whether the job is ready, else why not.
func (r *readiness) check() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stopping:
		return false, "stopping"
	case r.ready:
		return true, ""
	case !r.started:
		return false, "starting: restoring state and joining the group"
	case r.verify && r.tables < 0:
		return false, "verifying the checksums of the state's tables"
	case r.verify && r.tables > 0:
		return false, fmt.Sprintf("verifying the checksums of the state's tables: %d of %d", r.checked, r.tables)
	}
	for _, f := range r.fetchers {
		if !f.answered.Load() {
			return false, fmt.Sprintf("waiting for the first fetch of %s partition %d", f.topic, f.partition)
		}
	}
	r.ready = true
	return true, ""
}

// ServeHTTP answers /readyz.
func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if ok, why := r.check(); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", why)
		return
	}
	w.Write([]byte("ok\n"))
}

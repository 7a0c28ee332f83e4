package observe

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riskstream/riskstream/kafkaio"
)

// StallAfter is how long the brokers may leave every fetch of the input,
// or a write of the outputs, unanswered before /healthz says so.
const StallAfter = 15 * time.Second

// Readiness answers /readyz: 503 until the job has restored its checkpoint,
// verified the checksums of its state's tables and had a fetch answered by
// the leader of every input partition it started with, then 200 until the
// job stops. Once ready it stays so through
// broker outages (the job retries them; /metrics tells them apart) and
// partitions added later: a readiness probe gates a rollout, and a job that
// ran is past what it checks. The zero value is not ready.
type Readiness struct {
	mu       sync.Mutex
	fetchers []FetchSource
	started  bool // consuming was called
	ready    bool
	stopping bool
	// verify says that the state's checksums are being verified, checked
	// and tables how far (0, 0 once done).
	verify          bool
	checked, tables int
	// all are the fetchers of every input partition, for stalled.
	all []FetchSource
	// Writing is when the output write in flight started, in Unix
	// nanoseconds; 0 when none is.
	Writing atomic.Int64
}

// FetchSource is an input partition's fetch as readiness sees it
// (Fetcher).
type FetchSource interface {
	Topic() string
	Partition() int
	Answered() bool
	LastAnswer() time.Time
}

// FetchSources returns fs as the readiness sees them.
func FetchSources(fs []*kafkaio.Fetcher) []FetchSource {
	srcs := make([]FetchSource, len(fs))
	for i, f := range fs {
		srcs[i] = f
	}
	return srcs
}

// Track adds fetchers to those stalled looks at.
func (r *Readiness) Track(fetchers ...FetchSource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, fetchers...)
}

// TrackOnly makes fetchers the only ones Stalled looks at: a distributed
// instance's, which are made again with each generation of its group.
func (r *Readiness) TrackOnly(fetchers ...FetchSource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all[:0:0], fetchers...)
}

// Stalled returns, at now, why the brokers look stalled, for /healthz: an
// input partition whose leader has answered no fetch, or an output write
// unacknowledged, for stallAfter (fetches are answered within
// fetchMaxWait even when nothing arrives); nil when neither.
func (r *Readiness) Stalled(now time.Time) error {
	if since := r.Writing.Load(); since != 0 && now.Sub(time.Unix(0, since)) > StallAfter {
		return fmt.Errorf("brokers: outputs unacknowledged for %s", now.Sub(time.Unix(0, since)).Round(time.Second))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.all {
		if quiet := now.Sub(f.LastAnswer()); quiet > StallAfter {
			return fmt.Errorf("brokers: no fetch of %s partition %d answered for %s", f.Topic(), f.Partition(), quiet.Round(time.Second))
		}
	}
	return nil
}

// Verifying makes the job not ready until verified says the state's
// checksums are verified.
func (r *Readiness) Verifying() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verify, r.tables = true, -1
}

// Verified tells the readiness that checked of the state's tables have
// had their checksums verified; 0 of 0 when all have.
func (r *Readiness) Verified(checked, tables int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked, r.tables = checked, tables
}

// Consuming tells the readiness the fetchers the job started with, once
// it restored its checkpoint.
func (r *Readiness) Consuming(fetchers ...FetchSource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetchers, r.started = append([]FetchSource(nil), fetchers...), true
}

// Stop makes the job not ready again, for good.
func (r *Readiness) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopping = true
}

// check reports whether the job is ready, else why not.
func (r *Readiness) check() (bool, string) {
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
		if !f.Answered() {
			return false, fmt.Sprintf("waiting for the first fetch of %s partition %d", f.Topic(), f.Partition())
		}
	}
	r.ready = true
	return true, ""
}

// ServeHTTP answers /readyz.
func (r *Readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if ok, why := r.check(); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", why)
		return
	}
	w.Write([]byte("ok\n"))
}

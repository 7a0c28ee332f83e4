package observe

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestReadiness: /readyz is 503 while the job starts, until the state's
// tables are verified and until every partition it started with had a
// fetch answered, then 200 (partitions
// added later do not take it back), and 503 for good once it stops.
func TestReadiness(t *testing.T) {
	var r Readiness
	expect := func(code int, body string) {
		t.Helper()
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code != code || !strings.Contains(rec.Body.String(), body) {
			t.Fatalf("/readyz: %d %q, want %d %q", rec.Code, rec.Body, code, body)
		}
	}
	expect(503, "not ready: starting")
	r.Verifying()
	a, b := &fakeFetch{partition: 0}, &fakeFetch{partition: 1}
	r.Consuming(a, b)
	expect(503, "verifying the checksums of the state's tables\n")
	r.Verified(2, 5)
	expect(503, "verifying the checksums of the state's tables: 2 of 5")
	r.Verified(0, 0)
	expect(503, "partition 0")
	a.answered = true
	expect(503, "partition 1")
	b.answered = true
	expect(200, "ok")
	r.Consuming(a, b, &fakeFetch{partition: 2})
	expect(200, "ok")
	r.Stop()
	expect(503, "not ready: stopping")
}

// fakeFetch is a partition of topic requests whose fetches answer when
// answered says.
type fakeFetch struct {
	partition int
	answered  bool
	// last is when its leader last answered; the zero time is now.
	last time.Time
}

func (f *fakeFetch) Topic() string { return "requests" }

func (f *fakeFetch) Partition() int { return f.partition }

func (f *fakeFetch) Answered() bool { return f.answered }

func (f *fakeFetch) LastAnswer() time.Time {
	if f.last.IsZero() {
		return time.Now()
	}
	return f.last
}

// TestStalled: a partition whose leader answered no fetch for StallAfter
// makes the brokers stalled, until it is no longer tracked (TrackOnly, a
// distributed instance's new generation); an output write in flight as
// long does too.
func TestStalled(t *testing.T) {
	var r Readiness
	now := time.Now()
	quiet := &fakeFetch{partition: 1, last: now.Add(-StallAfter - time.Second)}
	r.Track(&fakeFetch{partition: 0}, quiet)
	if err := r.Stalled(now); err == nil || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("a quiet partition: %v", err)
	}
	r.TrackOnly(&fakeFetch{partition: 2})
	if err := r.Stalled(now); err != nil {
		t.Fatalf("the quiet partition no longer tracked: %v", err)
	}
	r.TrackOnly()
	r.Writing.Store(now.Add(-StallAfter - time.Second).UnixNano())
	if err := r.Stalled(now); err == nil || !strings.Contains(err.Error(), "outputs unacknowledged") {
		t.Fatalf("a write in flight too long: %v", err)
	}
}

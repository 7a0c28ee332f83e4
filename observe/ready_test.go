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
}

func (f *fakeFetch) Topic() string { return "requests" }

func (f *fakeFetch) Partition() int { return f.partition }

func (f *fakeFetch) Answered() bool { return f.answered }

func (f *fakeFetch) LastAnswer() time.Time { return time.Now() }

package observe

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riskstream/riskstream/internal/kafkatest"
	"github.com/riskstream/riskstream/rules"
)

// TestHealthz: 200 "ok" while healthy, 503 with the reason otherwise.
func TestHealthz(t *testing.T) {
	var health error
	h := Healthz(func() error { return health })
	for _, c := range []struct {
		health error
		code   int
		body   string
	}{
		{nil, 200, "ok\n"},
		{errors.New("state: the disk holding /s is full (no space left on device)"), 503,
			"unhealthy: state: the disk holding /s is full (no space left on device)\n"},
	} {
		health = c.health
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Code != c.code || rec.Body.String() != c.body {
			t.Errorf("health %v: %d %q, want %d %q", c.health, rec.Code, rec.Body.String(), c.code, c.body)
		}
	}
}

// TestEndpointsReadOnly: every endpoint answers 405 to methods other than
// GET and HEAD, and the console answers 403 to a client not on loopback
// unless it is public, as it shows keys; /metrics and the probes answer
// anyone.
func TestEndpointsReadOnly(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry(), &rules.Config{}, 10)
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console") })
	for _, public := range []bool{false, true} {
		addr := kafkatest.FreeAddr(t)
		srv, err := m.Serve(addr, func() error { return nil }, console, public)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		for _, c := range []struct {
			method, path, remote string
			want                 int
		}{
			{"GET", "/", "127.0.0.1:5000", http.StatusOK},
			{"HEAD", "/", "[::1]:5000", http.StatusOK},
			{"GET", "/", "10.1.2.3:5000", map[bool]int{false: http.StatusForbidden, true: http.StatusOK}[public]},
			{"GET", "/metrics", "10.1.2.3:5000", http.StatusOK},
			{"GET", "/healthz", "10.1.2.3:5000", http.StatusOK},
			{"DELETE", "/metrics", "127.0.0.1:5000", http.StatusMethodNotAllowed},
			{"POST", "/healthz", "127.0.0.1:5000", http.StatusMethodNotAllowed},
			{"PUT", "/", "127.0.0.1:5000", http.StatusMethodNotAllowed},
		} {
			req := httptest.NewRequest(c.method, c.path, nil)
			req.RemoteAddr = c.remote
			rec := httptest.NewRecorder()
			srv.Handler.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Errorf("public %v: %s %s from %s: %d, want %d", public, c.method, c.path, c.remote, rec.Code, c.want)
			}
			if c.want == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", c.method, c.path, rec.Header().Get("Allow"))
			}
		}
		// Over TCP from this machine, as a browser on it.
		resp, err := http.Post("http://"+addr+"/", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST / over TCP: %s", resp.Status)
		}
	}
}

// TestBaseURL: the start's log names where to look with an address a
// browser can open, localhost for an unspecified one.
func TestBaseURL(t *testing.T) {
	for addr, want := range map[string]string{"127.0.0.1:9464": "http://127.0.0.1:9464", "[::]:9464": "http://localhost:9464",
		"0.0.0.0:80": "http://localhost:80", "[::1]:9464": "http://[::1]:9464"} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := baseURL(tcp); got != want {
			t.Errorf("baseURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

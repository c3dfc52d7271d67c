package httpserver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	leading := false
	s := New(Options{Gatherer: reg})
	s.AddLivez("ping", func() error { return nil })
	s.AddReadyz("leader", func() error {
		if !leading {
			return errors.New("not the leader")
		}
		return nil
	})
	h := s.Handler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	tests := []struct {
		name     string
		path     string
		leading  bool
		wantCode int
		wantBody string
	}{
		{name: "metrics", path: "/metrics", wantCode: 200, wantBody: "kshard_test_total 1"},
		{name: "livez", path: "/livez", wantCode: 200, wantBody: "ok"},
		{name: "readyz failing names the check", path: "/readyz", wantCode: 503, wantBody: "[-]leader failed: not the leader"},
		{name: "readyz passing", path: "/readyz?verbose", leading: true, wantCode: 200, wantBody: "[+]leader ok"},
		{name: "pprof off by default", path: "/debug/pprof/", wantCode: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			leading = tc.leading
			code, body := get(tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

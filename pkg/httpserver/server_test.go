package httpserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	s.AddReadyz("lease", func() error { return nil })
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
		{name: "readyz excluding the failing check", path: "/readyz?exclude=leader&verbose", wantCode: 200, wantBody: "[+]lease ok"},
		{name: "readyz excluding another check still fails", path: "/readyz?exclude=lease", wantCode: 503, wantBody: "[-]leader failed"},
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

// TestTimeouts: a client that sends its headers too slowly is disconnected, and one that
// never reads its response does not keep the handler writing past WriteTimeout. Short
// timeouts stand in for the defaults; without timeouts both waits below run out.
func TestTimeouts(t *testing.T) {
	const short = 200 * time.Millisecond
	tests := []struct {
		name string
		// request is sent and never followed by reading until the check.
		request string
		// wantHandlerErr: the /big handler's write must fail (WriteTimeout); otherwise the
		// server must close the connection (ReadHeaderTimeout).
		wantHandlerErr bool
	}{
		{name: "headers never finished", request: "GET /livez HTTP/1.1\r\nHost: x\r\n"},
		{name: "response never read", request: "GET /big HTTP/1.1\r\nHost: x\r\n\r\n", wantHandlerErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Options{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(),
				ReadHeaderTimeout: short, ReadTimeout: short, WriteTimeout: short, IdleTimeout: short})
			handlerErr := make(chan error, 1)
			s.Handle("/big", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				// Far more than socket buffers hold, so writing blocks on a client that
				// does not read.
				chunk := make([]byte, 1<<20)
				for range 1 << 10 {
					if _, err := w.Write(chunk); err != nil {
						handlerErr <- err
						return
					}
				}
				handlerErr <- nil
			}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tt.request); err != nil {
				t.Fatal(err)
			}
			if tt.wantHandlerErr {
				select {
				case err := <-handlerErr:
					if err == nil {
						t.Fatal("the handler wrote 1 GiB to a client that reads nothing")
					}
				case <-time.After(5 * time.Second):
					t.Fatal("the handler is still writing to a client that does not read")
				}
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(io.Discard, conn) // returns once the server closes the connection
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept a connection whose headers never ended")
			}
		})
	}
}

// TestDefaultTimeouts: every timeout is set when the options leave them zero.
func TestDefaultTimeouts(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want [4]time.Duration // read header, read, write, idle
	}{
		{name: "defaults", want: [4]time.Duration{DefaultReadHeaderTimeout, DefaultReadTimeout, DefaultWriteTimeout, DefaultIdleTimeout}},
		{name: "overrides", opts: Options{ReadHeaderTimeout: 1, ReadTimeout: 2, WriteTimeout: 3, IdleTimeout: 4}, want: [4]time.Duration{1, 2, 3, 4}},
		{name: "negative means default", opts: Options{WriteTimeout: -1}, want: [4]time.Duration{DefaultReadHeaderTimeout, DefaultReadTimeout, DefaultWriteTimeout, DefaultIdleTimeout}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Addr, tt.opts.Gatherer = "127.0.0.1:0", prometheus.NewRegistry()
			s := New(tt.opts)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := s.Start(ctx); err != nil {
				t.Fatal(err)
			}
			got := [4]time.Duration{s.srv.ReadHeaderTimeout, s.srv.ReadTimeout, s.srv.WriteTimeout, s.srv.IdleTimeout}
			if got != tt.want {
				t.Fatalf("timeouts %v, want %v", got, tt.want)
			}
			if s.srv.MaxHeaderBytes != DefaultMaxHeaderBytes {
				t.Fatalf("MaxHeaderBytes %d", s.srv.MaxHeaderBytes)
			}
		})
	}
}

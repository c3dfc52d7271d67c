package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports nil when healthy and an error that explains why not.
type Check func() error

// Timeouts of the HTTP server. Without them one client that connects and sends nothing,
// or requests and never reads, holds a goroutine and a connection forever; behind a
// handler that takes a lock it would hold the lock too. Every route here answers a GET
// without a body in milliseconds, except a CPU profile or trace, which runs for its
// ?seconds (pprof's default 30) before it writes.
const (
	// DefaultReadHeaderTimeout bounds the wait for a request's headers (slowloris).
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading the whole request; no route takes a body.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds the time from the end of the request headers to the end
	// of the response. It is the longest a client that does not read can keep a handler
	// writing. 60s leaves room for pprof's default 30s profile (pprof refuses a duration
	// that is not below the WriteTimeout) and is far beyond any scrape or /assignments.
	DefaultWriteTimeout = 60 * time.Second
	// DefaultIdleTimeout bounds an idle keep-alive connection: longer than Prometheus'
	// default 1m scrape interval, so a scraper keeps reusing its connection.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxHeaderBytes bounds request headers; probes and scrapers send a few hundred
	// bytes (net/http's default is 1 MiB).
	DefaultMaxHeaderBytes = 64 << 10
)

// Options configure the server.
type Options struct {
	// Addr is the listen address, e.g. ":8080" or "127.0.0.1:0".
	Addr string
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// EnablePprof mounts /debug/pprof.
	EnablePprof bool

	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are net/http's; zero
	// takes the Default above (a timeout cannot be turned off).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

// withDefaults returns o with zero timeouts set to their defaults.
func (o Options) withDefaults() Options {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	return o
}

// Server serves metrics and health. Checks can be added until Start.
type Server struct {
	opts     Options
	mu       sync.RWMutex
	live     map[string]Check
	ready    map[string]Check
	extra    map[string]http.Handler
	listener net.Listener
	srv      *http.Server
}

// New returns a server; add checks, then Start it.
func New(opts Options) *Server {
	return &Server{opts: opts.withDefaults(), live: map[string]Check{}, ready: map[string]Check{}}
}

// Handle mounts another route (such as the coordinator's /assignments); call before Start.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extra == nil {
		s.extra = map[string]http.Handler{}
	}
	s.extra[pattern] = h
}

// AddLivez adds a liveness check: failing it makes the kubelet restart the process, so
// use it only for states that a restart fixes.
func (s *Server) AddLivez(name string, c Check) { s.mu.Lock(); s.live[name] = c; s.mu.Unlock() }

// AddReadyz adds a readiness check.
func (s *Server) AddReadyz(name string, c Check) { s.mu.Lock(); s.ready[name] = c; s.mu.Unlock() }

// Handler returns the server's routes, for tests and embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", s.checks(func() map[string]Check { return s.live }))
	mux.HandleFunc("/readyz", s.checks(func() map[string]Check { return s.ready }))
	s.mu.RLock()
	for p, h := range s.extra {
		mux.Handle(p, h)
	}
	s.mu.RUnlock()
	if s.opts.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// checks answers 200 "ok" when every check passes, else 503 with one line per check;
// ?verbose lists passing checks too, and ?exclude=NAME (repeatable) leaves a check out,
// as kube-apiserver's /readyz does (the chart's coordinator probe excludes "leader", so
// that a follower counts as Ready for rollouts and disruption budgets).
func (s *Server) checks(get func() map[string]Check) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		excluded := r.URL.Query()["exclude"]
		s.mu.RLock()
		checks := get()
		names := make([]string, 0, len(checks))
		for n := range checks {
			if !slices.Contains(excluded, n) {
				names = append(names, n)
			}
		}
		s.mu.RUnlock()
		sort.Strings(names)
		var b strings.Builder
		failed := false
		for _, n := range names {
			s.mu.RLock()
			c := checks[n]
			s.mu.RUnlock()
			if err := c(); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", n, err)
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", n)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, b.String())
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprint(w, b.String())
		}
		fmt.Fprint(w, "ok\n")
	}
}

// Start listens and serves in the background until ctx ends or Shutdown is called.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Gatherer == nil {
		return errors.New("httpserver: Options.Gatherer is required")
	}
	l, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s for metrics and health: %w", s.opts.Addr, err)
	}
	s.listener = l
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
	}
	log := logr.FromContextOrDiscard(ctx)
	go func() {
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "HTTP server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		_ = s.Shutdown(context.Background())
	}()
	log.Info("serving metrics and health", "addr", l.Addr().String())
	return nil
}

// Addr is the address actually listened on (useful with port 0).
func (s *Server) Addr() string {
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Shutdown stops the server, letting in-flight requests finish for up to 5 seconds.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

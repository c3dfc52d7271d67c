package edgetest_test

// Test harness of the session and server tests: a real coordinator (coordinatorrpc.Server behind
// a gRPC server on 127.0.0.1:0), real shardrpc.Clients, and fake in-memory Handlers that
// record every action in one "world", so the tests can check at any instant that no
// partition is worked by two shards. It serves both server_test.go (the coordinator edge,
// pkg/sharding/coordinatorrpc) and client_test.go (the shard edge, pkg/sharding/shardrpc).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/transport"
)

const partitions = 64

// testConfig is a small and fast handoff configuration: a new leader grants nothing for
// TTL+Margin = 1.2s, a dead shard's partitions are free 1.2s after its last heartbeat.
func testConfig() handoff.Config {
	return handoff.Config{
		PartitionCount:    partitions,
		SessionTTL:        time.Second,
		HeartbeatInterval: 200 * time.Millisecond,
		Margin:            200 * time.Millisecond,
		Debounce:          100 * time.Millisecond,
		MaxDebounce:       500 * time.Millisecond,
		// Generous: a move must wait for the destination's warm caches, never time out.
		PrepareTimeout: 10 * time.Second,
		ReleaseTimeout: 10 * time.Second,
		RetryInterval:  200 * time.Millisecond,
	}
}

// settleTimeout bounds every wait for convergence; generous because the machine may be
// busy with other work.
const settleTimeout = 30 * time.Second

func insecureServer(t testing.TB) credentials.TransportCredentials {
	t.Helper()
	c, err := transport.ServerCredentials(transport.TLSOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func insecureClient(t testing.TB) credentials.TransportCredentials {
	t.Helper()
	c, err := transport.ClientCredentials(transport.TLSOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testLogger logs through t.Log while the test runs and drops lines afterwards (gRPC and
// client goroutines may still log while they wind down).
func testLogger(t testing.TB) logr.Logger {
	var mu sync.Mutex
	closed := false
	t.Cleanup(func() {
		mu.Lock()
		closed = true
		mu.Unlock()
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !closed {
			t.Log(prefix, args)
		}
	}, funcr.Options{})
}

// waitFor polls cond until it holds or timeout passes; why describes the last failure.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// The world of fake handlers.

// event is one handler call (or the completion of an asynchronous one).
type event struct {
	seq   int
	at    time.Time
	shard string
	kind  string // warm, synced, work, drain, drained, stop, drop
	p     partition.ID
}

// world records what every fake handler does under one lock, so the double-work check
// sees one consistent instant across all shards.
type world struct {
	t   testing.TB
	log logr.Logger

	mu         sync.Mutex
	handlers   []*fakeHandler
	events     []event
	violations []string
	samples    int

	stop        chan struct{}
	samplerDone chan struct{}
}

func newWorld(t testing.TB) *world {
	w := &world{t: t, log: testLogger(t), stop: make(chan struct{}), samplerDone: make(chan struct{})}
	go w.sample()
	t.Cleanup(func() {
		close(w.stop)
		<-w.samplerDone
		w.assertNoDoubleWork(t)
	})
	return w
}

// sample checks the invariant continuously, which also covers leases running out between
// handler calls.
func (w *world) sample() {
	defer close(w.samplerDone)
	tick := time.NewTicker(3 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
			w.mu.Lock()
			w.checkLocked(time.Now(), "sample")
			w.samples++
			w.mu.Unlock()
		}
	}
}

// checkLocked records a violation if any partition is worked by two handlers at now. A
// handler works p while Work was called and neither Stop, Drop nor a finished Drain
// followed, and its lease deadline has not passed.
func (w *world) checkLocked(now time.Time, where string) {
	owner := map[partition.ID]string{}
	for _, h := range w.handlers {
		if !now.Before(h.deadline) {
			continue
		}
		for p := range h.working {
			if o, dup := owner[p]; dup {
				if len(w.violations) < 20 {
					w.violations = append(w.violations, fmt.Sprintf("%s at %s: partition %d worked by %s and %s",
						where, now.Format("15:04:05.000000"), p, o, h.id))
				}
				continue
			}
			owner[p] = h.id
		}
	}
}

func (w *world) violationf(format string, args ...any) {
	if len(w.violations) < 20 {
		w.violations = append(w.violations, fmt.Sprintf(format, args...))
	}
}

func (w *world) assertNoDoubleWork(t testing.TB) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		t.Errorf("safety violated (%d samples taken):\n%s", w.samples, strings.Join(w.violations, "\n"))
	}
}

func (w *world) recordLocked(h *fakeHandler, kind string, p partition.ID) {
	w.events = append(w.events, event{seq: len(w.events), at: time.Now(), shard: h.id, kind: kind, p: p})
	h.counts[kind]++
}

// eventsSince returns the events with seq ≥ from.
func (w *world) eventsSince(from int) []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events[min(from, len(w.events)):])
}

// mark returns the sequence number of the next event.
func (w *world) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events)
}

// workers returns, per partition, the handlers working it now.
func (w *world) workers() map[partition.ID][]*fakeHandler {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	out := map[partition.ID][]*fakeHandler{}
	for _, h := range w.handlers {
		if !now.Before(h.deadline) {
			continue
		}
		for p := range h.working {
			out[p] = append(out[p], h)
		}
	}
	return out
}

// owners returns the single worker of every partition, which must be the handler of one
// of live (not an earlier process of the same shard ID), or why that is not the case.
func (w *world) owners(live ...*shard) (map[partition.ID]string, string) {
	allowed := map[*fakeHandler]bool{}
	for _, s := range live {
		allowed[s.h] = true
	}
	ws := w.workers()
	out := map[partition.ID]string{}
	var problems []string
	for p := range partition.ID(partitions) {
		switch hs := ws[p]; {
		case len(hs) == 0:
			problems = append(problems, fmt.Sprintf("p%d unworked", p))
		case len(hs) > 1:
			problems = append(problems, fmt.Sprintf("p%d worked by %d handlers", p, len(hs)))
		case !allowed[hs[0]]:
			problems = append(problems, fmt.Sprintf("p%d worked by %s, not a live shard process", p, hs[0].id))
		default:
			out[p] = hs[0].id
		}
	}
	if len(problems) > 0 {
		if len(problems) > 8 {
			problems = append(problems[:8], fmt.Sprintf("... %d more", len(problems)-8))
		}
		return nil, strings.Join(problems, "; ")
	}
	return out, ""
}

// fakeHandler is a shardrpc.Handler whose caches sync and drains finish after a small
// random delay. Everything is guarded by world.mu.
type fakeHandler struct {
	w          *world
	id         string
	working    map[partition.ID]bool
	gen        map[partition.ID]int // bumped by Work and Drain: a drain ends only the work it drained
	deadline   time.Time
	counts     map[string]int
	statsDelay time.Duration // Stats takes this long (a busy runtime walking its caches)
}

func (w *world) newHandler(id string) *fakeHandler {
	h := &fakeHandler{w: w, id: id, working: map[partition.ID]bool{}, gen: map[partition.ID]int{}, counts: map[string]int{}}
	w.mu.Lock()
	w.handlers = append(w.handlers, h)
	w.mu.Unlock()
	return h
}

func randomDelay() { time.Sleep(time.Duration(rand.Int64N(int64(15 * time.Millisecond)))) }

func (h *fakeHandler) Warm(p partition.ID, done func()) {
	h.w.mu.Lock()
	h.w.recordLocked(h, "warm", p)
	h.w.mu.Unlock()
	go func() {
		randomDelay()
		h.w.mu.Lock()
		h.w.recordLocked(h, "synced", p)
		h.w.mu.Unlock()
		done()
	}()
}

func (h *fakeHandler) Work(p partition.ID, _ bool) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.gen[p]++
	h.working[p] = true
	h.w.recordLocked(h, "work", p)
	h.w.checkLocked(time.Now(), h.id+" work")
}

func (h *fakeHandler) Drain(p partition.ID, done func()) {
	h.w.mu.Lock()
	h.gen[p]++
	g := h.gen[p]
	h.w.recordLocked(h, "drain", p)
	h.w.mu.Unlock()
	go func() {
		randomDelay()
		h.w.mu.Lock()
		if h.gen[p] == g {
			delete(h.working, p) // in-flight work finished
		}
		h.w.recordLocked(h, "drained", p)
		h.w.mu.Unlock()
		done() // like the real runtime: done is called for every drain
	}()
}

func (h *fakeHandler) Stop(p partition.ID) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	delete(h.working, p)
	h.w.recordLocked(h, "stop", p)
}

func (h *fakeHandler) Drop(p partition.ID) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.working[p] && time.Now().Before(h.deadline) {
		h.w.violationf("%s: Drop(p%d) while it is still worked", h.id, p)
	}
	delete(h.working, p)
	h.w.recordLocked(h, "drop", p)
}

func (h *fakeHandler) SetDeadline(t time.Time) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.deadline = t
	h.w.checkLocked(time.Now(), h.id+" deadline")
}

func (h *fakeHandler) Stats() protocol.Stats {
	h.w.mu.Lock()
	st := protocol.Stats{AcquiredPartitions: uint32(len(h.working)), Namespaces: uint64(len(h.working))}
	delay := h.statsDelay
	h.w.mu.Unlock()
	time.Sleep(delay)
	return st
}

func (h *fakeHandler) count(kind string) int {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.counts[kind]
}

// workingSet returns the partitions the handler works now, sorted.
func (h *fakeHandler) workingSet() []partition.ID {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if !time.Now().Before(h.deadline) {
		return nil
	}
	out := make([]partition.ID, 0, len(h.working))
	for p := range h.working {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (h *fakeHandler) getDeadline() time.Time {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.deadline
}

func (h *fakeHandler) countsCopy() map[string]int {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.counts {
		out[k] = v
	}
	return out
}

// ---------------------------------------------------------------------------------------
// Coordinator replicas.

type coordinator struct {
	name      string
	srv       *coordinatorrpc.Server
	reg       *prometheus.Registry
	metrics   *coordinatorrpc.Metrics
	addr      string
	stepDowns chan string

	cancel   context.CancelFunc
	leadDone chan error
	tenure   tenure
}

// tenure plays leader.Tenure: valid unless the test says the Lease lapsed.
type tenure struct{ lapsed atomic.Bool }

func (t *tenure) Valid() bool { return !t.lapsed.Load() }

func startCoordinator(t testing.TB, w *world, name string, creds credentials.TransportCredentials, mutate func(*coordinatorrpc.Options)) *coordinator {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics, err := coordinatorrpc.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := &coordinator{name: name, reg: reg, metrics: metrics, stepDowns: make(chan string, 4)}
	opts := coordinatorrpc.Options{
		Config:       testConfig(),
		Metrics:      c.metrics,
		TickInterval: 20 * time.Millisecond,
		HelloTimeout: 10 * time.Second,
		StepDown: func(reason string) {
			select {
			case c.stepDowns <- reason:
			default:
			}
		},
	}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := coordinatorrpc.New(opts, w.log.WithName(name))
	if err != nil {
		t.Fatal(err)
	}
	c.srv = srv
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = lis.Addr().String()
	g := grpc.NewServer(append(transport.ServerOptions(), grpc.Creds(creds))...)
	srv.Register(g)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = g.Serve(lis)
	}()
	t.Cleanup(func() {
		c.stopLeading(t)
		g.Stop()
		<-served
	})
	return c
}

// lead starts serving sessions with the given term and waits until it does.
func (c *coordinator) lead(t testing.TB, term uint32) {
	t.Helper()
	if c.cancel != nil {
		t.Fatalf("%s is already leading", c.name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.srv.Lead(ctx, term, &c.tenure) }()
	c.cancel, c.leadDone = cancel, done
	waitFor(t, 10*time.Second, c.name+" leading", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Lead(%d) returned at once: %v", term, err)
		default:
		}
		return c.srv.Leading(), "not leading yet"
	})
}

// stopLeading ends the leadership and waits for Lead to return.
func (c *coordinator) stopLeading(t testing.TB) {
	t.Helper()
	if c.cancel == nil {
		return
	}
	c.cancel()
	select {
	case err := <-c.leadDone:
		if err != nil {
			t.Errorf("%s: Lead returned %v", c.name, err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s: Lead did not return after its context ended", c.name)
	}
	c.cancel = nil
}

// metricSum adds up every series of the named metric (a counter or gauge vector).
func (c *coordinator) metricSum(t testing.TB, name string) float64 {
	t.Helper()
	mfs, err := c.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// get answers GET /assignments<query> through the handler.
func (c *coordinator) get(query string) (int, []byte) {
	rec := httptest.NewRecorder()
	c.srv.AssignmentsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/assignments"+query, nil))
	return rec.Code, rec.Body.Bytes()
}

func (c *coordinator) assignments(t testing.TB) (coordinatorrpc.Assignments, bool) {
	t.Helper()
	code, body := c.get("?partitions=true")
	if code != http.StatusOK {
		return coordinatorrpc.Assignments{}, false
	}
	var a coordinatorrpc.Assignments
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return a, true
}

// settled reports whether the coordinator converged, every partition is worked by exactly
// one of live, and the coordinator's owners are exactly those workers.
func (c *coordinator) settled(t testing.TB, w *world, live ...*shard) (map[partition.ID]string, bool, string) {
	t.Helper()
	owners, why := w.owners(live...)
	if owners == nil {
		return nil, false, "handlers: " + why
	}
	a, ok := c.assignments(t)
	if !ok {
		return nil, false, c.name + " is not leading"
	}
	if !a.Converged {
		return nil, false, fmt.Sprintf("%s not converged: %v", c.name, a.ByState)
	}
	var members []string
	for _, s := range a.Shards {
		members = append(members, s.Shard)
	}
	if want := shardIDs(live); !slices.Equal(members, want) {
		return nil, false, fmt.Sprintf("%s has members %v, want %v", c.name, members, want)
	}
	seen := 0
	for _, s := range a.Shards {
		for _, p := range s.PartitionIDs {
			seen++
			if owners[partition.ID(p)] != s.Shard {
				return nil, false, fmt.Sprintf("coordinator has p%d at %s, handlers at %s", p, s.Shard, owners[partition.ID(p)])
			}
		}
	}
	if seen != partitions {
		return nil, false, fmt.Sprintf("coordinator lists %d owned partitions", seen)
	}
	return owners, true, ""
}

func (c *coordinator) waitSettled(t testing.TB, w *world, live ...*shard) map[partition.ID]string {
	t.Helper()
	var out map[partition.ID]string
	waitFor(t, settleTimeout, fmt.Sprintf("%d partitions to settle on %v", partitions, shardIDs(live)), func() (bool, string) {
		owners, ok, why := c.settled(t, w, live...)
		out = owners
		return ok, why
	})
	return out
}

// ---------------------------------------------------------------------------------------
// Shards.

type shard struct {
	id      string
	h       *fakeHandler
	c       *shardrpc.Client
	metrics *shardrpc.Metrics

	cancel   context.CancelFunc
	finished chan struct{}
	runErr   error
	killOnce sync.Once
}

func startShard(t testing.TB, w *world, id string, creds credentials.TransportCredentials, addrs []string, mutate func(*shardrpc.Options, *fakeHandler)) *shard {
	t.Helper()
	metrics, err := shardrpc.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := &shard{id: id, h: w.newHandler(id), metrics: metrics, finished: make(chan struct{})}
	opts := shardrpc.Options{
		ShardID:        id,
		Incarnation:    uint64(time.Now().UnixNano()),
		BuildVersion:   "test",
		Addresses:      addrs,
		Credentials:    creds,
		PartitionCount: partitions,
		MinBackoff:     50 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		Metrics:        s.metrics,
	}
	if mutate != nil {
		mutate(&opts, s.h)
	}
	c, err := shardrpc.New(opts, s.h, w.log.WithName(id))
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() {
		defer close(s.finished)
		s.runErr = c.Run(ctx)
	}()
	t.Cleanup(func() { s.kill(t) })
	return s
}

// kill ends Run without leaving (the process dies) and waits for it to return.
func (s *shard) kill(t testing.TB) {
	t.Helper()
	s.killOnce.Do(func() {
		s.cancel()
		select {
		case <-s.finished:
			if s.runErr != nil {
				t.Errorf("%s: Run returned %v", s.id, s.runErr)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: Run did not return after its context ended", s.id)
		}
	})
}

func shardIDs(ss []*shard) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.id)
	}
	sort.Strings(out)
	return out
}

// byShard inverts an owner map.
func byShard(owners map[partition.ID]string) map[string][]partition.ID {
	out := map[string][]partition.ID{}
	for p, s := range owners {
		out[s] = append(out[s], p)
	}
	for _, ps := range out {
		slices.Sort(ps)
	}
	return out
}

package gate

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// testNamespacePartition maps namespace "nsN" to partition N (anything else, the cluster
// partition key "" included, to 0).
func testNamespacePartition(ns string) partition.ID {
	n, err := strconv.Atoi(strings.TrimPrefix(ns, "ns"))
	if err != nil {
		return 0
	}
	return partition.ID(n)
}

// testPartition maps queue keys whose unnamespaced keys are namespace names ("ns2").
var testPartition = NamespaceNameKeys(testNamespacePartition)

// newTestQueue returns a gate with the given partitions acquired and one queue on it,
// shut down when the test ends.
func newTestQueue(t *testing.T, acquired ...partition.ID) (*Gate, *Queue) {
	t.Helper()
	g := New(testPartition)
	for _, p := range acquired {
		g.Acquire(p)
	}
	q := g.NewQueue(QueueConfig{Name: "test"})
	t.Cleanup(q.ShutDown)
	return g, q
}

type getResult struct {
	key      string
	shutdown bool
}

// asyncGet starts a Get and returns the channel its result arrives on.
func asyncGet(q *Queue) <-chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		k, s := q.Get()
		ch <- getResult{k, s}
	}()
	return ch
}

// mustGet fails the test unless Get returns a key within 5s.
func mustGet(t *testing.T, q *Queue) string {
	t.Helper()
	select {
	case r := <-asyncGet(q):
		if r.shutdown {
			t.Fatalf("Get: unexpected shutdown")
		}
		return r.key
	case <-time.After(5 * time.Second):
		t.Fatalf("Get: no key within 5s")
		return ""
	}
}

// mustBlock fails the test if ch delivers within d.
func mustBlock[T any](t *testing.T, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: returned %v, want it to block", what, v)
	case <-time.After(d):
	}
}

// receive fails the test unless ch delivers within 5s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5s", what)
		var zero T
		return zero
	}
}

func TestKeyPartition(t *testing.T) {
	objects, namespaces := ObjectKeys(testNamespacePartition), NamespaceNameKeys(testNamespacePartition)
	namespaced := NamespacedKeys(testNamespacePartition)
	tests := []struct {
		name   string
		keys   KeyPartition
		key    string
		want   partition.ID
		wantOK bool
	}{
		{name: "objects: namespaced key maps by namespace", keys: objects, key: "ns7/web", want: 7, wantOK: true},
		{name: "objects: cluster-scoped key belongs to the cluster partition", keys: objects, key: "ns9", want: testNamespacePartition(partition.ClusterKey), wantOK: true},
		{name: "objects: empty key", keys: objects, key: ""},
		{name: "objects: empty namespace", keys: objects, key: "/web"},
		{name: "namespaced only: namespaced key maps by namespace", keys: namespaced, key: "ns7/web", want: 7, wantOK: true},
		{name: "namespaced only: a key without a namespace maps nowhere", keys: namespaced, key: "ns9"},
		{name: "namespace names: namespaced key maps by namespace", keys: namespaces, key: "ns7/web", want: 7, wantOK: true},
		{name: "namespace names: unnamespaced key is a namespace", keys: namespaces, key: "ns9", want: 9, wantOK: true},
		{name: "namespace names: empty key", keys: namespaces, key: ""},
		{name: "namespace names: empty name", keys: namespaces, key: "ns1/"},
		{name: "namespace names: too many slashes", keys: namespaces, key: "ns1/a/b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.keys(tt.key)
			if ok != tt.wantOK || got != tt.want {
				t.Fatalf("partition(%q) = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestQueueKeys: a queue's own KeyPartition decides admission, so the same unnamespaced
// key is namespace work in one queue and cluster work in another.
func TestQueueKeys(t *testing.T) {
	g := New(ObjectKeys(testNamespacePartition))
	g.Acquire(9)
	objects := g.NewQueue(QueueConfig{Name: "objects"})
	namespaces := g.NewQueue(QueueConfig{Name: "namespaces", Keys: NamespaceNameKeys(testNamespacePartition)})
	t.Cleanup(objects.ShutDown)
	t.Cleanup(namespaces.ShutDown)
	objects.Add("ns9")    // cluster work: partition 0 is not acquired
	namespaces.Add("ns9") // namespace ns9: partition 9
	if got := objects.Stats(); got.Dropped != 1 || got.Pending != 0 {
		t.Errorf("objects queue: %+v, want the cluster key dropped", got)
	}
	if got := namespaces.Stats(); got.Dropped != 0 || got.Pending != 1 {
		t.Errorf("namespaces queue: %+v, want the namespace key queued", got)
	}
	g.Acquire(testNamespacePartition(partition.ClusterKey))
	objects.Add("node-1")
	if k := mustGet(t, objects); k != "node-1" {
		t.Errorf("Get = %q, want the cluster key once the cluster partition is acquired", k)
	}
	objects.Done("node-1")
}

func TestAdmission(t *testing.T) {
	tests := []struct {
		name        string
		acquired    []partition.ID
		add         []string
		addAfter    []string // with a 10ms delay
		rateLimited []string
		want        []string // keys Get must return, in any order
		wantDropped uint64
	}{
		{
			name:     "keys of acquired partitions are queued",
			acquired: []partition.ID{1, 2},
			add:      []string{"ns1/a", "ns2/b", "ns2"},
			want:     []string{"ns1/a", "ns2/b", "ns2"},
		},
		{
			name:        "keys of other partitions are dropped by every add",
			acquired:    []partition.ID{1},
			add:         []string{"ns1/a", "ns2/b"},
			addAfter:    []string{"ns3/c", "ns1/d"},
			rateLimited: []string{"ns4/e", "ns1/f"},
			want:        []string{"ns1/a", "ns1/d", "ns1/f"},
			wantDropped: 3,
		},
		{
			name:        "malformed keys are dropped",
			acquired:    []partition.ID{0, 1},
			add:         []string{"", "/x", "ns1/a/b", "ns1/ok"},
			want:        []string{"ns1/ok"},
			wantDropped: 3,
		},
		{
			name:        "nothing acquired drops everything",
			add:         []string{"ns1/a", "ns1"},
			rateLimited: []string{"ns1/b"},
			wantDropped: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, q := newTestQueue(t, tt.acquired...)
			for _, k := range tt.add {
				q.Add(k)
			}
			for _, k := range tt.addAfter {
				q.AddAfter(k, 10*time.Millisecond)
			}
			for _, k := range tt.rateLimited {
				q.AddRateLimited(k)
			}
			var got []string
			for range tt.want {
				k := mustGet(t, q)
				got = append(got, k)
				q.Done(k)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Fatalf("got keys %v, want %v", got, want)
			}
			mustBlock(t, asyncGet(q), 50*time.Millisecond, "Get after all admitted keys")
			s := q.Stats()
			if s.Dropped != tt.wantDropped || s.Pending != 0 || s.Stale != 0 || s.Depth != 0 || s.InFlight != 0 {
				t.Fatalf("stats = %+v; want Dropped=%d and nothing queued or in flight", s, tt.wantDropped)
			}
			for _, k := range tt.rateLimited {
				if p, ok := testPartition(k); (!ok || !slices.Contains(tt.acquired, p)) && q.NumRequeues(k) != 0 {
					t.Fatalf("dropped key %q has rate-limiter state (%d requeues)", k, q.NumRequeues(k))
				}
			}
		})
	}
}

func TestGetDiscardsKeysOfReleasedPartitions(t *testing.T) {
	g, q := newTestQueue(t, 1, 2)
	for _, k := range []string{"ns1/a", "ns2/b", "ns1/c"} {
		q.Add(k)
	}
	if err := g.Release(context.Background(), 1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if s := q.Stats(); s.Depth != 3 || s.Stale != 2 || s.Pending != 1 {
		t.Fatalf("after Release stats = %+v; want Depth=3 Stale=2 Pending=1 (stale keys stay in client-go's queue)", s)
	}
	q.Add("ns1/late") // partition revoked: dropped
	if got := mustGet(t, q); got != "ns2/b" {
		t.Fatalf("Get = %q, want ns2/b (ns1/a must be discarded)", got)
	}
	q.Done("ns2/b")
	if s := q.Stats(); s.Discarded != 1 || s.Stale != 1 || s.Dropped != 1 {
		t.Fatalf("stats = %+v; want Discarded=1 Stale=1 Dropped=1", s)
	}
	ch := asyncGet(q)
	mustBlock(t, ch, 50*time.Millisecond, "Get with only stale keys queued")
	if s := q.Stats(); s.Discarded != 2 || s.Stale != 0 || s.Depth != 0 {
		t.Fatalf("stats = %+v; want Discarded=2 Stale=0 Depth=0", s)
	}
	q.Add("ns2/d")
	if r := receive(t, ch, "Get"); r.key != "ns2/d" {
		t.Fatalf("Get = %+v, want ns2/d", r)
	}
}

func TestReacquireRevivesQueuedKeys(t *testing.T) {
	g, q := newTestQueue(t, 1)
	q.Add("ns1/a")
	if err := g.Release(context.Background(), 1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if s := q.Stats(); s.Stale != 1 {
		t.Fatalf("Stale = %d, want 1", s.Stale)
	}
	g.Acquire(1)
	if s := q.Stats(); s.Stale != 0 || s.Pending != 1 {
		t.Fatalf("after re-Acquire stats = %+v; want Stale=0 Pending=1", s)
	}
	if got := mustGet(t, q); got != "ns1/a" {
		t.Fatalf("Get = %q, want ns1/a", got)
	}
}

func TestReleaseForgetsRateLimiterState(t *testing.T) {
	g, q := newTestQueue(t, 1, 2)
	for range 3 {
		q.AddRateLimited("ns1/a")
		q.AddRateLimited("ns2/b")
	}
	if n := q.NumRequeues("ns1/a"); n != 3 {
		t.Fatalf("NumRequeues(ns1/a) = %d, want 3", n)
	}
	if err := g.Release(context.Background(), 1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := q.NumRequeues("ns1/a"); n != 0 {
		t.Fatalf("after Release NumRequeues(ns1/a) = %d, want 0", n)
	}
	if n := q.NumRequeues("ns2/b"); n != 3 {
		t.Fatalf("NumRequeues(ns2/b) = %d, want 3: other partitions keep their backoff", n)
	}
}

func TestReleaseWaitsForInFlightWork(t *testing.T) {
	g := New(testPartition)
	g.Acquire(1)
	g.Acquire(2)
	qa := g.NewQueue(QueueConfig{Name: "a"})
	qb := g.NewQueue(QueueConfig{Name: "b"})
	t.Cleanup(qa.ShutDown)
	t.Cleanup(qb.ShutDown)

	// Two queues each have a key of partition 1 in flight.
	qa.Add("ns1/x")
	qb.Add("ns1/y")
	ka, kb := mustGet(t, qa), mustGet(t, qb)
	if g.Stats().InFlightPartitions[1] != 2 || g.Stats().InFlight != 2 {
		t.Fatalf("in flight = %d (partition 1: %d), want 2", g.Stats().InFlight, g.Stats().InFlightPartitions[1])
	}

	// A bounded Release gives up but keeps the partition revoked.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	err := g.Release(ctx, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bounded Release = %v, want DeadlineExceeded", err)
	}
	if slices.Contains(g.Partitions(), 1) {
		t.Fatalf("partition 1 still acquired after a timed-out Release")
	}

	released := make(chan error, 1)
	go func() { released <- g.Release(context.Background(), 1) }()

	// Meanwhile: partition 1 takes no new keys; partition 2 keeps working.
	qa.Add("ns1/new")
	qa.Add("ns2/z")
	if got := mustGet(t, qa); got != "ns2/z" {
		t.Fatalf("Get = %q, want ns2/z", got)
	}
	qa.Done("ns2/z")
	if s := qa.Stats(); s.Dropped != 1 {
		t.Fatalf("Dropped = %d, want 1 (ns1/new)", s.Dropped)
	}

	mustBlock(t, released, 50*time.Millisecond, "Release with two keys in flight")
	qa.Done(ka)
	mustBlock(t, released, 50*time.Millisecond, "Release with one key in flight")
	qb.Done(kb)
	if err := receive(t, released, "Release"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if g.Stats().InFlight != 0 {
		t.Fatalf("InFlight = %d after Release, want 0", g.Stats().InFlight)
	}
}

func TestReleaseWakesGetHeldByFence(t *testing.T) {
	g, q := newTestQueue(t, 1, 2)
	// Take the key out of client-go's queue with the gate open, then fence before the
	// admission check: this is the narrow window Get must handle.
	q.Add("ns1/a")
	key, _ := q.rl.Get()
	fence(g)
	verdicts := make(chan verdict, 1)
	go func() { verdicts <- q.start(key) }()
	mustBlock(t, verdicts, 50*time.Millisecond, "admission while fenced")
	if g.Stats().InFlight != 0 {
		t.Fatalf("InFlight = %d while fenced, want 0", g.Stats().InFlight)
	}
	if err := g.Release(context.Background(), 1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if v := receive(t, verdicts, "admission after Release"); v != verdictDiscard {
		t.Fatalf("verdict = %d, want discard", v)
	}
}

func TestFencedGateStartsNoWork(t *testing.T) {
	const keys, workers = 20, 4
	g, q := newTestQueue(t, 1)
	fence(g)
	started := make(chan string, keys)
	for range workers {
		go func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				started <- k
				q.Done(k)
			}
		}()
	}
	for i := range keys {
		q.Add("ns1/k" + strconv.Itoa(i))
	}
	mustBlock(t, started, 100*time.Millisecond, "worker while fenced")
	if g.Stats().InFlight != 0 {
		t.Fatalf("InFlight = %d while fenced, want 0", g.Stats().InFlight)
	}
	if s := q.Stats(); s.Pending != keys {
		t.Fatalf("Pending = %d while fenced, want %d (adds are kept)", s.Pending, keys)
	}
	unfence(g)
	seen := map[string]bool{}
	for range keys {
		seen[receive(t, started, "worker after Unfence")] = true
	}
	if len(seen) != keys {
		t.Fatalf("processed %d distinct keys, want %d", len(seen), keys)
	}
}

func TestFenceLetsInFlightWorkFinish(t *testing.T) {
	g, q := newTestQueue(t, 1)
	q.Add("ns1/a")
	k := mustGet(t, q)
	fence(g)
	if !g.Fenced() || g.Stats().InFlight != 1 {
		t.Fatalf("Fenced=%v InFlight=%d, want true, 1", g.Fenced(), g.Stats().InFlight)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := waitIdle(ctx, g); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitIdle with work in flight = %v, want DeadlineExceeded", err)
	}
	q.Add("ns1/b")
	next := asyncGet(q)
	idle := make(chan error, 1)
	go func() { idle <- waitIdle(context.Background(), g) }()
	q.Done(k)
	if err := receive(t, idle, "WaitIdle"); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
	mustBlock(t, next, 50*time.Millisecond, "Get while fenced")
	unfence(g)
	if r := receive(t, next, "Get after Unfence"); r.key != "ns1/b" {
		t.Fatalf("Get = %+v, want ns1/b", r)
	}
}

func TestShutDown(t *testing.T) {
	tests := []struct {
		name     string
		fenced   bool
		queued   []string
		wantKeys []string // returned by Get after ShutDown, before shutdown=true
	}{
		{name: "empty queue returns shutdown", wantKeys: nil},
		{name: "queued keys are still handed out, like client-go", queued: []string{"ns1/a", "ns1/b"}, wantKeys: []string{"ns1/a", "ns1/b"}},
		{name: "fenced queue returns shutdown without starting work", fenced: true, queued: []string{"ns1/a"}, wantKeys: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, q := newTestQueue(t, 1)
			for _, k := range tt.queued {
				q.Add(k)
			}
			if tt.fenced {
				fence(g)
			}
			parked := asyncGet(q)
			if tt.fenced || len(tt.queued) == 0 {
				mustBlock(t, parked, 30*time.Millisecond, "Get before ShutDown")
			}
			q.ShutDown()
			q.Add("ns1/after") // ignored after ShutDown, and not counted as dropped
			var got []string
			for r := receive(t, parked, "Get"); !r.shutdown; r = receive(t, asyncGet(q), "Get") {
				got = append(got, r.key)
				q.Done(r.key)
			}
			if !slices.Equal(got, tt.wantKeys) {
				t.Fatalf("keys after ShutDown = %v, want %v", got, tt.wantKeys)
			}
			if !q.ShuttingDown() || q.Stats().Dropped != 0 || g.Stats().InFlight != 0 {
				t.Fatalf("ShuttingDown=%v Dropped=%d InFlight=%d", q.ShuttingDown(), q.Stats().Dropped, g.Stats().InFlight)
			}
		})
	}
}

func TestShutDownWithDrainWaitsForInFlight(t *testing.T) {
	g, q := newTestQueue(t, 1)
	q.Add("ns1/a")
	k := mustGet(t, q)
	fence(g) // a fence must not keep the drain from finishing
	drained := make(chan struct{})
	go func() { q.ShutDownWithDrain(); close(drained) }()
	mustBlock(t, drained, 50*time.Millisecond, "ShutDownWithDrain with a key in flight")
	q.Done(k)
	receive(t, drained, "ShutDownWithDrain")
}

func TestNewQueueRequiresName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatalf("NewQueue with an empty name did not panic")
		}
	}()
	New(testPartition).NewQueue(QueueConfig{})
}

func TestPartitions(t *testing.T) {
	g := New(testPartition)
	for _, p := range []partition.ID{9, 3, 5, 3} {
		g.Acquire(p)
	}
	if err := g.Release(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if got := g.Partitions(); !slices.Equal(got, []partition.ID{3, 9}) {
		t.Fatalf("Partitions = %v, want [3 9]", got)
	}
	if s := g.Stats(); s.Acquired != 2 || s.Fenced || s.InFlight != 0 {
		t.Fatalf("Stats = %+v", s)
	}
}

// TestLeaseDeadlineStopsWorkWithoutFence checks the self-fencing that does not depend on
// any timer: once the clock passes the deadline, no key starts, even though Fence was
// never called (a process resuming from SIGSTOP runs its workers before its timers).
func TestLeaseDeadlineStopsWorkWithoutFence(t *testing.T) {
	g, q := newTestQueue(t, 1)
	now := time.Unix(1000, 0)
	g.mu.Lock()
	g.now = func() time.Time { return now }
	g.mu.Unlock()

	g.SetDeadline(now.Add(time.Second))
	q.Add("ns1/a")
	if got := mustGet(t, q); got != "ns1/a" {
		t.Fatalf("got %q before the deadline", got)
	}
	q.Done("ns1/a")

	g.mu.Lock()
	now = now.Add(2 * time.Second) // past the deadline
	g.mu.Unlock()
	if !g.Fenced() {
		t.Fatal("Fenced() = false past the deadline")
	}
	q.Add("ns1/b")
	ch := asyncGet(q)
	mustBlock(t, ch, 100*time.Millisecond, "Get past the lease deadline")

	g.SetDeadline(now.Add(time.Second)) // an acknowledged heartbeat extends the lease
	if r := receive(t, ch, "Get after the lease was extended"); r.key != "ns1/b" {
		t.Fatalf("got %+v", r)
	}
}

func TestRevokeDoesNotWait(t *testing.T) {
	g, q := newTestQueue(t, 1)
	q.Add("ns1/a")
	mustGet(t, q) // in flight, never Done
	g.Revoke(1)
	if slices.Contains(g.Partitions(), 1) {
		t.Fatal("partition still acquired after Revoke")
	}
	q.Add("ns1/b")
	if q.Len() != 0 {
		t.Fatalf("key of a revoked partition admitted: %+v", q.Stats())
	}
}

// fence puts g past its lease deadline, as a shard whose lease ran out.
func fence(g *Gate) { g.SetDeadline(time.Unix(1, 0)) }

// unfence gives g a lease again (a zero deadline: no lease limit).
func unfence(g *Gate) { g.SetDeadline(time.Time{}) }

// waitIdle returns once no key is in flight in any queue of g, or with ctx's error.
func waitIdle(ctx context.Context, g *Gate) error {
	return g.wait(ctx, func() bool { return g.total == 0 })
}

// TestKeyContext: a reconcile's context ends when its partition is revoked (fenced or
// demoted), and not when the partition is merely draining after a release, whose
// in-flight work must be let finish.
func TestKeyContext(t *testing.T) {
	tests := []struct {
		name       string
		take       func(g *Gate)
		wantCancel bool
	}{
		{name: "revoked", take: func(g *Gate) { g.Revoke(1) }, wantCancel: true},
		{name: "draining", take: func(g *Gate) { g.StopStarting(1) }},
		{name: "another partition revoked", take: func(g *Gate) { g.Revoke(2) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, q := newTestQueue(t, 1, 2)
			q.Add("ns1/a")
			key := mustGet(t, q)
			ctx, cancel := q.KeyContext(context.Background(), key)
			defer cancel()
			if ctx.Err() != nil {
				t.Fatal("context of a held partition's key already ended")
			}
			tc.take(g)
			// The cancellation runs in a goroutine of its own (context.AfterFunc).
			cancelled := false
			select {
			case <-ctx.Done():
				cancelled = true
			case <-time.After(200 * time.Millisecond):
			}
			if cancelled != tc.wantCancel {
				t.Fatalf("cancelled = %v, want %v", cancelled, tc.wantCancel)
			}
			q.Done(key)
		})
	}
	t.Run("key of a partition not held", func(t *testing.T) {
		_, q := newTestQueue(t, 1)
		ctx, cancel := q.KeyContext(context.Background(), "ns3/a")
		defer cancel()
		if ctx.Err() == nil {
			t.Fatal("context of a key whose partition is not held is live")
		}
	})
}

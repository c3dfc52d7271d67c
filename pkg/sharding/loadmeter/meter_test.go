package loadmeter

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// testPartitions is the partition count of the tests' meters.
const testPartitions = 16

// nsPartition maps "nsN" to partition N and anything else, the cluster key "" included,
// to partition 0 (the cluster partition of the tests).
func nsPartition(ns string) partition.ID {
	n, err := strconv.Atoi(strings.TrimPrefix(ns, "ns"))
	if err != nil {
		return 0
	}
	return partition.ID(n)
}

// newTestMeter returns a meter of testPartitions partitions on a clock of its own at t0.
func newTestMeter(t testing.TB, opts Options) (*Meter, *clock) {
	t.Helper()
	c := &clock{now: t0}
	opts.Now = c.Now
	m, err := New(testPartitions, opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// okRT is a RoundTripper that answers every request with an empty 200.
type okRT struct{}

func (okRT) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// send makes n requests to path through rt.
func send(t testing.TB, rt http.RoundTripper, path string, n int) {
	t.Helper()
	for range n {
		req, err := http.NewRequest(http.MethodGet, "https://apiserver.example"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
}

// TestTransportAttribution: which partition a request counts for, by its URL, and what
// it counts with its client's weight.
func TestTransportAttribution(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		weight float64
		want   partition.ID
		other  bool // counted as the shard's, no partition's
	}{
		{name: "namespaced object", path: "/apis/apps/v1/namespaces/ns3/deployments/d", weight: 1, want: 3},
		{name: "namespaced list", path: "/api/v1/namespaces/ns4/pods", weight: 1, want: 4},
		{name: "an event is its namespace's", path: "/api/v1/namespaces/ns5/events", weight: 1, want: 5},
		{name: "a new-style event too", path: "/apis/events.k8s.io/v1/namespaces/ns6/events/e", weight: 1, want: 6},
		{name: "namespace finalize is the namespace's", path: "/api/v1/namespaces/ns7/finalize", weight: 1.0 / 20, want: 7},
		{name: "namespace status is the namespace's", path: "/api/v1/namespaces/ns8/status", weight: 1.0 / 20, want: 8},
		{name: "a Namespace itself is cluster work", path: "/api/v1/namespaces/ns9", weight: 1, want: 0},
		{name: "cluster-scoped object", path: "/api/v1/nodes/n1", weight: 1, want: 0},
		{name: "behind a path prefix", path: "/k8s/clusters/c1/apis/batch/v1/namespaces/ns10/jobs/j", weight: 1, want: 10},
		{name: "metrics API of a namespace", path: "/apis/metrics.k8s.io/v1beta1/namespaces/ns11/pods", weight: 1, want: 11},
		{name: "an access review needs no owner", path: "/apis/authorization.k8s.io/v1/subjectaccessreviews", weight: 1, other: true},
		{name: "not a resource path", path: "/version", weight: 1, other: true},
		{name: "a partition the map does not have", path: "/api/v1/namespaces/ns99/pods", weight: 1, other: true},
		{name: "one third", path: "/api/v1/namespaces/ns12/pods", weight: 1.0 / 3, want: 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newTestMeter(t, DefaultOptions())
			const n = 60
			send(t, Transport(m, nsPartition, tc.weight)(okRT{}), tc.path, n)
			want := float64(n) * tc.weight
			total := m.Totals().Requests
			if !near2(total, want) {
				t.Errorf("shard total %v requests, want %v (%d × %v)", total, want, n, tc.weight)
			}
			for p := range partition.ID(testPartitions) {
				got := m.CountsOf(p).Requests
				wantP := 0.0
				if !tc.other && p == tc.want {
					wantP = want
				}
				if !near2(got, wantP) {
					t.Errorf("partition %d counts %v requests, want %v", p, got, wantP)
				}
			}
		})
	}
}

// near2 compares counts kept in 1/unit: within n rounding errors of 1/unit.
func near2(got, want float64) bool { return got-want < 1e-4 && want-got < 1e-4 }

// TestTransportWeightIsPositive: a weight of 0 or less would hide a client's requests.
func TestTransportWeightIsPositive(t *testing.T) {
	m, _ := newTestMeter(t, DefaultOptions())
	for _, w := range []float64{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Transport with weight %v did not panic", w)
				}
			}()
			Transport(m, nsPartition, w)
		}()
	}
}

// TestSnapshot: a partition's load is its weighted requests per second plus the
// reconcile weight times its reconciles per second, counted from its acquisition, each
// bias-corrected; partitions held for less than MinAge are left out, released ones
// dropped, and a partition acquired again starts from nothing.
func TestSnapshot(t *testing.T) {
	m, c := newTestMeter(t, Options{HalfLife: 5 * time.Minute, ReconcileWeight: 0.1, MinAge: 10 * time.Second})
	rt := Transport(m, nsPartition, 1)(okRT{})
	ns := Transport(m, nsPartition, 1.0/20)(okRT{})

	// Counted before the acquisition: not the partition's load.
	send(t, rt, "/api/v1/namespaces/ns2/pods", 500)
	m.Done(2)
	m.Acquired(2)
	m.Acquired(3)
	send(t, rt, "/api/v1/namespaces/ns2/pods", 100)     // 10/s over 10 s
	send(t, ns, "/api/v1/namespaces/ns2/finalize", 200) // 200/20 = 10 requests: 1/s
	for range 30 {
		m.Done(2) // 3/s
	}
	send(t, rt, "/api/v1/namespaces/ns4/pods", 40) // not held

	type entry struct {
		p              partition.ID
		load, req, rec float64
		age            time.Duration
	}
	check := func(step string, s Snapshot, want []entry) {
		t.Helper()
		var got []entry
		for _, pl := range s.Partitions {
			got = append(got, entry{pl.Partition, pl.Load, pl.Requests, pl.Reconciles, pl.Age})
		}
		if len(got) != len(want) {
			t.Fatalf("%s: partitions %+v, want %+v", step, got, want)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.p != w.p || !near(g.load, w.load) || !near(g.req, w.req) || !near(g.rec, w.rec) || g.age != w.age {
				t.Errorf("%s: partition %+v, want %+v", step, g, w)
			}
		}
	}
	s := m.Snapshot(c.advance(10 * time.Second))
	check("at MinAge", s, []entry{
		{p: 2, req: 11, rec: 3, load: 11 + 0.1*3, age: 10 * time.Second},
		{p: 3, age: 10 * time.Second},
	})
	// The shard's rates cover every count since New, 10 s ago: 500 + 100 + 10 + 40
	// requests, 31 reconciles.
	if !near(s.Requests, 65) || !near(s.Reconciles, 3.1) || !near(s.Load, 65+0.31) {
		t.Errorf("shard rates: %v requests/s, %v reconciles/s, load %v; want 65, 3.1, 65.31", s.Requests, s.Reconciles, s.Load)
	}

	m.Released(3)
	m.Acquired(4)
	send(t, rt, "/api/v1/namespaces/ns4/pods", 20)
	check("3 released, 4 too young", m.Snapshot(c.advance(5*time.Second)), []entry{
		// Nothing more for 2: the same counts over 15 s, in the EWMA's weighting.
		{p: 2, req: ewmaOf(11*10, 10*time.Second, 0, 5*time.Second), rec: ewmaOf(30, 10*time.Second, 0, 5*time.Second),
			load: ewmaOf(11*10, 10*time.Second, 0, 5*time.Second) + 0.1*ewmaOf(30, 10*time.Second, 0, 5*time.Second), age: 15 * time.Second},
	})
	check("4 of age", m.Snapshot(c.advance(5*time.Second)), []entry{
		{p: 2, req: ewmaOf(11*10, 10*time.Second, 0, 10*time.Second), rec: ewmaOf(30, 10*time.Second, 0, 10*time.Second),
			load: ewmaOf(11*10, 10*time.Second, 0, 10*time.Second) + 0.1*ewmaOf(30, 10*time.Second, 0, 10*time.Second), age: 20 * time.Second},
		{p: 4, req: ewmaOf(20, 5*time.Second, 0, 5*time.Second), load: ewmaOf(20, 5*time.Second, 0, 5*time.Second), age: 10 * time.Second},
	})
}

// ewmaOf is the bias-corrected rate of an average (half-life 5 min) that saw n1 events
// over d1, then n2 over d2.
func ewmaOf(n1 float64, d1 time.Duration, n2 float64, d2 time.Duration) float64 {
	e := NewEWMA(5*time.Minute, t0)
	e.Observe(t0.Add(d1), n1)
	e.Observe(t0.Add(d1+d2), n2)
	return e.Rate()
}

// TestNew refuses options that would make the rates meaningless.
func TestNew(t *testing.T) {
	tests := []struct {
		name       string
		partitions int
		opts       Options
		wantErr    bool
	}{
		{name: "defaults", partitions: 4096, opts: DefaultOptions()},
		{name: "no reconcile weight", partitions: 1, opts: Options{HalfLife: time.Minute}},
		{name: "no partitions", partitions: 0, opts: DefaultOptions(), wantErr: true},
		{name: "too many partitions", partitions: partition.MaxCount + 1, opts: DefaultOptions(), wantErr: true},
		{name: "no half-life", partitions: 1, opts: Options{}, wantErr: true},
		{name: "negative reconcile weight", partitions: 1, opts: Options{HalfLife: time.Minute, ReconcileWeight: -0.1}, wantErr: true},
		{name: "negative minimum age", partitions: 1, opts: Options{HalfLife: time.Minute, MinAge: -time.Second}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.partitions, tc.opts)
			if (err != nil) != tc.wantErr {
				t.Errorf("New: %v, want an error: %t", err, tc.wantErr)
			}
		})
	}
}

// TestConcurrentCounting (run with -race): requests, waits and reconciles counted from
// many goroutines while partitions come and go and snapshots are taken all add up
// exactly.
func TestConcurrentCounting(t *testing.T) {
	m, c := newTestMeter(t, DefaultOptions())
	rt := Transport(m, nsPartition, 0.5)(okRT{})
	lim := Limiter(m, "deployment", instant{wait: time.Microsecond})
	const workers, each = 8, 500
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := partition.ID(i % testPartitions)
			m.Acquired(p)
			m.Snapshot(c.advance(time.Second))
			m.Released(p)
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/api/v1/namespaces/ns" + strconv.Itoa(w) + "/pods"
			ctx := gate.WithPartition(context.Background(), partition.ID(w))
			for range each {
				req, _ := http.NewRequest(http.MethodGet, "https://apiserver.example"+path, nil)
				if _, err := rt.RoundTrip(req); err != nil {
					t.Error(err)
					return
				}
				if err := lim.Wait(ctx); err != nil {
					t.Error(err)
					return
				}
				m.Done(partition.ID(w))
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	tot := m.Totals()
	if !near2(tot.Requests, workers*each*0.5) || tot.Reconciles != workers*each {
		t.Errorf("totals %+v, want %v requests and %d reconciles", tot, workers*each*0.5, workers*each)
	}
	for w := range partition.ID(workers) {
		got := m.CountsOf(w)
		if !near2(got.Requests, each*0.5) || got.Reconciles != each || got.LimiterWait < each*time.Microsecond {
			t.Errorf("partition %d: %+v, want %v requests, %d reconciles, at least %v waited", w, got, each*0.5, each, each*time.Microsecond)
		}
	}
	if got := m.ControllerWait("deployment"); got != tot.LimiterWait {
		t.Errorf("the controller waited %v, the partitions %v: want equal (every wait had a partition)", got, tot.LimiterWait)
	}
}

// instant is a rate limiter that always has a token, after wait.
type instant struct{ wait time.Duration }

func (l instant) TryAccept() bool { return true }
func (l instant) Accept()         { time.Sleep(l.wait) }
func (l instant) Stop()           {}
func (l instant) QPS() float32    { return 1e9 }
func (l instant) Wait(ctx context.Context) error {
	time.Sleep(l.wait)
	return ctx.Err()
}

// TestSetSettings: the coordinator's half-life, reconcile weight and report interval (the
// minimum age) apply to the averages held and to those of partitions acquired later; bad
// values are refused and change nothing.
func TestSetSettings(t *testing.T) {
	tests := []struct {
		name     string
		halfLife time.Duration
		weight   float64
		minAge   time.Duration
		wantErr  bool
	}{
		{name: "coordinator's own", halfLife: time.Minute, weight: 1, minAge: 2 * time.Second},
		{name: "no half-life", halfLife: 0, weight: 1, minAge: 2 * time.Second, wantErr: true},
		{name: "negative weight", halfLife: time.Minute, weight: -1, minAge: 2 * time.Second, wantErr: true},
		{name: "NaN weight", halfLife: time.Minute, weight: math.NaN(), minAge: 2 * time.Second, wantErr: true},
		{name: "negative minimum age", halfLife: time.Minute, weight: 1, minAge: -time.Second, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, c := newTestMeter(t, Options{HalfLife: 5 * time.Minute, ReconcileWeight: 0.1, MinAge: time.Second})
			m.Acquired(1)
			err := m.SetSettings(tc.halfLife, tc.weight, tc.minAge)
			if (err != nil) != tc.wantErr {
				t.Fatalf("SetSettings(%s, %v, %s) = %v, want an error: %v", tc.halfLife, tc.weight, tc.minAge, err, tc.wantErr)
			}
			m.Acquired(2)
			wantH, wantW := tc.halfLife, tc.weight
			if tc.wantErr {
				wantH, wantW = 5*time.Minute, 0.1
			}
			// One reconcile a second on both partitions for one half-life: both report
			// 1/s (bias-corrected) and a load of the weight in force.
			for range int(wantH / time.Second) {
				m.Done(1)
				m.Done(2)
				m.Snapshot(c.advance(time.Second))
			}
			s := m.Snapshot(c.Now())
			if len(s.Partitions) != 2 {
				t.Fatalf("partitions %+v, want 1 and 2", s.Partitions)
			}
			for _, pl := range s.Partitions {
				if !near(pl.Reconciles, 1) || !near(pl.Load, wantW) {
					t.Errorf("partition %d: %v reconciles/s, load %v; want 1, %v", pl.Partition, pl.Reconciles, pl.Load, wantW)
				}
			}
			wantMin := tc.minAge
			if tc.wantErr {
				wantMin = time.Second
			}
			// A partition acquired now is left out until it is wantMin old.
			m.Acquired(3)
			m.Snapshot(c.advance(wantMin - time.Millisecond))
			if s := m.Snapshot(c.Now()); slices.ContainsFunc(s.Partitions, func(pl PartitionLoad) bool { return pl.Partition == 3 }) {
				t.Fatalf("partition 3 reported %s after its acquisition; minimum age %s", wantMin-time.Millisecond, wantMin)
			}
			if s := m.Snapshot(c.advance(time.Millisecond)); !slices.ContainsFunc(s.Partitions, func(pl PartitionLoad) bool { return pl.Partition == 3 }) {
				t.Fatalf("partition 3 left out at its minimum age %s", wantMin)
			}
			m.Released(3)
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range []partition.ID{1, 2} {
				if got := m.held[p].rates.reconciles.halfLife; got != wantH {
					t.Errorf("partition %d's half-life %s, want %s", p, got, wantH)
				}
			}
		})
	}
}

// TestAcquireDuringSnapshot: the gate calls Acquired and Released under its write lock,
// while every queue waits, so they must not wait for a Snapshot's averages (2.9 ms at
// 4,096 held partitions); only for the map. The test holds the sampling lock as a
// Snapshot in progress would.
func TestAcquireDuringSnapshot(t *testing.T) {
	m, _ := newTestMeter(t, DefaultOptions())
	m.Acquired(1)
	m.sampling.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Acquired(2)
		m.Released(1)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquired and Released waited for the Snapshot in progress")
	}
	m.sampling.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[2]; !ok || len(m.held) != 1 {
		t.Errorf("held %v, want partition 2 only", m.held)
	}
}

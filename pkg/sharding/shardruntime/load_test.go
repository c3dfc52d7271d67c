package shardruntime

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
)

// fakeClock is a settable clock for the meter.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// okTransport answers every request with an empty 200.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

// TestLoad: the runtime reports, for each partition it has worked for at least the
// meter's MinAge, the meter's load and age with the partition's namespaces and cached
// objects (what a move of it costs); partitions with none of these, or too young, are
// left out, and a stopped one is gone.
func TestLoad(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	opts := loadmeter.DefaultOptions()
	opts.Now = clock.Now
	meter, err := loadmeter.New(100, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := shardcache.New(fake.NewClientset(world()...), testPartition, shardcache.Options{PollInterval: 5 * time.Millisecond, StartWindow: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(shardcache.ConfigMaps)
	g := gate.New(gate.NamespaceNameKeys(testPartition), gate.WithObserver(meter))
	ctrl := &fakeController{}
	e := runEnvWith(t, c, g, []Controller{runtimeController(ctrl)}, meter)
	if got := e.rt.Load(); len(got.Partitions) != 0 {
		t.Errorf("load before any partition: %+v, want none", got)
	}

	for _, p := range []partition.ID{3, 5, 42} { // 42: no namespace, no object
		e.rt.Work(p, false)
		e.idle(p)
	}
	rt := loadmeter.Transport(meter, testPartition, 1)(okTransport{})
	for range 20 {
		req, _ := http.NewRequest(http.MethodGet, "https://apiserver.example/api/v1/namespaces/p3-a/configmaps/x", nil)
		if _, err := rt.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
	}
	q := g.NewQueue(gate.QueueConfig{Name: "test"})
	defer q.ShutDown()
	for _, key := range []string{"p3-a/x", "p3-b/z"} {
		q.Add(key)
		k, _ := q.Get()
		q.Done(k)
	}
	clock.advance(10 * time.Second)
	e.rt.Work(7, false) // too young to report
	e.idle(7)

	type entry struct {
		p                   partition.ID
		load                float64
		namespaces, objects int
		age                 time.Duration
	}
	check := func(step string, want []entry) {
		t.Helper()
		l := e.rt.Load()
		var got []entry
		for _, pl := range l.Partitions {
			got = append(got, entry{pl.Partition, pl.Load, pl.Namespaces, pl.Objects, pl.Age})
		}
		if len(got) != len(want) {
			t.Fatalf("%s: load %+v, want %+v", step, got, want)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.p != w.p || g.namespaces != w.namespaces || g.objects != w.objects || g.age != w.age || g.load-w.load > 1e-9 || w.load-g.load > 1e-9 {
				t.Errorf("%s: %+v, want %+v", step, g, w)
			}
		}
	}
	check("3, 5 and 42 worked 10 s, 7 just now", []entry{
		// 20 requests and 2 reconciles in 10 s: 2 + 0.1 × 0.2.
		{p: 3, load: 2.02, namespaces: 2, objects: 3, age: 10 * time.Second},
		{p: 5, namespaces: 1, objects: 1, age: 10 * time.Second},
	})
	e.rt.Stop(3)
	e.idle(3)
	clock.advance(10 * time.Second)
	check("3 stopped, 7 of age", []entry{
		{p: 5, namespaces: 1, objects: 1, age: 20 * time.Second},
		{p: 7, namespaces: 1, objects: 1, age: 10 * time.Second},
	})
}

// TestLoadWithoutMeter: a runtime without a meter reports nothing.
func TestLoadWithoutMeter(t *testing.T) {
	e := newEnv(t, nil)
	e.rt.Work(3, false)
	e.idle(3)
	if got := e.rt.Load(); got.Partitions != nil || got.LimiterWait != 0 {
		t.Errorf("load without a meter: %+v, want none", got)
	}
}

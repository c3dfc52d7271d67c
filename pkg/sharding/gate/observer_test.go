package gate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// recorder is an Observer that records its calls in order.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(what string, p partition.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("%s %d", what, p))
}

func (r *recorder) Acquired(p partition.ID) { r.add("acquired", p) }
func (r *recorder) Released(p partition.ID) { r.add("released", p) }
func (r *recorder) Done(p partition.ID)     { r.add("done", p) }

// take returns the calls recorded since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// TestObserver: the observer hears of each partition the gate starts and stops holding
// once, and of each completed reconcile once per Done; discarded keys, Dones of keys
// never started and repeated acquires or releases are not reported.
func TestObserver(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, g *Gate, q *Queue)
		want []string
	}{
		{name: "acquire once, twice", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			g.Acquire(1)
		}, want: []string{"acquired 1"}},
		{name: "one Done per reconcile", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			g.Acquire(2)
			q.Add("ns1/a")
			q.Add("ns2/b")
			for range 2 {
				q.Done(mustGet(t, q))
			}
			q.Add("ns1/a")
			q.Done(mustGet(t, q))
		}, want: []string{"acquired 1", "acquired 2", "done 1", "done 2", "done 1"}},
		{name: "Done of a key never started", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			q.Done("ns1/never")
		}, want: []string{"acquired 1"}},
		{name: "discarded keys are not reconciles", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			g.Acquire(2)
			q.Add("ns1/stale")
			q.Add("ns2/live")
			g.Revoke(1)
			q.Done(mustGet(t, q)) // discards ns1/stale on the way
		}, want: []string{"acquired 1", "acquired 2", "released 1", "done 2"}},
		{name: "release of work in flight: released at once, done when it ends", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			q.Add("ns1/a")
			key := mustGet(t, q)
			g.StopStarting(1) // Release's first step, done here so that the order is known
			released := make(chan error, 1)
			go func() { released <- g.Release(context.Background(), 1) }()
			q.Done(key)
			if err := <-released; err != nil {
				t.Fatal(err)
			}
		}, want: []string{"acquired 1", "released 1", "done 1"}},
		{name: "stop starting, revoke, release: released once", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			g.StopStarting(1)
			g.Revoke(1)
			if err := g.Release(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			g.Revoke(3) // never acquired
		}, want: []string{"acquired 1", "released 1"}},
		{name: "handed back while draining", run: func(t *testing.T, g *Gate, q *Queue) {
			g.Acquire(1)
			g.StopStarting(1)
			g.Acquire(1)
		}, want: []string{"acquired 1", "released 1", "acquired 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			g := New(testPartition, WithObserver(r))
			q := g.NewQueue(QueueConfig{Name: "test"})
			t.Cleanup(q.ShutDown)
			tc.run(t, g, q)
			if got := r.take(); !slices.Equal(got, tc.want) {
				t.Errorf("observer calls %q, want %q", got, tc.want)
			}
		})
	}
}

// TestKeyContextPartition: a reconcile's context names its key's partition, so that its
// requests' wait in the client's rate limiter is the partition's; other contexts name none.
func TestKeyContextPartition(t *testing.T) {
	tests := []struct {
		name   string
		key    string
		want   partition.ID
		wantOK bool
	}{
		{name: "namespaced key", key: "ns3/x", want: 3, wantOK: true},
		{name: "namespace name key", key: "ns4", want: 4, wantOK: true},
		{name: "key of a partition not held", key: "ns5/y", want: 5, wantOK: true},
		{name: "malformed key", key: "ns3/a/b"},
	}
	_, q := newTestQueue(t, 3, 4)
	if _, ok := PartitionFrom(context.Background()); ok {
		t.Error("a context never marked names a partition")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := q.KeyContext(context.Background(), tc.key)
			defer cancel()
			p, ok := PartitionFrom(ctx)
			if p != tc.want || ok != tc.wantOK {
				t.Errorf("PartitionFrom(KeyContext(%q)) = %d, %t; want %d, %t", tc.key, p, ok, tc.want, tc.wantOK)
			}
		})
	}
}

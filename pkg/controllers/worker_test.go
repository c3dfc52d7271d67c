package controllers

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// boundedQueue is a queue whose keys' contexts end when their partition is taken away,
// like the shard's: keys in revoked get a cancelled context.
type boundedQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	revoked map[string]bool
}

func (q boundedQueue) KeyContext(parent context.Context, key string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if q.revoked[key] {
		cancel()
	}
	return ctx, cancel
}

// TestRunWorkersBoundsEachKey: the worker loop runs each reconcile under the context the
// queue gives its key, so a shard can stop work it no longer owns without the controller
// knowing; a plain queue leaves the context alone.
func TestRunWorkersBoundsEachKey(t *testing.T) {
	tests := []struct {
		name       string
		bounded    bool
		key        string
		wantCancel bool
	}{
		{name: "plain queue", key: "ns/a"},
		{name: "bounded queue, key held", bounded: true, key: "ns/a"},
		{name: "bounded queue, key revoked", bounded: true, key: "gone/a", wantCancel: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q workqueue.TypedRateLimitingInterface[string] = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
			if tc.bounded {
				q = boundedQueue{TypedRateLimitingInterface: q, revoked: map[string]bool{"gone/a": true}}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			seen := make(chan bool, 1)
			q.Add(tc.key)
			go RunWorkers(ctx, "test", q, 1, func(ctx context.Context, key string) error {
				seen <- ctx.Err() != nil
				return nil
			}, nil)
			select {
			case got := <-seen:
				if got != tc.wantCancel {
					t.Fatalf("reconcile context cancelled = %v, want %v", got, tc.wantCancel)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("key never reconciled")
			}
		})
	}
}

package controllers

import (
	"context"
	"errors"
	"fmt"
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

// recordingQueue records how a failed or waiting key was queued again.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	after       chan time.Duration
	rateLimited chan string
	forgotten   chan string
}

func (q *recordingQueue) AddAfter(key string, d time.Duration) { q.after <- d }
func (q *recordingQueue) AddRateLimited(key string)            { q.rateLimited <- key }
func (q *recordingQueue) Forget(key string)                    { q.forgotten <- key }

// TestRunWorkersRequeue: a sync that fails is queued again rate-limited; one that returns
// a RequeueAfterError (also wrapped) is queued after its delay, neither rate-limited nor
// forgotten; a QuietRetryError is queued again rate-limited, as a failure but not logged as
// one; one that succeeds is forgotten.
func TestRunWorkersRequeue(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantAfter   time.Duration
		wantLimited bool
		wantForget  bool
	}{
		{name: "success", wantForget: true},
		{name: "failure", err: errors.New("boom"), wantLimited: true},
		{name: "wait", err: &RequeueAfterError{After: 8 * time.Second, Reason: "content remains"}, wantAfter: 8 * time.Second},
		{name: "wrapped wait", err: fmt.Errorf("ns: %w", &RequeueAfterError{After: time.Second}), wantAfter: time.Second},
		{name: "quiet retry", err: QuietRetryError{Err: errors.New("owner not observed yet")}, wantLimited: true},
		{name: "wrapped quiet retry", err: fmt.Errorf("item: %w", QuietRetryError{Err: errors.New("kind not served yet")}), wantLimited: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &recordingQueue{
				TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
				after:                      make(chan time.Duration, 1), rateLimited: make(chan string, 1), forgotten: make(chan string, 1),
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			q.Add("ns")
			go RunWorkers(ctx, "test", q, 1, func(context.Context, string) error { return tc.err }, nil)
			select {
			case d := <-q.after:
				if d != tc.wantAfter {
					t.Errorf("AddAfter %v, want %v", d, tc.wantAfter)
				}
			case <-q.rateLimited:
				if !tc.wantLimited {
					t.Error("AddRateLimited, want not")
				}
			case <-q.forgotten:
				if !tc.wantForget {
					t.Error("Forget, want not")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("key never reconciled")
			}
		})
	}
}

// requeuedQueue is a queue whose key has failed retries times already.
type requeuedQueue struct {
	*recordingQueue
	retries int
}

func (q requeuedQueue) NumRequeues(string) int { return q.retries }

// TestProcessNextMaxRetries: with MaxRetries(n), a key that failed n times in a row is
// dropped (forgotten, not queued again) as upstream's handleErr does; below n, and without
// the option, it is retried rate-limited.
func TestProcessNextMaxRetries(t *testing.T) {
	tests := []struct {
		name        string
		opts        []WorkerOption
		retries     int
		err         error
		wantDropped bool
	}{
		{name: "no limit, many retries", retries: 100, err: errors.New("boom")},
		{name: "below the limit", opts: []WorkerOption{MaxRetries(15)}, retries: 14, err: errors.New("boom")},
		{name: "at the limit", opts: []WorkerOption{MaxRetries(15)}, retries: 15, err: errors.New("boom"), wantDropped: true},
		{name: "zero is no limit", opts: []WorkerOption{MaxRetries(0)}, retries: 15, err: errors.New("boom")},
		{name: "a wait is not a failure", opts: []WorkerOption{MaxRetries(1)}, retries: 5,
			err: &RequeueAfterError{After: time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rq := &recordingQueue{
				TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
				after:                      make(chan time.Duration, 1), rateLimited: make(chan string, 1), forgotten: make(chan string, 1),
			}
			q := requeuedQueue{recordingQueue: rq, retries: tc.retries}
			q.Add("ns/a")
			if !ProcessNext(context.Background(), "test", q, func(context.Context, string) error { return tc.err }, nil, tc.opts...) {
				t.Fatal("ProcessNext reported a shut-down queue")
			}
			dropped := len(rq.forgotten) == 1 && len(rq.rateLimited) == 0 && len(rq.after) == 0
			if dropped != tc.wantDropped {
				t.Fatalf("dropped = %v (forgotten %d, rate-limited %d, after %d), want %v",
					dropped, len(rq.forgotten), len(rq.rateLimited), len(rq.after), tc.wantDropped)
			}
		})
	}
}

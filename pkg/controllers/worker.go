package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// quietRetries is how many times in a row a key may fail before it is logged as an error.
const quietRetries = 5

// SyncFunc reconciles one key. An error retries the key with the queue's backoff.
type SyncFunc func(ctx context.Context, key string) error

// RequeueAfterError is what a sync returns when its key has to be worked again after
// After, not because it failed but because it waits for something (the namespace
// controller for content being deleted). RunWorkers queues the key with AddAfter, neither
// with the failure backoff nor forgetting it (its failure count keeps growing only with
// real failures), and does not log it as a failure.
type RequeueAfterError struct {
	After  time.Duration
	Reason string
}

func (e *RequeueAfterError) Error() string {
	return fmt.Sprintf("requeue after %s: %s", e.After, e.Reason)
}

// QuietRetryError is what a sync returns for an expected retry that is not a failure worth
// an error log: RunWorkers requeues the key rate-limited (with the failure backoff) and
// logs it at level 5 only, never as a failure (the garbage collector's owner of a kind
// not served yet, or a virtual node not observed yet: upstream's quiet retries).
type QuietRetryError struct{ Err error }

func (e QuietRetryError) Error() string { return e.Err.Error() }

func (e QuietRetryError) Unwrap() error { return e.Err }

// WorkerOption changes RunWorkers' and ProcessNext's retry policy for one controller.
type WorkerOption func(*workerOptions)

type workerOptions struct {
	maxRetries int
}

// MaxRetries makes a key that failed n times in a row be dropped (its backoff forgotten,
// the error logged) instead of retried, as the kube-controller-manager controllers that
// give up after a number of retries do (the EndpointSlice controller after 15): the key
// is worked again on its next event or resync. n ≤ 0 retries forever, the default.
func MaxRetries(n int) WorkerOption {
	return func(o *workerOptions) { o.maxRetries = n }
}

func applyWorkerOptions(opts []WorkerOption) workerOptions {
	var o workerOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// keyContexter is a queue that bounds each key's reconcile with a context of its own: the
// shard's queues end it when the key's namespace is taken away, so that a reconcile of
// work the process no longer owns stops instead of running on.
type keyContexter interface {
	KeyContext(parent context.Context, key string) (context.Context, context.CancelFunc)
}

// RunWorkers is the loop every controller shares (sample-controller's Run → runWorker →
// processNextWorkItem), so the retry policy lives in one place: success forgets the key's
// backoff, an error requeues it rate-limited (or drops it after MaxRetries). It blocks
// until ctx ends, then shuts the queue down and waits for the workers.
func RunWorkers(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string], workers int,
	syncFn SyncFunc, metrics *ReconcileMetrics, opts ...WorkerOption) {
	defer utilruntime.HandleCrash()
	log := klog.FromContext(ctx).WithValues("controller", name)
	ctx = klog.NewContext(ctx, log)
	log.Info("starting workers", "workers", workers)
	metrics.Init(name)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for ProcessNext(ctx, name, queue, syncFn, metrics, opts...) {
				}
			}, time.Second)
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	log.Info("workers stopped")
}

// ProcessNext is one worker step of RunWorkers: it takes a key from queue, syncs it and
// applies the retry policy; false once the queue is shut down. Tests that drive a
// controller's queue item by item call it (metrics may be nil; the logger is ctx's).
func ProcessNext(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string],
	syncFn SyncFunc, metrics *ReconcileMetrics, opts ...WorkerOption) bool {
	log := klog.FromContext(ctx)
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if kc, ok := queue.(keyContexter); ok {
		var cancel context.CancelFunc
		ctx, cancel = kc.KeyContext(ctx, key)
		defer cancel()
	}
	start := time.Now()
	err := syncFn(ctx, key)
	metrics.Observe(name, start, ignoreRequeue(err))
	if err == nil {
		queue.Forget(key)
		return true
	}
	if requeue := (*RequeueAfterError)(nil); errors.As(err, &requeue) {
		log.V(4).Info("requeued to wait", "key", key, "after", requeue.After, "reason", requeue.Reason)
		queue.AddAfter(key, requeue.After)
		return true
	}
	if quiet := (QuietRetryError{}); errors.As(err, &quiet) {
		log.V(5).Info("requeued", "key", key, "reason", err.Error())
		queue.AddRateLimited(key)
		return true
	}
	retries := queue.NumRequeues(key)
	if o := applyWorkerOptions(opts); o.maxRetries > 0 && retries >= o.maxRetries {
		utilruntime.HandleErrorWithContext(ctx, err, "sync failed too often; dropping the key until its next event", "key", key, "retries", retries)
		queue.Forget(key)
		return true
	}
	// A few failures are routine (a conflict with a lagging cache, a cache that has not yet
	// seen the controller's own writes) and are retried quietly; a key that keeps failing
	// is reported as an error. Either way it is retried with backoff, never dropped.
	if retries < quietRetries {
		log.V(2).Info("sync failed; retrying with backoff", "key", key, "err", err.Error(), "retries", retries)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "sync keeps failing; retrying with backoff", "key", key, "retries", retries)
	}
	queue.AddRateLimited(key)
	return true
}

// ignoreRequeue returns err, or nil for a RequeueAfterError or a QuietRetryError (a wait,
// not a failure).
func ignoreRequeue(err error) error {
	if requeue := (*RequeueAfterError)(nil); errors.As(err, &requeue) {
		return nil
	}
	if quiet := (QuietRetryError{}); errors.As(err, &quiet) {
		return nil
	}
	return err
}

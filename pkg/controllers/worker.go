package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
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

// keyContexter is a queue that bounds each key's reconcile with a context of its own: the
// shard's queues end it when the key's namespace is taken away, so that a reconcile of
// work the process no longer owns stops instead of running on.
type keyContexter interface {
	KeyContext(parent context.Context, key string) (context.Context, context.CancelFunc)
}

// RunWorkers is the loop every controller shares (sample-controller's Run → runWorker →
// processNextWorkItem), so the retry policy lives in one place: success forgets the key's
// backoff, an error requeues it rate-limited. It blocks until ctx ends, then shuts the
// queue down and waits for the workers.
func RunWorkers(ctx context.Context, name string, queue workqueue.TypedRateLimitingInterface[string], workers int,
	syncFn SyncFunc, metrics *ReconcileMetrics) {
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
				for processNext(ctx, log, name, queue, syncFn, metrics) {
				}
			}, time.Second)
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
	log.Info("workers stopped")
}

func processNext(ctx context.Context, log logr.Logger, name string, queue workqueue.TypedRateLimitingInterface[string],
	syncFn SyncFunc, metrics *ReconcileMetrics) bool {
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
	// A few failures are routine (a conflict with a lagging cache, a cache that has not yet
	// seen the controller's own writes) and are retried quietly; a key that keeps failing
	// is reported as an error. Either way it is retried with backoff, never dropped.
	if retries := queue.NumRequeues(key); retries < quietRetries {
		log.V(2).Info("sync failed; retrying with backoff", "key", key, "err", err.Error(), "retries", retries)
	} else {
		utilruntime.HandleErrorWithContext(ctx, err, "sync keeps failing; retrying with backoff", "key", key, "retries", retries)
	}
	queue.AddRateLimited(key)
	return true
}

// ignoreRequeue returns err, or nil for a RequeueAfterError (a wait, not a failure).
func ignoreRequeue(err error) error {
	if requeue := (*RequeueAfterError)(nil); errors.As(err, &requeue) {
		return nil
	}
	return err
}

package shardcache

// Optional informers: those of resources found by discovery (a CRD, an aggregated API),
// which the shard serves to the controllers that act on every resource. An aggregated API
// whose backend is down, or a CRD whose conversion webhook fails, must not stop the shard
// from taking and working partitions (kube-controller-manager's garbage collector and
// quota controller go on without such a resource too). It keeps:
//   - A resource is failing from the moment one of its lists returns an error (not a
//     cancellation) until one succeeds; every list of it, the informer's own and each
//     warm-up's, goes through its ResourceType.List, so every list counts.
//   - Nothing waits for a failing optional informer: the first start, Prepare, warm-ups,
//     Refresh and readiness treat it as synced. Its lists go on retrying in the
//     background, and a warm-up whose list succeeds later is merged as usual.
//   - A healthy optional informer is waited for as any other: a controller reading it
//     sees the partition whole.
//   - Every change of state is logged once (Warning: "failing" with the error; Info:
//     "recovered"), and kshard_shard_cache_resource_failing{resource} is 1 while failing.

import (
	"context"
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// health is the list state of one optional informer.
type health struct {
	name   string
	logger func() klog.Logger

	mu      sync.Mutex
	failing bool
	since   time.Time
	lastErr error
}

// wrap returns list, recording each call's outcome in h.
func (h *health) wrap(list func(context.Context, kubernetes.Interface, string, metav1.ListOptions) (runtime.Object, error)) func(context.Context, kubernetes.Interface, string, metav1.ListOptions) (runtime.Object, error) {
	return func(ctx context.Context, client kubernetes.Interface, ns string, opts metav1.ListOptions) (runtime.Object, error) {
		obj, err := list(ctx, client, ns, opts)
		h.record(ctx, err)
		return obj, err
	}
}

// record notes a list's outcome: an error other than the caller's cancellation makes the
// resource failing, a success makes it healthy.
func (h *health) record(ctx context.Context, err error) {
	if err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)) {
		return
	}
	h.mu.Lock()
	was := h.failing
	h.failing = err != nil
	h.lastErr = err
	if h.failing != was {
		h.since = time.Now()
	}
	h.mu.Unlock()
	switch {
	case err != nil && !was:
		h.logger().Error(err, "Listing an optional resource fails: the shard no longer waits for it; its objects are missing from the cache until a list succeeds", "resource", h.name)
	case err == nil && was:
		h.logger().Info("Optional resource lists again", "resource", h.name)
	}
}

// isFailing reports whether the last list failed.
func (h *health) isFailing() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing
}

// optionalLocked makes rt's lists record their outcome when rt is Optional, and returns
// rt and its health (nil for a required type). c.mu must be held.
func (c *Cache) optionalLocked(rt ResourceType) (ResourceType, *health) {
	if !rt.Optional {
		return rt, nil
	}
	h := &health{name: rt.Name(), logger: c.logger}
	rt.List = h.wrap(rt.List)
	c.health[rt.Key()] = h
	return rt, h
}

// syncedOrFailing is inf's HasSynced, true also while h's resource is failing: what the
// cache waits for.
func syncedOrFailing(inf toolscache.SharedIndexInformer, h *health) toolscache.InformerSynced {
	if h == nil {
		return inf.HasSynced
	}
	return func() bool { return isSyncedOrFailing(inf, h) }
}

// isSyncedOrFailing is syncedOrFailing's answer now.
func isSyncedOrFailing(inf toolscache.SharedIndexInformer, h *health) bool {
	return inf.HasSynced() || (h != nil && h.isFailing())
}

// healthList returns the health of every optional informer.
func (c *Cache) healthList() []*health {
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := make([]*health, 0, len(c.health))
	for _, h := range c.health {
		hs = append(hs, h)
	}
	return hs
}

// ListsFailing reports whether key is an optional informer whose lists fail now.
func (c *Cache) ListsFailing(key Key) bool {
	c.mu.Lock()
	h := c.health[key]
	c.mu.Unlock()
	return h.isFailing()
}

// Failing returns the optional resources whose lists fail now, by name, with the
// error of the last list.
func (c *Cache) Failing() map[string]error {
	out := map[string]error{}
	for _, h := range c.healthList() {
		h.mu.Lock()
		if h.failing {
			out[h.name] = h.lastErr
		}
		h.mu.Unlock()
	}
	return out
}

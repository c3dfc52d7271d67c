package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// RemoteDependents is the seam of the cross-shard barrier (docs/architecture.md, "The
// garbage collector across shards").
// A cluster-scoped owner's dependents may live in namespaces other shards work, which
// this shard's graph does not hold; removing the owner's foregroundDeletion finalizer
// when the local graph shows no blocking dependent, or its orphan finalizer when the
// local dependents are orphaned, could then let the owner go before remote dependents
// are deleted (foreground) or, worse, before their references are removed, so that
// their shards collect them as dangling instead of orphaning them.
//
// The controller asks Pending before it removes either finalizer from a cluster-scoped
// owner, and only then; namespaced owners never ask (their dependents share their
// namespace, so their shard).
type RemoteDependents interface {
	// Pending reports whether dependents outside this shard's scope may still hold a
	// reference to owner that keeps finalizer in place: a blocking reference for
	// metav1.FinalizerDeleteDependents, any reference for metav1.FinalizerOrphanDependents.
	// true makes the owner wait (its key is worked again later); an error retries it
	// with backoff.
	Pending(ctx context.Context, owner metav1.OwnerReference, finalizer string) (bool, error)
}

// sweepPageSize is the page size of a sweep's lists.
const sweepPageSize = 500

// sweepResourceTimeout bounds the list of one resource in a sweep (every page of it):
// a sweep's lists run for every caller that joined it, so they are not bound by any one
// caller's context, and a bound on the whole sweep would fail every sweep of a cluster
// with many resources.
const sweepResourceTimeout = 2 * time.Minute

// sweepMinGap is the least time between the starts of two sweeps; the gap is also at
// least twice the last sweep's duration, so that sweeps never run back to back
// (callers meanwhile join the next sweep).
const sweepMinGap = 2 * time.Second

// listFunc lists one page of a resource's objects' metadata in every namespace.
type listFunc func(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)

// sweeper is the RemoteDependents of the controller: a live sweep of every namespaced
// resource the controller is served, cluster-wide, metadata only, paginated, each list a
// consistent read (no resourceVersion), looking for objects whose owner references name
// a waiting owner's UID.
//
// Sweeps are batched: a Pending call joins the next sweep that starts after it was
// made, and one sweep answers every owner that joined it. At most one sweep runs at a
// time; callers arriving while one runs wait for the next, because a list begun before
// they asked may predate the local check that made them ask.
type sweeper struct {
	list      listFunc
	resources func() []schema.GroupVersionResource
	clock     clock.Clock
	log       logr.Logger
	// observe, when set, is told each sweep's duration and whether it was complete.
	observe func(d time.Duration, complete bool)
	// ready, when set, reports whether the shard's first discovery round is complete
	// (see Pending).
	ready func() bool
	// minGap is sweepMinGap (tests change it); resourceTimeout is sweepResourceTimeout.
	minGap          time.Duration
	resourceTimeout time.Duration

	mu sync.Mutex
	// base is the context sweeps run under: the controller's, once Run binds it.
	base context.Context
	// next gathers the owners of the sweep that starts when the running one ends (or at
	// once when none runs).
	next    *sweep
	running bool
	// lastStart and lastDuration are the last sweep's, once started is set: the next
	// starts no earlier than lastStart + max(minGap, 2 × lastDuration).
	started      bool
	lastStart    time.Time
	lastDuration time.Duration
	// sweeps counts the sweeps started, for tests.
	sweeps int
}

// sweep is one pass over every namespaced resource, for the owners that joined it.
type sweep struct {
	owners map[types.UID]struct{}
	done   chan struct{}
	// Set before done is closed.
	found map[types.UID]reference
	err   error
}

// reference is what a sweep found of one owner: whether any object references it, and
// whether any of those references blocks its deletion.
type reference struct{ any, blocking bool }

func newSweeper(list listFunc, resources func() []schema.GroupVersionResource, clk clock.Clock, log logr.Logger) *sweeper {
	return &sweeper{list: list, resources: resources, clock: clk, log: log, base: context.Background(),
		minGap: sweepMinGap, resourceTimeout: sweepResourceTimeout}
}

// bind makes sweeps end with ctx (the controller's Run), not only with
// sweepResourceTimeout.
func (s *sweeper) bind(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.base = ctx
}

// Pending joins the next sweep and answers from it: pending when an object references
// owner (with blockOwnerDeletion, for foregroundDeletion); an error when no reference
// was found but some resource could not be listed, so that a partial sweep never lets a
// finalizer go.
//
// Until the shard has handed the controller every resource it serves, a sweep could miss
// the resource holding a reference: Pending answers an error until ready says so (the
// controller's Resync has run: the shard calls it only after its first discovery round)
// and at least one namespaced resource is known.
func (s *sweeper) Pending(ctx context.Context, owner metav1.OwnerReference, finalizer string) (bool, error) {
	if s.ready != nil && !s.ready() {
		return false, errors.New("cannot tell whether dependents in other shards' namespaces still reference the owner: the shard's first discovery round is not complete")
	}
	if len(s.resources()) == 0 {
		return false, errors.New("cannot tell whether dependents in other shards' namespaces still reference the owner: no namespaced resource is known yet")
	}
	s.mu.Lock()
	if s.next == nil {
		s.next = &sweep{owners: map[types.UID]struct{}{}, done: make(chan struct{})}
	}
	sw := s.next
	sw.owners[owner.UID] = struct{}{}
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	select {
	case <-sw.done:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	ref := sw.found[owner.UID]
	if ref.blocking || (ref.any && finalizer == metav1.FinalizerOrphanDependents) {
		return true, nil
	}
	if sw.err != nil {
		return false, fmt.Errorf("cannot tell whether dependents in other shards' namespaces still reference the owner: %w", sw.err)
	}
	return false, nil
}

// run runs the sweep gathered in next, then every sweep gathered meanwhile, until none
// is waiting. Each starts no earlier than the gap after the last one's start; callers
// arriving during the wait join it.
func (s *sweeper) run() {
	for {
		s.mu.Lock()
		if s.next == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		var wait time.Duration
		if s.started {
			wait = s.lastStart.Add(max(s.minGap, 2*s.lastDuration)).Sub(s.clock.Now())
		}
		base := s.base
		s.mu.Unlock()
		if wait > 0 {
			select {
			case <-s.clock.After(wait):
			case <-base.Done():
			}
		}
		s.mu.Lock()
		sw := s.next
		s.next = nil
		s.sweeps++
		s.started, s.lastStart = true, s.clock.Now()
		s.mu.Unlock()
		d := s.do(sw)
		s.mu.Lock()
		s.lastDuration = d
		s.mu.Unlock()
		close(sw.done)
	}
}

// do lists every namespaced resource and records the references to sw's owners, and
// returns how long it took. A failing list is recorded and the sweep goes on: references
// found elsewhere still answer pending.
func (s *sweeper) do(sw *sweep) time.Duration {
	s.mu.Lock()
	base := s.base
	s.mu.Unlock()
	start := s.clock.Now()
	found := map[types.UID]reference{}
	var errs []error
	resources := s.resources()
	var objects, skipped int
	for _, gvr := range resources {
		n, skip, err := s.listResource(base, gvr, sw.owners, found)
		objects += n
		if skip {
			skipped++
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	sw.found, sw.err = found, errors.Join(errs...)
	d := s.clock.Since(start)
	if s.observe != nil {
		s.observe(d, len(errs) == 0)
	}
	s.log.V(2).Info("swept namespaced resources for references to cluster-scoped owners", "owners", len(sw.owners),
		"resources", len(resources), "objects", objects, "referenced", len(found), "failed", len(errs), "skipped", skipped, "duration", d)
	return d
}

// listResource lists every page of gvr, within resourceTimeout, and records in found the
// references to owners. A 410 Gone (an expired continue token) restarts the list from
// the beginning, once. skipped reports a resource left out: not served now.
func (s *sweeper) listResource(base context.Context, gvr schema.GroupVersionResource, owners map[types.UID]struct{},
	found map[types.UID]reference) (objects int, skipped bool, err error) {
	ctx, cancel := context.WithTimeout(klog.NewContext(base, s.log), s.resourceTimeout)
	defer cancel()
	local := map[types.UID]reference{}
	defer func() {
		for uid, r := range local {
			f := found[uid]
			f.any, f.blocking = f.any || r.any, f.blocking || r.blocking
			found[uid] = f
		}
	}()
	restarted := false
	opts := metav1.ListOptions{Limit: sweepPageSize}
	for {
		list, err := s.list(ctx, gvr, opts)
		if err != nil && ctx.Err() == nil && (apierrors.IsServiceUnavailable(err) || apierrors.IsNotFound(err)) {
			// An aggregated API that is down, or a resource no longer served: left
			// out, as upstream's graph leaves out a resource whose monitor could not
			// sync. Its objects' references are not seen; refusing every finalizer
			// while any aggregated API is down would stall every cluster-scoped
			// owner's foreground and orphan deletion.
			s.log.V(2).Info("left out of the sweep: not served now", "resource", gvr.String(), "err", err.Error())
			return objects, true, nil
		}
		if err != nil && opts.Continue != "" && !restarted && ctx.Err() == nil && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) {
			s.log.V(2).Info("continue token expired; listing again from the beginning", "resource", gvr.String(), "err", err.Error())
			restarted = true
			opts.Continue = ""
			objects = 0
			clear(local)
			continue
		}
		if err != nil {
			return objects, false, fmt.Errorf("listing %s: %w", gvr, err)
		}
		objects += len(list.Items)
		for i := range list.Items {
			for _, ref := range list.Items[i].OwnerReferences {
				if _, ok := owners[ref.UID]; ok {
					r := local[ref.UID]
					r.any = true
					r.blocking = r.blocking || isBlocking(ref)
					local[ref.UID] = r
				}
			}
		}
		if list.Continue == "" {
			return objects, false, nil
		}
		opts.Continue = list.Continue
	}
}

// namespacedResources returns the namespaced resources served to the controller, sorted.
func (r *resources) namespacedResources() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, s := range r.all() {
		if s.res.Namespaced {
			out = append(out, s.res.GroupVersionResource)
		}
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionResource) int {
		switch {
		case a.String() < b.String():
			return -1
		case a.String() > b.String():
			return 1
		}
		return 0
	})
	return out
}

// Requeue delays of a cluster-scoped owner that RemoteDependents keeps pending: a
// foreground deletion should finish within seconds of its last remote dependent going,
// and a long one should not cost a sweep every second.
const (
	remoteRetryMin = time.Second
	remoteRetryMax = 30 * time.Second
)

// remoteBackoff is the per-owner requeue delay while RemoteDependents answers pending:
// remoteRetryMin, doubled at each answer up to remoteRetryMax, forgotten when the owner
// is no longer pending or leaves the graph.
type remoteBackoff struct {
	mu   sync.Mutex
	next map[types.UID]time.Duration
	// waiting, when set, is told how many owners wait.
	waiting func(n int)
}

func newRemoteBackoff() *remoteBackoff { return &remoteBackoff{next: map[types.UID]time.Duration{}} }

func (b *remoteBackoff) report() {
	if b.waiting != nil {
		b.waiting(len(b.next))
	}
}

// When returns how long uid waits now, and doubles its next wait.
func (b *remoteBackoff) When(uid types.UID) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.next[uid]
	if !ok {
		d = remoteRetryMin
	}
	b.next[uid] = min(2*d, remoteRetryMax)
	b.report()
	return d
}

// Forget resets uid's wait.
func (b *remoteBackoff) Forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.next[uid]; ok {
		delete(b.next, uid)
		b.report()
	}
}

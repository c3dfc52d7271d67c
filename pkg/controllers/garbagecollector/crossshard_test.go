package garbagecollector

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// The tests of the cross-shard barrier (doc.go, "Across shards"). A fixture stands for
// one shard; objects in the fixture's API server that it does not observe are in other
// shards' namespaces ("remote"): only the sweep's lists see them. The gate is played by
// the test, which works only the keys the shard would be admitted.

// finalizers returns o's finalizers as stored.
func (f *fixture) finalizers(o *metav1.PartialObjectMetadata) []string {
	f.t.Helper()
	s := f.stored(o)
	if s == nil {
		f.t.Fatalf("%s is not stored", o.Name)
	}
	return s.Finalizers
}

// wait works key with sync, as the cluster partition's holder, and returns the wait
// the worker would requeue it after ("" when none); another error fails the test.
func (f *fixture) wait(sync func(context.Context, string) error, key string) string {
	f.t.Helper()
	err := sync(f.ctx(), key)
	f.drainGraph()
	var requeue *controllers.RequeueAfterError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &requeue):
		return requeue.After.String()
	}
	f.t.Fatalf("%s: %v", key, err)
	return ""
}

// hasOwnerRef reports whether o, as stored, references owner.
func (f *fixture) hasOwnerRef(o, owner *metav1.PartialObjectMetadata) bool {
	s := f.stored(o)
	return s != nil && slices.ContainsFunc(s.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == owner.UID })
}

func TestCrossShardForegroundDependentsShard(t *testing.T) {
	// This shard does not hold the cluster partition: the owner's key is dropped by the
	// gate, its own dependents' keys are worked here.
	n := object(nodes, "", "n", "n-1")
	tests := []struct {
		name string
		// before are observed before the owner's transition, after it.
		before, after []*metav1.PartialObjectMetadata
		wantQueued    []string
		wantWrites    []string
	}{
		{
			name:       "dependents in this shard's namespace are queued by the owner's transition and deleted",
			before:     []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(n, true)), object(pods, "ns", "q", "q-1", ownedBy(n, false))},
			wantQueued: []string{"n-1", "ns/p-1", "ns/q-1"},
			wantWrites: []string{"delete pods ns/p Background", "delete pods ns/q Background"},
		},
		{
			name:       "a dependent that reaches the graph after the transition is queued too",
			after:      []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(n, true))},
			wantQueued: []string{"n-1", "ns/p-1"},
			wantWrites: []string{"delete pods ns/p Background"},
		},
		{
			name:       "a dependent with dependents of its own is deleted in the foreground",
			before:     []*metav1.PartialObjectMetadata{object(replicaSets, "ns", "rs", "rs-1", ownedBy(n, true)), object(pods, "ns", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))},
			wantQueued: []string{"n-1", "ns/rs-1"},
			wantWrites: []string{"delete replicasets ns/rs Foreground"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newShard(t, nil)
			f.exists(n)
			f.exists(tt.before...)
			f.deleteQ.Keys()
			f.startDeletion(n, metav1.FinalizerDeleteDependents)
			f.exists(tt.after...)
			keys := f.deleteQ.Keys()
			equal(t, "attemptToDelete", keys, tt.wantQueued)
			for _, k := range keys {
				if ns, _ := parseKey(k); ns == "" {
					continue // the cluster partition is not held here
				}
				if err := f.syncDelete(k); err != nil {
					t.Errorf("%s: %v", k, err)
				}
			}
			got := f.writes()
			slices.Sort(got)
			equal(t, "writes", got, tt.wantWrites)
		})
	}
}

func TestCrossShardForeground(t *testing.T) {
	n := object(nodes, "", "n", "n-1")
	tests := []struct {
		name string
		// local are observed by the cluster partition's holder; remote are only in the
		// API server.
		local, remote []*metav1.PartialObjectMetadata
		// wantWaits are the requeue delays asked while remote dependents stay (one per
		// round, after which the test works the key again).
		wantWaits []string
	}{
		{
			name:      "a remote blocking dependent holds the finalizer until it is gone",
			local:     []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(n, true))},
			remote:    []*metav1.PartialObjectMetadata{object(pods, "remote", "r", "r-1", ownedBy(n, true))},
			wantWaits: []string{"1s", "2s", "4s"},
		},
		{
			name:   "a remote non-blocking dependent does not hold it",
			local:  []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(n, true))},
			remote: []*metav1.PartialObjectMetadata{object(replicaSets, "remote", "r", "r-1", ownedBy(n, false))},
		},
		{
			name:      "only remote dependents",
			remote:    []*metav1.PartialObjectMetadata{object(replicaSets, "remote", "r", "r-1", ownedBy(n, true))},
			wantWaits: []string{"1s"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newShard(t, nil)
			f.exists(n)
			f.exists(tt.local...)
			f.live(tt.remote...)
			f.deleteQ.Keys()
			d := f.startDeletion(n, metav1.FinalizerDeleteDependents)
			// The local dependents go first, as upstream.
			for range 3 {
				for _, k := range f.deleteQ.Keys() {
					if k == "n-1" {
						continue // worked below, through the retry policy
					}
					if err := f.syncDelete(k); err != nil {
						t.Errorf("%s: %v", k, err)
					}
				}
				f.observeGone(tt.local...)
			}
			for _, o := range tt.local {
				if f.stored(o) != nil {
					t.Fatalf("local dependent %s not deleted", o.Name)
				}
			}
			var waits []string
			for range tt.wantWaits {
				waits = append(waits, f.wait(f.ctrl.syncDelete, "n-1"))
				if !slices.Contains(f.finalizers(d), metav1.FinalizerDeleteDependents) {
					t.Fatal("the finalizer went while a remote blocking dependent exists")
				}
			}
			equal(t, "waits", waits, tt.wantWaits)
			if got := testutil.ToFloat64(f.ctrl.gcm.CrossPartitionWaitingOwners); got != float64(min(len(tt.wantWaits), 1)) {
				t.Errorf("waiting owners %v while the remote dependents stay", got)
			}
			// The remote dependents' shards delete them.
			for _, o := range tt.remote {
				if isBlocking(o.OwnerReferences[0]) {
					if err := f.meta.Tracker().Delete(resourceOf(o).GroupVersionResource, o.Namespace, o.Name); err != nil {
						t.Fatal(err)
					}
				}
			}
			if w := f.wait(f.ctrl.syncDelete, "n-1"); w != "" {
				t.Errorf("requeued after %v once no blocking dependent is left", w)
			}
			if fins := f.finalizers(d); len(fins) != 0 {
				t.Errorf("finalizers %q; want foregroundDeletion removed", fins)
			}
			if got := testutil.ToFloat64(f.ctrl.gcm.CrossPartitionWaitingOwners); got != 0 {
				t.Errorf("waiting owners %v once done", got)
			}
			if got := testutil.ToFloat64(f.ctrl.gcm.CrossPartitionSweeps.WithLabelValues("complete")); got != float64(len(tt.wantWaits)+1) {
				t.Errorf("%v complete sweeps; want one per wait and the last", got)
			}
		})
	}
}

func TestCrossShardOrphan(t *testing.T) {
	// Two shards share the API server: sc holds the cluster partition and namespace
	// "a", other holds namespace "b". Both observe the cluster-scoped owner.
	n := object(nodes, "", "n", "n-1")
	p := object(pods, "a", "p", "p-1", ownedBy(n, true))
	q := object(pods, "b", "q", "q-1", ownedBy(n, false))
	rs := object(replicaSets, "b", "rs", "rs-1", ownedBy(n, true), ref("apps/v1", "Deployment", "d", "d-1"))
	d := object(deployments, "b", "d", "d-1")
	sc := newShard(t, nil)
	other := newShard(t, sc.meta)
	sc.exists(n, p)
	other.observe(n)
	other.exists(q, d, rs)
	sc.deleteQ.Keys()
	other.deleteQ.Keys()

	deleted := sc.startDeletion(n, metav1.FinalizerOrphanDependents)
	other.observe(deleted)
	equal(t, "sc's attemptToOrphan", sc.orphanQ.Keys(), []string{"a/p-1", "n-1"})
	equal(t, "other's attemptToOrphan", other.orphanQ.Keys(), []string{"b/q-1", "b/rs-1", "n-1"})

	// sc works the owner first: its own dependent is orphaned, other's still reference
	// the owner, so the finalizer stays.
	if w := sc.wait(sc.ctrl.syncOrphan, "n-1"); w != "1s" {
		t.Errorf("owner requeued after %q; want a wait of 1s", w)
	}
	if !slices.Contains(sc.finalizers(n), metav1.FinalizerOrphanDependents) {
		t.Fatal("the orphan finalizer went while a dependent in another shard's namespace references the owner")
	}
	if sc.hasOwnerRef(p, n) {
		t.Error("sc's own dependent still references the owner")
	}
	// sc also works its dependent's key (a repeat of the owner's patch, harmless).
	if err := sc.syncOrphan("a/p-1"); err != nil {
		t.Error(err)
	}

	// The other shard orphans its dependents (not the owner: the gate drops "n-1").
	for _, k := range []string{"b/q-1", "b/rs-1"} {
		if err := other.syncOrphan(k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	for _, o := range []*metav1.PartialObjectMetadata{q, rs} {
		if other.hasOwnerRef(o, n) {
			t.Errorf("%s still references the owner", o.Name)
		}
	}
	if !other.hasOwnerRef(rs, d) {
		t.Error("rs lost its reference to its other owner")
	}
	if !slices.Contains(sc.finalizers(n), metav1.FinalizerOrphanDependents) {
		t.Fatal("the other shard removed the owner's finalizer")
	}

	// sc works the owner again: no reference is left anywhere, the finalizer goes.
	if w := sc.wait(sc.ctrl.syncOrphan, "n-1"); w != "" {
		t.Errorf("requeued after %v once no reference is left", w)
	}
	if fins := sc.finalizers(n); slices.Contains(fins, metav1.FinalizerOrphanDependents) {
		t.Errorf("finalizers %q; want orphan removed", fins)
	}
	for _, o := range []*metav1.PartialObjectMetadata{p, q, rs} {
		if sc.stored(o) == nil {
			t.Errorf("%s was deleted; want it orphaned", o.Name)
		}
	}
}

func TestCrossShardOrphanLateDependent(t *testing.T) {
	// A dependent that reaches a shard's graph after its cluster-scoped owner started
	// orphaning, while the partition was warmed (its key dropped by the gate), is queued
	// again by Resync once the partition is held.
	n := object(nodes, "", "n", "n-1")
	q := object(pods, "b", "q", "q-1", ownedBy(n, false))
	tests := []struct {
		name string
		// worked: the dependent's key was worked (and its reference removed) before.
		resync     controllers.Scope
		wantQueued []string
	}{
		{name: "queued on arrival and, once dropped, by the resync of its namespace", resync: controllers.Scope{Namespaces: []string{"b"}}, wantQueued: []string{"b/q-1"}},
		{name: "not by the resync of another namespace", resync: controllers.Scope{Namespaces: []string{"c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newShard(t, nil)
			f.exists(n)
			f.startDeletion(n, metav1.FinalizerOrphanDependents)
			f.orphanQ.Keys()
			f.exists(q)
			equal(t, "attemptToOrphan on arrival", f.orphanQ.Keys(), []string{"b/q-1"})
			f.ctrl.Resync(tt.resync)
			f.drainGraph()
			keys := f.orphanQ.Keys()
			equal(t, "attemptToOrphan after the resync", keys, tt.wantQueued)
			for _, k := range keys {
				if err := f.syncOrphan(k); err != nil {
					t.Fatal(err)
				}
			}
			if len(keys) > 0 && f.hasOwnerRef(q, n) {
				t.Error("the dependent still references the owner")
			}
		})
	}
}

func TestCrossShardPartialSweep(t *testing.T) {
	// A resource that cannot be listed for now (the API server sheds load) keeps the
	// finalizer: the owner is retried with backoff, not let go.
	n := object(nodes, "", "n", "n-1")
	tests := []struct {
		name      string
		finalizer string
		queue     string
	}{
		{name: "foreground", finalizer: metav1.FinalizerDeleteDependents, queue: attemptToDeleteQueue},
		{name: "orphan", finalizer: metav1.FinalizerOrphanDependents, queue: attemptToOrphanQueue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newShard(t, nil)
			f.meta.PrependReactor("list", "replicasets", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewTooManyRequests("the API server sheds load", 1)
			})
			f.exists(n)
			d := f.startDeletion(n, tt.finalizer)
			f.deleteQ.Keys()
			f.orphanQ.Keys()
			q, sync := f.deleteQ, f.ctrl.syncDelete
			if tt.queue == attemptToOrphanQueue {
				q, sync = f.orphanQ, f.ctrl.syncOrphan
			}
			q.Add("n-1")
			controllers.ProcessNext(klog.NewContext(f.ctx(), controllertest.Logger(t)), tt.queue, q, sync, nil)
			equal(t, "rate-limited", q.RateLimited(), []string{"n-1"})
			if _, ok := q.After("n-1"); ok {
				t.Error("a failed sweep was taken for a pending answer")
			}
			if !slices.Contains(f.finalizers(d), tt.finalizer) {
				t.Error("the finalizer went on a partial sweep")
			}
			if got := testutil.ToFloat64(f.ctrl.gcm.CrossPartitionSweeps.WithLabelValues("failed")); got != 1 {
				t.Errorf("%v failed sweeps; want 1", got)
			}
		})
	}
}

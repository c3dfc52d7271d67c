package garbagecollector

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kshard/kshard/pkg/controllers"
)

func TestAttemptToDelete(t *testing.T) {
	rs := object(replicaSets, "ns", "rs", "rs-1")
	ghost := object(replicaSets, "ns", "ghost", "ghost-1")
	tests := []struct {
		name string
		// live objects are in the API server only; observed ones in the graph too.
		live, observed []*metav1.PartialObjectMetadata
		// then runs after the objects are observed, before the queues are worked.
		then       func(f *fixture)
		wantWrites []string
		// wantGETs are GETs that must have been sent (others may be).
		wantGETs []string
		// wantNotGETs must not have been sent.
		wantNotGETs []string
		wantEvents  []string
	}{
		{
			name:       "owner never existed: its virtual node is checked live, then the dependent, which is deleted in the background",
			observed:   []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true))},
			wantWrites: []string{"delete pods ns/p Background"},
			wantGETs:   []string{"replicasets ns/rs", "pods ns/p"},
		},
		{
			name:     "owner deleted: the dependent is deleted after a live GET of itself, the owner known absent from its delete event",
			observed: []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p", "p-1", ownedBy(rs, true))},
			then: func(f *fixture) {
				f.deleteQ.Keys()
				if err := f.meta.Tracker().Delete(replicaSets.GroupVersionResource, "ns", "rs"); err != nil {
					t.Fatal(err)
				}
				f.gone(rs)
			},
			wantWrites:  []string{"delete pods ns/p Background"},
			wantGETs:    []string{"pods ns/p"},
			wantNotGETs: []string{"replicasets ns/rs"},
		},
		{
			name:     "owner observed: solid from the graph, nothing is read or written",
			observed: []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p", "p-1", ownedBy(rs, true))},
			then: func(f *fixture) {
				if err := f.syncDelete("ns/p-1"); err != nil {
					t.Fatal(err)
				}
			},
			wantNotGETs: []string{"pods ns/p", "replicasets ns/rs"},
		},
		{
			name:     "owner present, observed after its dependent: solid from the graph, nothing is read",
			observed: []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true)), rs},
			then: func(f *fixture) {
				if err := f.syncDelete("ns/rs-1"); err != nil { // the virtual node's key, queued
					t.Fatal(err)
				}
			},
			wantNotGETs: []string{"replicasets ns/rs"},
		},
		{
			name:     "owner present, not observed: read live, solid, nothing is written",
			live:     []*metav1.PartialObjectMetadata{rs},
			observed: []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true))},
			then: func(f *fixture) {
				if err := f.syncDelete("ns/p-1"); err != nil {
					t.Fatal(err)
				}
			},
			wantGETs: []string{"pods ns/p", "replicasets ns/rs"},
		},
		{
			name: "owner observed under another kind: read live, as upstream, and the reference is dangling",
			observed: []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p", "p-1", ref("apps/v1", "Deployment", "rs", "rs-1"),
				ownedBy(object(replicaSets, "ns", "other", "rs-2"), false))},
			live: []*metav1.PartialObjectMetadata{object(replicaSets, "ns", "other", "rs-2")},
			then: func(f *fixture) {
				if err := f.syncDelete("ns/p-1"); err != nil {
					t.Fatal(err)
				}
			},
			wantGETs:   []string{"pods ns/p"},
			wantWrites: []string{`patch pods ns/p strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"rs-1"}],"uid":"p-1"}}`},
		},
		{
			name:     "owner observed and being deleted: read live",
			observed: []*metav1.PartialObjectMetadata{object(replicaSets, "ns", "rs", "rs-1", deleting("example.com/hold")), object(pods, "ns", "p", "p-1", ownedBy(rs, false))},
			then: func(f *fixture) {
				if err := f.syncDelete("ns/p-1"); err != nil {
					t.Fatal(err)
				}
			},
			wantGETs: []string{"pods ns/p", "replicasets ns/rs"},
		},
		{
			name:     "one owner present, one gone: the dangling reference is patched out with a strategic merge patch",
			observed: []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p", "p-1", ownedBy(rs, true), ownedBy(ghost, false))},
			wantWrites: []string{
				`patch pods ns/p strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"ghost-1"}],"uid":"p-1"}}`,
			},
		},
		{
			name:       "owner UID mismatch: an object of the owner's name with another UID does not own it",
			live:       []*metav1.PartialObjectMetadata{object(replicaSets, "ns", "rs", "rs-2")},
			observed:   []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true))},
			wantWrites: []string{"delete pods ns/p Background"},
		},
		{
			name:       "a dependent with the orphan finalizer is deleted with Orphan propagation",
			observed:   []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true), func(o *metav1.PartialObjectMetadata) { o.Finalizers = []string{metav1.FinalizerOrphanDependents} })},
			wantWrites: []string{"delete pods ns/p Orphan"},
		},
		{
			name:       "a dependent with the foregroundDeletion finalizer is deleted with Foreground propagation",
			observed:   []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true), func(o *metav1.PartialObjectMetadata) { o.Finalizers = []string{metav1.FinalizerDeleteDependents} })},
			wantWrites: []string{"delete pods ns/p Foreground"},
		},
		{
			name:       "reference of the wrong kind to an observed owner's UID: verified under the kind it names, dangling there",
			observed:   []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p", "p-1", ref("apps/v1", "Deployment", "rs", "rs-1"))},
			wantWrites: []string{"delete pods ns/p Background"},
			wantGETs:   []string{"deployments ns/rs"},
		},
		{
			name:       "owner in another namespace: Warning OwnerRefInvalidNamespace, and the dependent is dangling in its own",
			observed:   []*metav1.PartialObjectMetadata{object(replicaSets, "a", "rs", "rs-1"), object(pods, "b", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))},
			wantWrites: []string{"delete pods b/p Background"},
			wantGETs:   []string{"replicasets b/rs"},
			wantEvents: []string{`Warning OwnerRefInvalidNamespace ownerRef [apps/v1/ReplicaSet, namespace: b, name: rs, uid: rs-1] does not exist in namespace "b"`},
		},
		{
			name:       "owner observed in another namespace after the dependent: the same event",
			observed:   []*metav1.PartialObjectMetadata{object(pods, "b", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1")), object(replicaSets, "a", "rs", "rs-1")},
			wantWrites: []string{"delete pods b/p Background"},
			wantEvents: []string{`Warning OwnerRefInvalidNamespace ownerRef [apps/v1/ReplicaSet, namespace: b, name: rs, uid: rs-1] does not exist in namespace "b"`},
		},
		{
			name:       "owner in a namespace this shard does not work: found by a lookup in every namespace, the same event",
			live:       []*metav1.PartialObjectMetadata{object(replicaSets, "a", "rs", "rs-1")},
			observed:   []*metav1.PartialObjectMetadata{object(pods, "b", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))},
			wantWrites: []string{"delete pods b/p Background"},
			wantEvents: []string{`Warning OwnerRefInvalidNamespace ownerRef [apps/v1/ReplicaSet, namespace: b, name: rs, uid: rs-1] does not exist in namespace "b"`},
		},
		{
			name:       "owner of the same name and another UID in another namespace: no event",
			live:       []*metav1.PartialObjectMetadata{object(replicaSets, "a", "rs", "rs-9")},
			observed:   []*metav1.PartialObjectMetadata{object(pods, "b", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))},
			wantWrites: []string{"delete pods b/p Background"},
		},
		{
			name:     "cluster-scoped dependent of a namespaced owner: invalid, forgotten, never collected",
			observed: []*metav1.PartialObjectMetadata{object(nodes, "", "n", "n-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))},
		},
		{
			name:     "a dependent being deleted is left to its deletion",
			observed: []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(rs, true), deleting("example.com/hold"))},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.live(tt.live...)
			f.exists(tt.observed...)
			if tt.then != nil {
				tt.then(f)
			}
			f.settle()
			equal(t, "writes", f.writes(), tt.wantWrites)
			reads := f.reads()
			for _, g := range tt.wantGETs {
				if !slices.Contains(reads, g) {
					t.Errorf("no GET of %s; GETs %q", g, reads)
				}
			}
			for _, g := range tt.wantNotGETs {
				if slices.Contains(reads, g) {
					t.Errorf("GET of %s; GETs %q", g, reads)
				}
			}
			equal(t, "events", f.events(), tt.wantEvents)
		})
	}
}

func TestAttemptToDeleteVirtualOwnerLeavesGraph(t *testing.T) {
	f := newFixture(t, nil)
	f.exists(object(pods, "ns", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1")))
	if found, virtual := f.inGraph("rs-1"); !found || !virtual {
		t.Fatalf("owner in graph %v, virtual %v; want a virtual node", found, virtual)
	}
	equal(t, "queued", f.deleteQ.Keys(), []string{"ns/rs-1"})
	if err := f.syncDelete("ns/rs-1"); err != nil {
		t.Fatal(err)
	}
	if found, _ := f.inGraph("rs-1"); found {
		t.Error("virtual owner verified absent is still in the graph")
	}
	equal(t, "queued after the virtual delete", f.deleteQ.Keys(), []string{"ns/p-1"})
}

func TestAttemptToDeleteUnservedKind(t *testing.T) {
	f := newFixture(t, nil)
	f.exists(object(pods, "ns", "p", "p-1", ref("example.com/v1", "Gadget", "g", "g-1")))
	equal(t, "queued", f.deleteQ.Keys(), []string{"ns/g-1"})
	err := f.syncDelete("ns/g-1")
	var quiet controllers.QuietRetryError
	var mapping *restMappingError
	if !errors.As(err, &quiet) || !errors.As(err, &mapping) {
		t.Fatalf("sync of an owner of a kind not served = %v; want a quiet REST-mapping error (retried, as upstream)", err)
	}
	equal(t, "writes", f.writes(), nil)
	if found, _ := f.inGraph("g-1"); !found {
		t.Error("the virtual owner left the graph")
	}
	// Once served (a CRD discovered), the same key resolves.
	gadgets := controllers.ServedResource{GroupVersionResource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}, Kind: "Gadget", Namespaced: true}
	f.served.Add(gadgets, f.informers[pods.GroupVersionResource])
	if err := f.syncDelete("ns/g-1"); err != nil {
		t.Fatal(err)
	}
	f.settle()
	equal(t, "writes once served", f.writes(), []string{"delete pods ns/p Background"})
	// Removed: the kind is unknown again.
	f.served.Remove(gadgets)
	if _, _, err := f.ctrl.resources.mapping("example.com/v1", "Gadget"); err == nil {
		t.Error("a removed resource still maps")
	}
}

func TestAttemptToDeleteJSONMergePatchFallback(t *testing.T) {
	f := newFixture(t, nil)
	rs := object(replicaSets, "ns", "rs", "rs-1")
	ghost := object(replicaSets, "ns", "ghost", "ghost-1")
	f.meta.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchAction).GetPatchType() == "application/strategic-merge-patch+json" {
			return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 415, Reason: metav1.StatusReasonUnsupportedMediaType}}
		}
		return false, nil, nil
	})
	f.exists(rs, object(pods, "ns", "p", "p-1", ownedBy(rs, true), ownedBy(ghost, false)))
	f.settle()
	equal(t, "writes", f.writes(), []string{
		`patch pods ns/p strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"ghost-1"}],"uid":"p-1"}}`,
		`patch pods ns/p merge-patch+json {"metadata":{"resourceVersion":"1","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"rs-1","blockOwnerDeletion":true}]}}`,
	})
	if got := f.stored(object(pods, "ns", "p", "p-1")).OwnerReferences; len(got) != 1 || got[0].UID != "rs-1" {
		t.Errorf("owner references after the patch = %v; want rs only", got)
	}
}

func TestAttemptToDeleteConflictRetriedWithoutResourceVersion(t *testing.T) {
	f := newFixture(t, nil)
	pod := object(pods, "ns", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))
	var preconditions []string
	f.meta.PrependReactor("delete", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		pre := a.(clienttesting.DeleteActionImpl).DeleteOptions.Preconditions
		if pre.ResourceVersion != nil {
			preconditions = append(preconditions, "uid+rv")
			// The object changed, its owners did not.
			live := f.stored(pod)
			live.ResourceVersion = "2"
			_ = f.meta.Tracker().Update(pods.GroupVersionResource, live, "ns")
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("changed"))
		}
		preconditions = append(preconditions, "uid")
		return false, nil, nil
	})
	f.exists(pod)
	f.settle()
	equal(t, "delete preconditions", preconditions, []string{"uid+rv", "uid"})
	if f.stored(pod) != nil {
		t.Error("the pod was not deleted")
	}
}

// TestReportOwnerElsewhereBounded: made-up owner references cost at most one
// cluster-wide lookup per dependent, and at most the bucket's burst across the
// controller while no time passes; the dependents are collected as dangling anyway.
func TestReportOwnerElsewhereBounded(t *testing.T) {
	lists := func(f *fixture) int {
		n := 0
		for _, a := range f.meta.Actions() {
			if _, ok := a.(clienttesting.ListActionImpl); ok {
				n++
			}
		}
		return n
	}
	t.Run("one dependent, many made-up owners", func(t *testing.T) {
		f := newFixture(t, nil)
		var opts []func(*metav1.PartialObjectMetadata)
		for i := range 20 {
			opts = append(opts, ref("apps/v1", "ReplicaSet", fmt.Sprintf("rs%d", i), fmt.Sprintf("rs-%d", i)))
		}
		f.exists(object(pods, "ns", "p", "p-1", opts...))
		f.settle()
		if n := lists(f); n != 1 {
			t.Errorf("%d lookups in every namespace; want 1", n)
		}
		equal(t, "writes", f.writes(), []string{"delete pods ns/p Background"})
	})
	t.Run("many dependents: the bucket", func(t *testing.T) {
		f := newFixture(t, nil)
		f.ctrl.elsewhereLookups = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(elsewhereLookupQPS, elsewhereLookupBurst,
			clocktesting.NewFakePassiveClock(time.Unix(0, 0)))
		for i := range 20 {
			f.exists(object(pods, "ns", fmt.Sprintf("p%d", i), fmt.Sprintf("p-%d", i), ref("apps/v1", "ReplicaSet", fmt.Sprintf("rs%d", i), fmt.Sprintf("rs-%d", i))))
		}
		f.settle()
		if n := lists(f); n != elsewhereLookupBurst {
			t.Errorf("%d lookups in every namespace; want %d", n, elsewhereLookupBurst)
		}
		if n := len(f.writes()); n != 20 {
			t.Errorf("%d writes; want the 20 dependents deleted", n)
		}
	})
}

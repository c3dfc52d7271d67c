package garbagecollector

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// wantDelete reads uid's node's attemptToDelete want bit.
func (f *fixture) wantDelete(uid string) bool {
	f.ctrl.graph.mu.RLock()
	defer f.ctrl.graph.mu.RUnlock()
	n, ok := f.ctrl.graph.nodes[types.UID(uid)]
	return ok && n.wantDelete.Load()
}

// startDeletion marks o deleted with finalizer, in the API server and in the graph (an
// update event).
func (f *fixture) startDeletion(o *metav1.PartialObjectMetadata, finalizers ...string) *metav1.PartialObjectMetadata {
	f.t.Helper()
	d := o.DeepCopy()
	deleting(finalizers...)(d)
	d.ResourceVersion = "2"
	if err := f.meta.Tracker().Update(resourceOf(d).GroupVersionResource, d.DeepCopy(), d.Namespace); err != nil {
		f.t.Fatal(err)
	}
	f.observe(d)
	return d
}

// observeGone finishes, as the API server does, the deletion of objects being deleted
// whose finalizers are all gone (the fake API server deletes at once, whatever the
// propagation), and applies the delete events of objects it no longer holds, as the
// informers would.
func (f *fixture) observeGone(objs ...*metav1.PartialObjectMetadata) {
	for _, o := range objs {
		if s := f.stored(o); s != nil && s.DeletionTimestamp != nil && len(s.Finalizers) == 0 {
			if err := f.meta.Tracker().Delete(resourceOf(o).GroupVersionResource, o.Namespace, o.Name); err != nil {
				f.t.Fatal(err)
			}
		}
		if f.stored(o) == nil {
			f.gone(o)
		}
	}
}

const finalizersRemoved = `{"metadata":{"resourceVersion":"2","finalizers":null}}`

func TestForegroundDeletion(t *testing.T) {
	d := object(deployments, "ns", "d", "d-1")
	rs := object(replicaSets, "ns", "rs", "rs-1", ownedBy(d, true))
	pod := object(pods, "ns", "p", "p-1", ownedBy(rs, true))
	tests := []struct {
		name     string
		observed []*metav1.PartialObjectMetadata
		owner    *metav1.PartialObjectMetadata
		// rounds: settle, apply the delete events of what was deleted, repeat.
		rounds     int
		wantWrites []string
	}{
		{
			name:     "blocking dependents with dependents of their own are deleted in the foreground; the finalizer goes when none is left",
			observed: []*metav1.PartialObjectMetadata{d, rs, pod},
			owner:    d,
			rounds:   3,
			// The fake API server deletes rs at once (the real one would wait for its
			// pod): d, with no blocking dependent left, loses its finalizer then.
			wantWrites: []string{
				"delete replicasets ns/rs Foreground",
				"patch deployments ns/d merge-patch+json " + finalizersRemoved,
				"delete pods ns/p Background",
			},
		},
		{
			name:       "a dependent whose reference does not block is deleted, and does not hold the owner",
			observed:   []*metav1.PartialObjectMetadata{d, object(pods, "ns", "p", "p-1", ownedBy(d, false))},
			owner:      d,
			rounds:     2,
			wantWrites: []string{"patch deployments ns/d merge-patch+json " + finalizersRemoved, "delete pods ns/p Background"},
		},
		{
			name:       "no dependents: the finalizer goes at once",
			observed:   []*metav1.PartialObjectMetadata{d},
			owner:      d,
			rounds:     1,
			wantWrites: []string{"patch deployments ns/d merge-patch+json " + finalizersRemoved},
		},
		{
			name: "a blocking dependent that stays (being deleted, held by a finalizer of its own) keeps the finalizer",
			observed: []*metav1.PartialObjectMetadata{d, object(replicaSets, "ns", "rs", "rs-1", ownedBy(d, true),
				deleting("example.com/hold"))},
			owner:  d,
			rounds: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.exists(tt.observed...)
			f.settle()
			f.startDeletion(tt.owner, metav1.FinalizerDeleteDependents)
			for range tt.rounds {
				f.settle()
				f.observeGone(tt.observed...)
			}
			f.settle()
			equal(t, "writes", f.writes(), tt.wantWrites)
		})
	}
}

func TestForegroundCycleGuard(t *testing.T) {
	// rs is owned by d (deleting in the foreground) and owns p, itself deleting its
	// dependents: rs's references are made non-blocking before it is deleted.
	f := newFixture(t, nil)
	d := object(deployments, "ns", "d", "d-1")
	rs := object(replicaSets, "ns", "rs", "rs-1", ownedBy(d, true))
	pod := object(pods, "ns", "p", "p-1", ownedBy(rs, true))
	f.exists(d, rs, pod)
	f.startDeletion(pod, metav1.FinalizerDeleteDependents, "example.com/hold")
	f.startDeletion(d, metav1.FinalizerDeleteDependents)
	f.deleteQ.Keys()
	if err := f.syncDelete("ns/rs-1"); err != nil {
		t.Fatal(err)
	}
	equal(t, "writes", f.writes(), []string{
		`patch replicasets ns/rs strategic-merge-patch+json {"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"d-1","blockOwnerDeletion":false}],"uid":"rs-1"}}`,
		"delete replicasets ns/rs Foreground",
	})
}

func TestForegroundClusterScopedOwner(t *testing.T) {
	n := object(nodes, "", "n", "n-1")
	tests := []struct {
		name       string
		remote     *remoteAnswer
		wantWrites []string
		wantWait   bool
	}{
		{name: "the default barrier keeps the finalizer and waits", wantWait: true},
		{name: "remote dependents pending: waits", remote: &remoteAnswer{pending: true}, wantWait: true},
		{name: "no remote dependents: the finalizer goes", remote: &remoteAnswer{},
			wantWrites: []string{"patch nodes n merge-patch+json " + finalizersRemoved}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var remote RemoteDependents
			if tt.remote != nil {
				remote = tt.remote
			}
			f := newFixture(t, remote)
			f.exists(n)
			f.startDeletion(n, metav1.FinalizerDeleteDependents)
			if f.deleteQ.Len() != 1 {
				t.Fatalf("queued %d keys; want the owner's", f.deleteQ.Len())
			}
			controllers.ProcessNext(klog.NewContext(f.ctx(), controllertest.Logger(t)), attemptToDeleteQueue, f.deleteQ, f.ctrl.syncDelete, nil)
			f.drainGraph()
			after, waiting := f.deleteQ.After("n-1")
			if waiting != tt.wantWait || (waiting && after != remoteRetryMin) {
				t.Errorf("requeued after %v (%v); want a wait of %v: %v", after, waiting, remoteRetryMin, tt.wantWait)
			}
			if f.wantDelete("n-1") != tt.wantWait {
				t.Errorf("want bit %v; want %v", f.wantDelete("n-1"), tt.wantWait)
			}
			equal(t, "writes", f.writes(), tt.wantWrites)
			if tt.remote != nil {
				equal(t, "asked", tt.remote.asked, []string{"n " + metav1.FinalizerDeleteDependents})
			}
		})
	}
}

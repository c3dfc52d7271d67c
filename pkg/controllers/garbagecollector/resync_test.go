package garbagecollector

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestResync(t *testing.T) {
	ghost := object(replicaSets, "ns", "ghost", "ghost-1")
	rs := object(replicaSets, "ns", "rs", "rs-1")
	orphaningNode := object(nodes, "", "n", "n-1", deleting(metav1.FinalizerOrphanDependents))
	tests := []struct {
		name string
		// observed are in the API server and the graph; their queued keys are then
		// dropped, as the gate drops keys of partitions not held.
		observed []*metav1.PartialObjectMetadata
		// worked are observed and their keys worked before the resync.
		worked []*metav1.PartialObjectMetadata
		// stored are in the API server and the informers' stores, not yet seen by the
		// event handlers.
		stored      []*metav1.PartialObjectMetadata
		scope       controllers.Scope
		wantDelete  []string
		wantOrphan  []string
		wantInGraph []string
	}{
		{
			name:       "a dropped key of the scope is queued again",
			observed:   []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(ghost, true))},
			scope:      controllers.Scope{Namespaces: []string{"ns"}},
			wantDelete: []string{"ns/ghost-1"},
		},
		{
			name:     "a dropped key of another namespace is not",
			observed: []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(ghost, true))},
			scope:    controllers.Scope{Namespaces: []string{"other"}, Cluster: true},
		},
		{
			name:        "objects the handlers have not seen yet are added, and their virtual owners queued",
			stored:      []*metav1.PartialObjectMetadata{object(pods, "ns", "p", "p-1", ownedBy(ghost, true))},
			scope:       controllers.Scope{Namespaces: []string{"ns"}},
			wantDelete:  []string{"ns/ghost-1"},
			wantInGraph: []string{"p-1", "ghost-1"},
		},
		{
			name:       "a cluster-scoped owner being deleted with the orphan finalizer, for the cluster scope",
			stored:     []*metav1.PartialObjectMetadata{orphaningNode},
			scope:      controllers.Scope{Cluster: true},
			wantOrphan: []string{"n-1"},
		},
		{
			name:   "cluster-scoped objects are not added for namespaces only",
			stored: []*metav1.PartialObjectMetadata{orphaningNode},
			scope:  controllers.Scope{Namespaces: []string{"ns"}},
		},
		{
			name:   "worked keys are not queued again",
			worked: []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p", "p-1", ownedBy(rs, true)), object(pods, "ns", "q", "q-1", ownedBy(ghost, true))},
			scope:  controllers.Scope{Namespaces: []string{"ns"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			f.exists(tt.worked...)
			f.settle()
			f.exists(tt.observed...)
			f.deleteQ.Keys()
			f.orphanQ.Keys()
			f.live(tt.stored...)
			for _, o := range tt.stored {
				if err := f.informers[resourceOf(o).GroupVersionResource].GetStore().Add(o.DeepCopy()); err != nil {
					t.Fatal(err)
				}
			}
			f.ctrl.Resync(tt.scope)
			f.drainGraph()
			equal(t, "attemptToDelete", f.deleteQ.Keys(), tt.wantDelete)
			equal(t, "attemptToOrphan", f.orphanQ.Keys(), tt.wantOrphan)
			for _, uid := range tt.wantInGraph {
				if found, _ := f.inGraph(uid); !found {
					t.Errorf("%s is not in the graph", uid)
				}
			}
		})
	}
}

// TestResyncCollectsWhatNoGarbageCollectorSaw: an object whose owner was deleted while no
// garbage collector ran is collected once the shard works its namespace.
func TestResyncCollectsWhatNoGarbageCollectorSaw(t *testing.T) {
	f := newFixture(t, nil)
	pod := object(pods, "ns", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1"))
	f.live(pod)
	if err := f.informers[pods.GroupVersionResource].GetStore().Add(pod); err != nil {
		t.Fatal(err)
	}
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"ns"}})
	f.drainGraph()
	f.settle()
	equal(t, "writes", f.writes(), []string{"delete pods ns/p Background"})
}

func TestResyncClearsAbsentOwners(t *testing.T) {
	f := newFixture(t, nil)
	id := objectReference{OwnerReference: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-1"}, Namespace: "ns"}
	f.ctrl.absent.Add(id)
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"ns"}})
	f.drainGraph()
	if f.ctrl.absent.Has(id) {
		t.Error("an owner a release may have marked absent is still in the cache after Resync")
	}
}

// TestResyncDeletedMeanwhile: an object Resync found in the store and that the informer
// deletes before the graph builder applies Resync's add (its delete event applied first)
// does not come back as a ghost node.
func TestResyncDeletedMeanwhile(t *testing.T) {
	f := newFixture(t, nil)
	rs := object(replicaSets, "ns", "rs", "rs-1", deleting(metav1.FinalizerDeleteDependents))
	pod := object(pods, "ns", "p", "p-1", ownedBy(rs, true), deleting("example.com/hold"))
	f.exists(rs, pod)
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"ns"}})
	// Take Resync's events out of the queue, deliver the delete, then apply them.
	var queued []*event
	for f.ctrl.graphChanges.Len() > 0 {
		e, _ := f.ctrl.graphChanges.Get()
		f.ctrl.graphChanges.Done(e)
		queued = append(queued, e)
	}
	f.gone(pod)
	log := controllertest.Logger(t)
	for _, e := range queued {
		f.ctrl.processGraphChange(log, e)
	}
	f.drainGraph()
	if found, _ := f.inGraph("p-1"); found {
		t.Error("a pod deleted after Resync listed the store is back in the graph")
	}
}

// TestResyncVirtualClusterScopedOwner: a virtual owner of a cluster-scoped kind, made
// while its dependent's namespace was warmed and its key dropped by the gate, is queued
// again by the Resync of the dependent's namespace (its key's), not only by the cluster
// partition's: otherwise the dependent of an owner deleted meanwhile is never collected.
func TestResyncVirtualClusterScopedOwner(t *testing.T) {
	f := newFixture(t, nil)
	f.exists(object(pods, "ns", "p", "p-1", ref("v1", "Node", "n", "n-1")))
	for f.deleteQ.Len() > 0 { // the gate dropped them: the namespace was not acquired yet
		k, _ := f.deleteQ.Get()
		f.deleteQ.Done(k)
	}
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"ns"}})
	f.drainGraph()
	if keys := f.deleteQ.Keys(); !slices.Contains(keys, "ns/n-1") {
		t.Errorf("attemptToDelete after the namespace's Resync: %v, want ns/n-1", keys)
	}
}

// TestResyncScansOncePerWaitingScopes: Resyncs whose events have not been applied yet
// are scanned for together by the first one applied, and the later ones scan nothing: a
// shard acquiring its partitions one by one does not scan the graph once per partition.
func TestResyncScansOncePerWaitingScopes(t *testing.T) {
	f := newFixture(t, nil)
	f.exists(object(pods, "a", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1")),
		object(pods, "b", "q", "q-1", ref("apps/v1", "ReplicaSet", "rs", "rs-2")),
		object(pods, "c", "r", "r-1", ref("apps/v1", "ReplicaSet", "rs", "rs-3")))
	f.deleteQ.Keys() // dropped by the gate: the namespaces were not acquired yet
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"a"}})
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"b"}})
	log := controllertest.Logger(t)
	applied := 0
	for f.ctrl.graphChanges.Len() > 0 {
		e, _ := f.ctrl.graphChanges.Get()
		f.ctrl.processGraphChange(log, e)
		f.ctrl.graphChanges.Done(e)
		if e.typ != resyncEvent {
			continue
		}
		applied++
		want := []string{"a/rs-1", "b/rs-2"} // both scopes at the first Resync applied, c's never
		if applied > 1 {
			want = nil // the same keys again would mean a second scan
		}
		equal(t, fmt.Sprintf("attemptToDelete after Resync event %d", applied), f.deleteQ.Keys(), want)
	}
	if applied != 2 {
		t.Fatalf("%d Resync events applied, want 2", applied)
	}
}

package garbagecollector

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestReferencesDiffs(t *testing.T) {
	a := metav1.OwnerReference{UID: "a", Name: "a"}
	b := metav1.OwnerReference{UID: "b", Name: "b"}
	bBlocking := metav1.OwnerReference{UID: "b", Name: "b", BlockOwnerDeletion: ptr.To(true)}
	c := metav1.OwnerReference{UID: "c", Name: "c"}
	tests := []struct {
		name                    string
		old, cur                []metav1.OwnerReference
		added, removed, changed int
	}{
		{name: "same", old: []metav1.OwnerReference{a, b}, cur: []metav1.OwnerReference{b, a}},
		{name: "one added, one removed", old: []metav1.OwnerReference{a}, cur: []metav1.OwnerReference{c}, added: 1, removed: 1},
		{name: "one changed", old: []metav1.OwnerReference{a, bBlocking}, cur: []metav1.OwnerReference{a, b}, changed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			added, removed, changed := referencesDiffs(tt.old, tt.cur)
			if len(added) != tt.added || len(removed) != tt.removed || len(changed) != tt.changed {
				t.Errorf("added %v removed %v changed %v; want %d, %d, %d", added, removed, changed, tt.added, tt.removed, tt.changed)
			}
		})
	}
}

func TestGraphBuilder(t *testing.T) {
	d := object(deployments, "ns", "d", "d-1")
	tests := []struct {
		name string
		run  func(t *testing.T, f *fixture)
	}{
		{
			name: "a blocking reference turned non-blocking requeues its owner waiting for its dependents",
			run: func(t *testing.T, f *fixture) {
				p := object(pods, "ns", "p", "p-1", ownedBy(d, true))
				f.exists(d, p)
				f.startDeletion(d, metav1.FinalizerDeleteDependents)
				f.deleteQ.Keys()
				f.observe(object(pods, "ns", "p", "p-1", ownedBy(d, false)))
				equal(t, "queued", f.deleteQ.Keys(), []string{"ns/d-1"})
			},
		},
		{
			name: "a blocking reference removed requeues its owner",
			run: func(t *testing.T, f *fixture) {
				f.exists(d, object(pods, "ns", "p", "p-1", ownedBy(d, true)))
				f.deleteQ.Keys()
				f.observe(object(pods, "ns", "p", "p-1"))
				equal(t, "queued", f.deleteQ.Keys(), []string{"ns/d-1"})
			},
		},
		{
			name: "a virtual owner observed under other coordinates takes them, and its dependent is verified",
			run: func(t *testing.T, f *fixture) {
				f.exists(object(pods, "ns", "p", "p-1", ref("apps/v1beta1", "ReplicaSet", "rs", "rs-1")))
				f.deleteQ.Keys()
				f.exists(object(replicaSets, "ns", "rs", "rs-1"))
				equal(t, "queued", f.deleteQ.Keys(), []string{"ns/p-1"})
				f.ctrl.graph.mu.RLock()
				id := f.ctrl.graph.nodes["rs-1"].identity
				f.ctrl.graph.mu.RUnlock()
				if id.APIVersion != "apps/v1" {
					t.Errorf("identity %s; want the observed apps/v1", id)
				}
				equal(t, "events", f.events(), nil)
			},
		},
		{
			name: "a virtual owner dropped when its last dependent stops naming it",
			run: func(t *testing.T, f *fixture) {
				f.exists(object(pods, "ns", "p", "p-1", ref("apps/v1", "ReplicaSet", "rs", "rs-1")))
				f.observe(object(pods, "ns", "p", "p-1"))
				if found, _ := f.inGraph("rs-1"); found {
					t.Error("a virtual owner without dependents is still in the graph")
				}
			},
		},
		{
			name: "a resource no longer served keeps its nodes, as upstream's stopped monitor",
			run: func(t *testing.T, f *fixture) {
				f.exists(object(pods, "ns", "p", "p-1"))
				f.served.Remove(pods)
				if found, _ := f.inGraph("p-1"); !found {
					t.Error("the node left the graph")
				}
			},
		},
		{
			name: "a virtual delete whose coordinates some dependents disagree with verifies the next identity",
			run: func(t *testing.T, f *fixture) {
				f.exists(
					object(pods, "ns", "p1", "p1-1", ref("apps/v1", "ReplicaSet", "x", "x-1")),
					object(pods, "ns", "p2", "p2-1", ref("apps/v1", "Deployment", "x", "x-1")))
				// p2 names other coordinates than the virtual node's: verified too.
				equal(t, "queued", f.deleteQ.Keys(), []string{"ns/p2-1", "ns/x-1"})
				if err := f.syncDelete("ns/x-1"); err != nil {
					t.Fatal(err)
				}
				if found, virtual := f.inGraph("x-1"); !found || !virtual {
					t.Fatal("the virtual owner left the graph while a dependent names other coordinates")
				}
				f.ctrl.graph.mu.RLock()
				id := f.ctrl.graph.nodes["x-1"].identity
				f.ctrl.graph.mu.RUnlock()
				if id.Kind != "Deployment" {
					t.Errorf("identity %s; want the Deployment coordinates next", id)
				}
				equal(t, "rate-limited", f.deleteQ.RateLimited(), []string{"ns/x-1"})
				equal(t, "queued", f.deleteQ.Keys(), []string{"ns/p1-1"})
				if !f.ctrl.absent.Has(objectReference{OwnerReference: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: "x-1"}, Namespace: "ns"}) {
					t.Error("the verified-absent coordinates are not in the absent owner cache")
				}
			},
		},
		{
			name: "beingDeleted never turns off",
			run: func(t *testing.T, f *fixture) {
				f.exists(object(pods, "ns", "p", "p-1", deleting("example.com/hold")))
				f.observe(object(pods, "ns", "p", "p-1"))
				f.ctrl.graph.mu.RLock()
				defer f.ctrl.graph.mu.RUnlock()
				if !f.ctrl.graph.nodes[types.UID("p-1")].beingDeleted {
					t.Error("beingDeleted turned off")
				}
			},
		},
		{
			name: "a cluster-scoped virtual owner named from a namespace has its dependent verified (kubernetes#98040)",
			run: func(t *testing.T, f *fixture) {
				f.exists(object(nodes, "", "n", "n-1"))
				f.ctrl.graph.mu.Lock()
				f.ctrl.graph.nodes["n-1"].virtual = true
				f.ctrl.graph.mu.Unlock()
				f.exists(object(pods, "ns", "p", "p-1", ref("v1", "Node", "n", "n-1")))
				equal(t, "queued", f.deleteQ.Keys(), []string{"ns/p-1"})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, newFixture(t, nil))
		})
	}
}

// TestVirtualClusterScopedOwnerKey: a virtual owner of a cluster-scoped kind has no
// namespace (its live read is cluster-wide) but is keyed by its dependent's namespace, so
// that the dependent's shard verifies it: keyed "<uid>", only the cluster partition's
// holder would, and a dependent in another shard's namespace would never be collected
// (TestShardedCascades found it).
func TestVirtualClusterScopedOwnerKey(t *testing.T) {
	f := newFixture(t, nil)
	f.exists(object(pods, "ns", "p", "p-1", ref("v1", "Node", "n", "n-1"), ref("apps/v1", "ReplicaSet", "rs", "rs-1")))
	equal(t, "attemptToDelete", f.deleteQ.Keys(), []string{"ns/n-1", "ns/rs-1"})
	f.ctrl.graph.mu.RLock()
	n := f.ctrl.graph.nodes["n-1"]
	f.ctrl.graph.mu.RUnlock()
	if n == nil || n.identity.Namespace != "" {
		t.Fatalf("virtual Node owner %+v: want no namespace", n)
	}
}

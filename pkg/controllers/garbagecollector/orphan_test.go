package garbagecollector

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

func TestAttemptToOrphan(t *testing.T) {
	rs := object(replicaSets, "ns", "rs", "rs-1")
	other := object(replicaSets, "ns", "other", "other-1")
	node := object(nodes, "", "n", "n-1")
	tests := []struct {
		name     string
		observed []*metav1.PartialObjectMetadata
		owner    *metav1.PartialObjectMetadata
		remote   *remoteAnswer
		// failPatch fails the patches of that pod.
		failPatch  string
		wantWrites []string
		wantErr    bool
		wantWait   bool
		// wantQueued is attemptToOrphan's keys after the owner's transition; nil is the
		// owner's alone.
		wantQueued []string
	}{
		{
			name:     "dependents lose their reference, then the owner its orphan finalizer",
			observed: []*metav1.PartialObjectMetadata{rs, other, object(pods, "ns", "p1", "p1-1", ownedBy(rs, true)), object(pods, "ns", "p2", "p2-1", ownedBy(rs, false), ownedBy(other, true))},
			owner:    rs,
			wantWrites: []string{
				`patch pods ns/p1 strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"rs-1"}],"uid":"p1-1"}}`,
				`patch pods ns/p2 strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"rs-1"}],"uid":"p2-1"}}`,
				`patch replicasets ns/rs merge-patch+json {"metadata":{"resourceVersion":"2","finalizers":null}}`,
			},
		},
		{
			name:       "a dependent that cannot be patched keeps the finalizer, and the owner is retried",
			observed:   []*metav1.PartialObjectMetadata{rs, object(pods, "ns", "p1", "p1-1", ownedBy(rs, true))},
			owner:      rs,
			failPatch:  "p1",
			wantWrites: []string{`patch pods ns/p1 strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"rs-1"}],"uid":"p1-1"}}`},
			wantErr:    true,
		},
		{
			name: "a cluster-scoped owner: local dependents orphaned, the finalizer kept by the default barrier",
			// The dependent is queued by itself too, for the shard of its namespace.
			wantQueued: []string{"n-1", "ns/p1-1"},
			observed:   []*metav1.PartialObjectMetadata{node, object(pods, "ns", "p1", "p1-1", ownedBy(node, false))},
			owner:      node,
			wantWrites: []string{`patch pods ns/p1 strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"n-1"}],"uid":"p1-1"}}`},
			wantWait:   true,
		},
		{
			name: "a cluster-scoped owner with no remote dependents loses the finalizer",
			// The dependent is queued by itself too, for the shard of its namespace.
			wantQueued: []string{"n-1", "ns/p1-1"},
			observed:   []*metav1.PartialObjectMetadata{node, object(pods, "ns", "p1", "p1-1", ownedBy(node, false))},
			owner:      node,
			remote:     &remoteAnswer{},
			wantWrites: []string{
				`patch pods ns/p1 strategic-merge-patch+json {"metadata":{"ownerReferences":[{"$patch":"delete","uid":"n-1"}],"uid":"p1-1"}}`,
				`patch nodes n merge-patch+json {"metadata":{"resourceVersion":"2","finalizers":null}}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var remote RemoteDependents
			if tt.remote != nil {
				remote = tt.remote
			}
			f := newFixture(t, remote)
			if tt.failPatch != "" {
				f.meta.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
					if a.(clienttesting.PatchAction).GetName() == tt.failPatch {
						return true, nil, apierrors.NewInternalError(errors.New("boom"))
					}
					return false, nil, nil
				})
			}
			f.exists(tt.observed...)
			f.deleteQ.Keys()
			f.startDeletion(tt.owner, metav1.FinalizerOrphanDependents)
			wantQueued := tt.wantQueued
			if wantQueued == nil {
				wantQueued = []string{keyOf(tt.owner)}
			}
			equal(t, "attemptToOrphan", f.orphanQ.Keys(), wantQueued)
			err := f.syncOrphan(keyOf(tt.owner))
			if (err != nil && !tt.wantErr && !tt.wantWait) || (err == nil && (tt.wantErr || tt.wantWait)) {
				t.Errorf("sync = %v; want an error %v, a wait %v", err, tt.wantErr, tt.wantWait)
			}
			got := f.writes()
			// Dependents are patched in parallel.
			sortPrefix(got, "patch pods")
			equal(t, "writes", got, tt.wantWrites)
			for _, o := range tt.observed {
				if o.Kind != "Pod" || tt.wantErr {
					continue
				}
				for _, r := range f.stored(o).OwnerReferences {
					if r.UID == tt.owner.UID {
						t.Errorf("%s still references the owner", o.Name)
					}
				}
			}
			if got := f.wantOrphan(string(tt.owner.UID)); got != (err != nil) {
				t.Errorf("orphan want bit %v after %v; want it set exactly when the owner is retried", got, err)
			}
		})
	}
}

// keyOf is o's queue key.
func keyOf(o *metav1.PartialObjectMetadata) string {
	if o.Namespace == "" {
		return string(o.UID)
	}
	return o.Namespace + "/" + string(o.UID)
}

// sortPrefix sorts the leading run of s whose elements start with prefix.
func sortPrefix(s []string, prefix string) {
	n := 0
	for n < len(s) && strings.HasPrefix(s[n], prefix) {
		n++
	}
	for i := 1; i < n; i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// wantOrphan reads uid's node's attemptToOrphan want bit.
func (f *fixture) wantOrphan(uid string) bool {
	f.ctrl.graph.mu.RLock()
	defer f.ctrl.graph.mu.RUnlock()
	n, ok := f.ctrl.graph.nodes[types.UID(uid)]
	return ok && n.wantOrphan.Load()
}

// TestOrphanStaleKeyOfLiveOwner: a live owner's key taken with no bit set (a Resync that
// read a bit a worker cleared before it added the key, or a delayed copy) is nothing to
// do: it must not be treated as an orphaning owner, whose dependents lose their reference.
func TestOrphanStaleKeyOfLiveOwner(t *testing.T) {
	f := newFixture(t, nil)
	rs := object(replicaSets, "ns", "rs", "rs-1")
	f.exists(rs, object(pods, "ns", "p1", "p1-1", ownedBy(rs, true)))
	f.settle()
	f.meta.ClearActions()
	f.orphanQ.Add("ns/rs-1")
	for _, k := range f.orphanQ.Keys() {
		if err := f.syncOrphan(k); err != nil {
			t.Fatal(err)
		}
	}
	equal(t, "writes", f.writes(), nil)
}

package garbagecollector

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

func TestRemoveFinalizer(t *testing.T) {
	id := func(o *metav1.PartialObjectMetadata) objectReference {
		return objectReference{OwnerReference: metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID}, Namespace: o.Namespace}
	}
	tests := []struct {
		name       string
		live       *metav1.PartialObjectMetadata
		owner      *metav1.PartialObjectMetadata
		conflicts  int
		wantWrites []string
		wantErr    bool
	}{
		{
			name:       "the other finalizers stay, guarded by the resourceVersion read",
			live:       object(deployments, "ns", "d", "d-1", deleting("a", metav1.FinalizerDeleteDependents, "b")),
			wantWrites: []string{`patch deployments ns/d merge-patch+json {"metadata":{"resourceVersion":"1","finalizers":["a","b"]}}`},
		},
		{
			name: "already removed: nothing to write",
			live: object(deployments, "ns", "d", "d-1", deleting("a")),
		},
		{
			name:  "owner gone: done",
			owner: object(deployments, "ns", "d", "d-1"),
		},
		{
			name:      "a conflict is retried with a fresh read",
			live:      object(deployments, "ns", "d", "d-1", deleting(metav1.FinalizerDeleteDependents)),
			conflicts: 1,
			wantWrites: []string{
				`patch deployments ns/d merge-patch+json {"metadata":{"resourceVersion":"1","finalizers":null}}`,
				`patch deployments ns/d merge-patch+json {"metadata":{"resourceVersion":"1","finalizers":null}}`,
			},
		},
		{
			name:       "conflicts without end give up for the queue's retry",
			live:       object(deployments, "ns", "d", "d-1", deleting(metav1.FinalizerDeleteDependents)),
			conflicts:  100,
			wantErr:    true,
			wantWrites: make([]string, retry.DefaultBackoff.Steps),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil)
			owner := tt.owner
			if tt.live != nil {
				f.live(tt.live)
				owner = tt.live
			}
			conflicts := tt.conflicts
			f.meta.PrependReactor("patch", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
				if conflicts > 0 {
					conflicts--
					return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "d", errors.New("changed"))
				}
				return false, nil, nil
			})
			err := f.ctrl.removeFinalizer(f.ctx(), id(owner), metav1.FinalizerDeleteDependents)
			if (err != nil) != tt.wantErr {
				t.Fatalf("removeFinalizer = %v; want an error %v", err, tt.wantErr)
			}
			got := f.writes()
			if tt.wantErr {
				if len(got) != len(tt.wantWrites) {
					t.Errorf("%d patches; want %d (client-go's retry.DefaultBackoff steps)", len(got), len(tt.wantWrites))
				}
				return
			}
			equal(t, "writes", got, tt.wantWrites)
		})
	}
}

func TestPatchShapes(t *testing.T) {
	owners := []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "a", UID: "a-1", BlockOwnerDeletion: ptr.To(true)},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "b", UID: "b-1"},
	}
	tests := []struct {
		name, got, want string
	}{
		{
			name: "delete owner references, the dependent's uid a precondition",
			got:  string(deleteOwnerRefsSMP("p-1", []types.UID{"a-1", "b-1"})),
			want: `{"metadata":{"ownerReferences":[{"$patch":"delete","uid":"a-1"},{"$patch":"delete","uid":"b-1"}],"uid":"p-1"}}`,
		},
		{
			name: "unblock the blocking references only",
			got:  string(unblockOwnerRefsSMP("p-1", owners)),
			want: `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"a","uid":"a-1","blockOwnerDeletion":false}],"uid":"p-1"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("patch\n got %s\nwant %s", tt.got, tt.want)
			}
		})
	}
}

func TestUnblockJSONMergePatch(t *testing.T) {
	f := newFixture(t, nil)
	d := object(deployments, "ns", "d", "d-1")
	rs := object(replicaSets, "ns", "rs", "rs-1", ownedBy(d, true))
	f.exists(rs)
	data, err := f.ctrl.unblockOwnerRefsJMP(f.ctx(), objectReference{OwnerReference: coordinates(metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-1"}), Namespace: "ns"}, rs.OwnerReferences)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"1","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"d-1","blockOwnerDeletion":false}]}}`
	if string(data) != want {
		t.Errorf("patch\n got %s\nwant %s", data, want)
	}
	if len(f.reads()) != 0 {
		t.Errorf("GETs %v; the cached object is the patch's base", f.reads())
	}
}

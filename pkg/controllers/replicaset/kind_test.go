package replicaset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestReplicaSetsKind: the ReplicaSet kind views its own objects as they are (no copy),
// inside a tombstone too, and nothing else; events go to the ReplicaSet itself.
func TestReplicaSetsKind(t *testing.T) {
	k := ReplicaSets()
	rs := newRS("rs", 1)
	tests := []struct {
		name   string
		obj    any
		delete bool
		want   *appsv1.ReplicaSet
	}{
		{name: "a ReplicaSet", obj: rs, want: rs},
		{name: "a ReplicaSet in a tombstone", obj: toolscache.DeletedFinalStateUnknown{Key: "ns/rs", Obj: rs}, delete: true, want: rs},
		{name: "another kind", obj: &corev1.ReplicationController{}},
		{name: "another kind in a tombstone", obj: toolscache.DeletedFinalStateUnknown{Obj: &corev1.Pod{}}, delete: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			view := k.View
			if tc.delete {
				view = k.viewTombstone
			}
			got, ok := view(tc.obj)
			if ok != (tc.want != nil) || got != tc.want {
				t.Errorf("view = %p, %v; want %p", got, ok, tc.want)
			}
		})
	}
	if k.Object(rs) != rs || k.GVK.Kind != "ReplicaSet" || k.Name != Name || !k.TerminatingReplicas {
		t.Errorf("ReplicaSets() = %+v", k)
	}
}

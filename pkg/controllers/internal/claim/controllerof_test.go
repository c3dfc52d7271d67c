package claim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

func TestControllerOf(t *testing.T) {
	cached := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web"}}
	get := func(name string) (*corev1.ReplicationController, error) {
		if name == cached.Name {
			return cached, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "replicationcontrollers"}, name)
	}
	ref := func(kind, name, uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{Kind: kind, Name: name, UID: k8stypes.UID(uid)}
	}
	tests := []struct {
		name string
		ref  *metav1.OwnerReference
		want *corev1.ReplicationController
	}{
		{name: "no reference", ref: nil},
		{name: "another kind", ref: ref("ReplicaSet", "web", "uid-web")},
		{name: "not cached", ref: ref("ReplicationController", "other", "uid-other")},
		{name: "same name, another UID: an earlier object of the name", ref: ref("ReplicationController", "web", "uid-old")},
		{name: "resolved", ref: ref("ReplicationController", "web", "uid-web"), want: cached},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ControllerOf("ReplicationController", tc.ref, get); got != tc.want {
				t.Errorf("ControllerOf = %v, want %v", got, tc.want)
			}
		})
	}
}

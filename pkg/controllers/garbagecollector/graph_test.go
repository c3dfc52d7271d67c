package garbagecollector

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestKeys(t *testing.T) {
	tests := []struct {
		name, namespace, uid, key string
	}{
		{name: "namespaced", namespace: "ns", uid: "u-1", key: "ns/u-1"},
		{name: "cluster-scoped", uid: "u-1", key: "u-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &node{identity: objectReference{OwnerReference: metav1.OwnerReference{UID: types.UID(tt.uid)}, Namespace: tt.namespace}}
			if got := n.key(); got != tt.key {
				t.Errorf("key = %q; want %q", got, tt.key)
			}
			ns, uid := parseKey(tt.key)
			if ns != tt.namespace || string(uid) != tt.uid {
				t.Errorf("parseKey(%q) = %q, %q", tt.key, ns, uid)
			}
		})
	}
}

func TestAbsentOwnersBounded(t *testing.T) {
	a := newAbsentOwners(2)
	ref := func(uid string) objectReference {
		return objectReference{OwnerReference: metav1.OwnerReference{UID: types.UID(uid)}}
	}
	a.Add(ref("1"))
	a.Add(ref("2"))
	a.Add(ref("3"))
	if a.Has(ref("1")) || !a.Has(ref("3")) {
		t.Error("the cache does not evict its least recently used entry")
	}
	withNamespace := ref("3")
	withNamespace.Namespace = "ns"
	if a.Has(withNamespace) {
		t.Error("a namespaced key matches a cluster-scoped entry")
	}
}

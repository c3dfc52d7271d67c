package garbagecollector

import (
	"errors"
	"testing"
)

func TestMapping(t *testing.T) {
	f := newFixture(t, nil)
	tests := []struct {
		name, apiVersion, kind string
		wantResource           string
		wantNamespaced         bool
		wantErr                bool
	}{
		{name: "served kind", apiVersion: "apps/v1", kind: "ReplicaSet", wantResource: "replicasets", wantNamespaced: true},
		{name: "another version of a served kind maps to the served version", apiVersion: "apps/v1beta2", kind: "ReplicaSet", wantResource: "replicasets", wantNamespaced: true},
		{name: "cluster-scoped", apiVersion: "v1", kind: "Node", wantResource: "nodes"},
		{name: "kind not served", apiVersion: "example.com/v1", kind: "Gadget", wantErr: true},
		{name: "invalid apiVersion", apiVersion: "a/b/c", kind: "ReplicaSet", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gvr, namespaced, err := f.ctrl.resources.mapping(tt.apiVersion, tt.kind)
			var mapping *restMappingError
			if tt.wantErr {
				if !errors.As(err, &mapping) {
					t.Errorf("mapping = %v; want a REST-mapping error", err)
				}
				return
			}
			if err != nil || gvr.Resource != tt.wantResource || namespaced != tt.wantNamespaced {
				t.Errorf("mapping = %v, %v, %v; want %s, %v", gvr, namespaced, err, tt.wantResource, tt.wantNamespaced)
			}
		})
	}
}

package app

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
)

func TestQueueKeys(t *testing.T) {
	partitionOf := func(ns string) uint32 { return uint32(len(ns)) } // "" → 0, the cluster partition
	c, err := shardcache.New(fake.NewClientset(), partitionOf, shardcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	deps := controllerDeps{cache: c, partitionOf: partitionOf}
	var (
		configMaps = controllers.Typed(corev1.SchemeGroupVersion.WithResource("configmaps"))
		namespaces = controllers.Typed(corev1.SchemeGroupVersion.WithResource("namespaces"))
		nodes      = controllers.Typed(corev1.SchemeGroupVersion.WithResource("nodes"))
	)
	type mapping struct {
		key    string
		want   uint32
		wantOK bool
	}
	tests := []struct {
		name    string
		primary []controllers.Resource
		keys    []mapping
		wantErr string
	}{
		{name: "namespaced primaries: a bare key maps nowhere", primary: []controllers.Resource{configMaps},
			keys: []mapping{{key: "abc/x", want: 3, wantOK: true}, {key: "abcd"}}},
		{name: "namespaces primary: a bare key is a namespace", primary: []controllers.Resource{namespaces, configMaps},
			keys: []mapping{{key: "abcd", want: 4, wantOK: true}, {key: "ab/x", want: 2, wantOK: true}}},
		{name: "cluster-scoped primary: a bare key is cluster work", primary: []controllers.Resource{nodes},
			keys: []mapping{{key: "node-1", want: 0, wantOK: true}}},
		{name: "namespaces with a cluster-scoped type", primary: []controllers.Resource{namespaces, nodes}, wantErr: "cannot be told apart"},
		{name: "a type the cache cannot serve", primary: []controllers.Resource{controllers.Typed(corev1.SchemeGroupVersion.WithResource("widgets"))}, wantErr: "not a built-in type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, kp, err := queueKeys(controllers.Descriptor{Name: "x", Primary: tt.primary}, deps)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("queueKeys = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.keys {
				if got, ok := kp(m.key); got != m.want || ok != m.wantOK {
					t.Errorf("partition(%q) = %d, %v; want %d, %v", m.key, got, ok, m.want, m.wantOK)
				}
			}
		})
	}
}

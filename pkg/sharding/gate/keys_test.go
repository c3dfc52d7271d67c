package gate

import (
	"strings"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

func TestKeysFor(t *testing.T) {
	partitionOf := func(ns string) partition.ID { return partition.ID(len(ns)) } // "" → 0, the cluster partition
	var (
		configMaps = Primary{Name: "configmaps"}
		namespaces = Primary{Name: "namespaces", Namespaces: true, ClusterScoped: true}
		nodes      = Primary{Name: "nodes", ClusterScoped: true}
	)
	type mapping struct {
		key    string
		want   partition.ID
		wantOK bool
	}
	tests := []struct {
		name      string
		primaries []Primary
		keys      []mapping
		wantErr   string
	}{
		{name: "namespaced primaries: a bare key maps nowhere", primaries: []Primary{configMaps},
			keys: []mapping{{key: "abc/x", want: 3, wantOK: true}, {key: "abcd"}}},
		{name: "namespaces primary: a bare key is a namespace", primaries: []Primary{namespaces, configMaps},
			keys: []mapping{{key: "abcd", want: 4, wantOK: true}, {key: "ab/x", want: 2, wantOK: true}}},
		{name: "cluster-scoped primary: a bare key is cluster work", primaries: []Primary{nodes},
			keys: []mapping{{key: "node-1", want: 0, wantOK: true}}},
		{name: "namespaces with a cluster-scoped type", primaries: []Primary{namespaces, nodes}, wantErr: "cannot be told apart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := KeysFor(partitionOf, tt.primaries)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("KeysFor = %v, want an error containing %q", err, tt.wantErr)
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

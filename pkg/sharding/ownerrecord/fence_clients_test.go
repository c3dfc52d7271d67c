package ownerrecord

import (
	"fmt"
	"testing"

	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestFenceClientsBounded: the probe clients, one per shard ID, are kept for at most
// MaxClients IDs however many shard IDs (pod names, new with every rollout) the fence
// has probed as; the most recently used, the sentinel among them, stay.
func TestFenceClientsBounded(t *testing.T) {
	tests := []struct {
		name       string
		maxClients int
		shards     int
		wantLen    int
	}{
		{name: "fewer shards than the bound", maxClients: 8, shards: 3, wantLen: 4},
		{name: "many rollouts' worth of shard IDs", maxClients: 8, shards: 1000, wantLen: 8},
		{name: "the default bound", shards: 2 * DefaultMaxProbeClients, wantLen: DefaultMaxProbeClients},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pm := partition.Map{Count: 1}
			l, err := NewLabeler(fakeMetadata(t), kubefake.NewClientset(), pm, paramsFor(pm), LabelerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewFence(l, FenceOptions{Params: testParams, Base: &rest.Config{Host: "https://127.0.0.1:6443"}, MaxClients: tc.maxClients})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.shards {
				// As Apply does: the new owner, then the sentinel.
				if _, err := f.client(fmt.Sprintf("kshard-shard-%d", i)); err != nil {
					t.Fatal(err)
				}
				if _, err := f.client(SentinelShard); err != nil {
					t.Fatal(err)
				}
			}
			if n := f.clients.Len(); n != tc.wantLen {
				t.Errorf("%d probe clients kept after %d shard IDs, want %d", n, tc.shards, tc.wantLen)
			}
			if _, ok := f.clients.Get(SentinelShard); !ok {
				t.Error("the sentinel's client, used by every probe, was dropped")
			}
		})
	}
}

// TestNewLabelerClusterPartition: the Labeler refuses a policy whose cluster partition is
// not its partition map's: the fence would then let the wrong shard write cluster-scoped
// objects, and refuse the right one.
func TestNewLabelerClusterPartition(t *testing.T) {
	pm := partition.Map{Count: 8}
	tests := []struct {
		name    string
		cluster string
		wantErr bool
	}{
		{name: "the map's", cluster: ClusterPartitionOf(pm)},
		{name: "another partition", cluster: "7", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams
			p.ClusterPartition = tt.cluster
			_, err := NewLabeler(fakeMetadata(t), kubefake.NewClientset(), pm, p, LabelerOptions{})
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewLabeler: %v, want an error: %t", err, tt.wantErr)
			}
		})
	}
}

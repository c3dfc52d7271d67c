package shardcache

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestInformersSyncedAllocatesNothing: every partition's Prepare and readiness check asks
// whether the informers have synced, thousands of times when a shard starts; the answer
// must not build a closure per informer each time.
func TestInformersSyncedAllocatesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := New(fake.NewClientset(ns("p1-a"), cm("p1-a", "x", 0)), testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(ConfigMaps)
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.informersSynced() {
		t.Fatal("informers not synced after WaitForCacheSync")
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = c.informersSynced() }); allocs != 0 {
		t.Errorf("informersSynced made %.0f allocations, want 0", allocs)
	}
}

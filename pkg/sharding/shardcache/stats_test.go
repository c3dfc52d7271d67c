package shardcache

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestStatsDoNotCopyTheStores: counting the cached objects, which every heartbeat and
// every metrics scrape does, allocates nothing in proportion to them (listing the store's
// keys made a slice of every key each time, at the shard's start among others, when its
// heap peaks).
func TestStatsDoNotCopyTheStores(t *testing.T) {
	const objects = 4000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs := []k8sruntime.Object{ns("p1-a")}
	for i := range objects {
		objs = append(objs, cm("p1-a", fmt.Sprintf("cm-%05d", i), 0))
	}
	c, err := New(fake.NewClientset(objs...), testPartition, Options{PollInterval: 5 * time.Millisecond})
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
	waitFor(t, "every ConfigMap cached", func() bool { return c.CachedObjects()["configmaps"] == objects })

	const calls = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range calls {
		_ = c.Stats()
	}
	runtime.ReadMemStats(&after)
	// A key slice of 4,000 strings is 64 KB; what Stats needs besides is a few hundred bytes.
	if perCall := (after.TotalAlloc - before.TotalAlloc) / calls; perCall > 8<<10 {
		t.Errorf("Stats allocated %d bytes per call with %d cached objects, want it independent of them (< 8 KiB)", perCall, objects)
	}
}

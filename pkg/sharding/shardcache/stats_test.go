package shardcache

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestObjectsOf: the cost of moving a partition is its objects in every filtered
// informer, over all of its namespaces, and nothing of the partitions the shard does not
// hold.
func TestObjectsOf(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	objs := []k8sruntime.Object{ns("p1-a"), ns("p1-b"), ns("p2-a"), ns("p3-a"),
		cm("p1-a", "x", 0), cm("p1-a", "y", 0), cm("p1-b", "x", 0), secret("p1-b", "s"),
		cm("p2-a", "x", 0), secret("p2-a", "s"), secret("p2-a", "t"),
		cm("p3-a", "x", 0), secret("p3-a", "s"), // partition 3 is not held
	}
	c, err := New(fake.NewClientset(objs...), testPartition, Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.InformerFor(ConfigMaps)
	c.InformerFor(Secrets)
	if err := c.Prepare(ctx, []partition.ID{1, 2}); err != nil {
		t.Fatal(err)
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held partitions' objects cached", func() bool {
		o := c.CachedObjects()
		return o["configmaps"] == 4 && o["secrets"] == 3
	})
	for _, tc := range []struct {
		name      string
		partition partition.ID
		want      int
	}{
		{name: "two namespaces, two types", partition: 1, want: 4},
		{name: "one namespace, more secrets than config maps", partition: 2, want: 3},
		{name: "not held", partition: 3, want: 0},
		{name: "no namespace at all", partition: 42, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.ObjectsOf(tc.partition); got != tc.want {
				t.Errorf("ObjectsOf(%d) = %d, want %d", tc.partition, got, tc.want)
			}
		})
	}
}

package shardcache

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// BenchmarkHeartbeatNamespaceCount measures what a shard's heartbeat pays each second to
// count its namespaces: 10,000 namespaces over 4,096 partitions, all owned (one shard),
// counted by listing and sorting their names (NamespacesOf, before) and by counting index
// keys (NamespaceCount).
func BenchmarkHeartbeatNamespaceCount(b *testing.B) {
	const namespaces, partitions = 10000, 4096
	pmap, err := partition.NewMap(partitions)
	if err != nil {
		b.Fatal(err)
	}
	objs := make([]runtime.Object, namespaces)
	for i := range objs {
		objs[i] = ns(fmt.Sprintf("tenant-%05d", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := New(fake.NewClientset(objs...), func(ns string) partition.ID { return partition.ID(pmap.For(ns)) }, Options{})
	if err != nil {
		b.Fatal(err)
	}
	c.Start(ctx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		count func(p partition.ID) int
	}{
		{name: "NamespacesOf", count: func(p partition.ID) int { return len(c.NamespacesOf(p)) }},
		{name: "NamespaceCount", count: c.NamespaceCount},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				total := 0
				for p := partition.ID(0); p < partitions; p++ {
					total += bc.count(p)
				}
				if total != namespaces {
					b.Fatalf("counted %d namespaces, want %d", total, namespaces)
				}
			}
		})
	}
}

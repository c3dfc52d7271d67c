package shardcache

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestPrepareManyListsClusterWide: partitions handed over together whose namespace lists
// exceed Options.ClusterListThreshold are warmed by cluster-wide lists instead of a list
// per namespace, and Prepare still returns only once their objects are cached; below the
// threshold (or with it off) each namespace is listed as before.
func TestPrepareManyListsClusterWide(t *testing.T) {
	const parts, nsPerPart, cmsPerNS = 6, 3, 2
	tests := []struct {
		name              string
		threshold         int
		wantBulk          bool
		maxNamespaceLists int
	}{
		{name: "above the threshold: cluster-wide lists", threshold: 4, wantBulk: true, maxNamespaceLists: 4},
		{name: "threshold off: a list per namespace", threshold: -1, maxNamespaceLists: parts * nsPerPart},
		{name: "below the threshold: a list per namespace", threshold: 1000, maxNamespaceLists: parts * nsPerPart},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			objs, want := partitionsFixture(parts, nsPerPart, cmsPerNS)
			client := fake.NewClientset(objs...)
			lists := &listCounter{}
			client.PrependReactor("list", "configmaps", lists.react)
			c := startedConfigMapCache(t, ctx, client, Options{ClusterListThreshold: tc.threshold})
			clusterLists := lists.count("")

			var ps []partition.ID
			for p := 1; p <= parts; p++ {
				ps = append(ps, partition.ID(p))
			}
			pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
			defer pcancel()
			if err := c.Prepare(pctx, ps); err != nil {
				t.Fatal(err)
			}
			// Prepare returned: every object of the partitions is cached already.
			if got := cachedNames(t, c); !equalStrings(got, sortedCopy(want)) {
				t.Fatalf("cached %v, want %v", got, want)
			}
			nsLists := 0
			for p := 1; p <= parts; p++ {
				for i := range nsPerPart {
					nsLists += lists.count(fmt.Sprintf("p%d-%d", p, i))
				}
			}
			clusterWide := lists.count("") - clusterLists
			var bulk uint64
			for _, s := range c.Stats() {
				bulk += s.BulkLists
			}
			t.Logf("%d namespace lists, %d cluster-wide lists (%d of them warm-up lists)", nsLists, clusterWide, bulk)
			if tc.wantBulk != (bulk > 0) || uint64(clusterWide) != bulk {
				t.Errorf("cluster-wide lists %d, of them warm-up lists %d; want warm-up lists: %t, and no relist", clusterWide, bulk, tc.wantBulk)
			}
			reg := prometheus.NewRegistry()
			if err := c.RegisterMetrics(reg); err != nil {
				t.Fatal(err)
			}
			if got, err := testutil.GatherAndCount(reg, "kshard_shard_cache_lists_total"); err != nil || got != 3 {
				t.Errorf("kshard_shard_cache_lists_total: %d series (%v), want 3 (one per kind)", got, err)
			}
			if got := listsTotal(t, reg, "cluster-warmup"); got != float64(bulk) {
				t.Errorf("kshard_shard_cache_lists_total{kind=cluster-warmup} = %v, want %d", got, bulk)
			}
			if nsLists > tc.maxNamespaceLists {
				t.Errorf("%d namespace lists, want at most %d", nsLists, tc.maxNamespaceLists)
			}
			if !tc.wantBulk && nsLists != parts*nsPerPart {
				t.Errorf("%d namespace lists, want one per namespace (%d)", nsLists, parts*nsPerPart)
			}

			// Live events still flow after the warm-up, and other partitions stay out.
			createCached(t, ctx, client, c, "p1-0", "late")
			if _, err := configMapLister(c).ConfigMaps("other").Get("o"); err == nil {
				t.Error("the cluster-wide warm-up cached an object of a partition that is not admitted")
			}
		})
	}
}

// partitionsFixture returns Namespaces p<P>-<i> of partitions 1..parts (nsPerPart each)
// with cmsPerNS ConfigMaps c<j> each, plus namespace "other" with one ConfigMap, and the
// sorted keys of the partitions' ConfigMaps.
func partitionsFixture(parts, nsPerPart, cmsPerNS int) (objs []runtime.Object, want []string) {
	objs = []runtime.Object{ns("other"), cm("other", "o", 0)}
	for p := 1; p <= parts; p++ {
		for i := range nsPerPart {
			name := fmt.Sprintf("p%d-%d", p, i)
			objs = append(objs, ns(name))
			for j := range cmsPerNS {
				objs = append(objs, cm(name, fmt.Sprintf("c%d", j), 0))
				want = append(want, fmt.Sprintf("%s/c%d", name, j))
			}
		}
	}
	sort.Strings(want)
	return objs, want
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// listsTotal returns kshard_shard_cache_lists_total{resource="configmaps",kind=kind}.
func listsTotal(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kshard_shard_cache_lists_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["resource"] == "configmaps" {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no kshard_shard_cache_lists_total{resource=configmaps,kind=%s}", kind)
	return 0
}

// TestPrepareBurstOneClusterList: partitions whose Prepares arrive as a burst (a
// scale-out's moves, a killed shard's partitions), each a little after the other, are
// warmed by a single cluster-wide list of the type (Options.ClusterListGather), not by a
// round for the first ones over the threshold and more rounds for the rest.
func TestPrepareBurstOneClusterList(t *testing.T) {
	const parts, nsPerPart = 30, 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	objs, want := partitionsFixture(parts, nsPerPart, 1)
	client := fake.NewClientset(objs...)
	// Namespace lists take the time a real API server and rate limiter give them, so
	// that warm-ups wait together.
	client.PrependReactor("list", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "" {
			time.Sleep(50 * time.Millisecond)
		}
		return false, nil, nil
	})
	c := startedConfigMapCache(t, ctx, client, Options{ClusterListThreshold: 4, ClusterListGather: 200 * time.Millisecond})
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	errs := make(chan error, parts)
	for p := 1; p <= parts; p++ {
		go func() { errs <- c.Prepare(pctx, []partition.ID{partition.ID(p)}) }()
		time.Sleep(2 * time.Millisecond) // a burst, not one call
	}
	for range parts {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := cachedNames(t, c); !equalStrings(got, sortedCopy(want)) {
		t.Fatalf("cached %v, want %v", got, want)
	}
	var bulk, nsLists uint64
	for _, s := range c.Stats() {
		bulk += s.BulkLists
		nsLists += s.NamespaceLists
	}
	// The first partitions, below the threshold, are listed namespace by namespace.
	if bulk != 1 {
		t.Errorf("%d cluster-wide warm-up lists (and %d namespace lists) for one burst of %d partitions, want 1", bulk, nsLists, parts)
	}
}

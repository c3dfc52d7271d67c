//go:build integration

package shardcache

// Integration test of ModeServerFilter against a real kube-apiserver with the
// ShardedListAndWatch feature gate (the local control plane's). Run as integration_test.go
// says, with -run IntegrationServerFilter.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

func TestIntegrationServerFilter(t *testing.T) {
	kubeconfig := os.Getenv("KSHARD_KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("KSHARD_KUBECONFIG is not set: this test needs a real apiserver (see integration_test.go)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The selector of a shard that owns no namespace is accepted and matches nothing.
	l, err := admin.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{ShardSelector: (hashrange.Set{}).String()})
	if err != nil {
		t.Fatalf("the selector of no namespace is refused: %v", err)
	}
	if len(l.Items) != 0 || l.ShardInfo == nil {
		t.Fatalf("the selector of no namespace matched %d config maps (shardInfo %v)", len(l.Items), l.ShardInfo)
	}

	dropped := map[string]uint64{}
	// One range per selector: a shard owning two namespaces apart in hash space needs
	// several slices (watches) to name them exactly.
	sliced := Options{MaxSelectorRanges: 1, MaxSelectorWatches: 8}
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"client filter", Options{Mode: ModeClientFilter}},
		{"server filter", Options{Mode: ModeServerFilter}},
		{"server filter, classic list+watch", Options{Mode: ModeServerFilter, DisableWatchList: true}},
		{"server filter, sliced", Options{Mode: ModeServerFilter, MaxSelectorRanges: sliced.MaxSelectorRanges, MaxSelectorWatches: sliced.MaxSelectorWatches}},
		{"server filter, sliced, classic list+watch", Options{Mode: ModeServerFilter, DisableWatchList: true,
			MaxSelectorRanges: sliced.MaxSelectorRanges, MaxSelectorWatches: sliced.MaxSelectorWatches}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			suffix := make([]byte, 3)
			_, _ = rand.Read(suffix)
			e := &itEnv{t: t, admin: admin, prefix: "kshard-ssf-it-" + hex.EncodeToString(suffix), layout: map[partition.ID][]string{}}
			for p, names := range map[partition.ID][]string{0: {"a", "b"}, 1: {"a", "b", "c"}, 2: {"a", "b"}, 3: {"a"}} {
				for _, n := range names {
					e.layout[p] = append(e.layout[p], fmt.Sprintf("%s-p%d-%s", e.prefix, p, n))
				}
			}
			e.setup(ctx, 30)
			dropped[mode.name] = runServerFilterIntegration(ctx, t, e, mode.opts)
		})
	}
	t.Logf("objects received and dropped by the shard (config maps, secrets, pods): %v", dropped)
	if c, s := dropped["client filter"], dropped["server filter"]; s*10 > c {
		t.Errorf("server filter: dropped %d objects, client filter %d: the apiserver does not filter", s, c)
	}
}

// runServerFilterIntegration runs one cache through start, churn, a new namespace and a
// handoff, and returns how many objects it received and dropped.
func runServerFilterIntegration(ctx context.Context, t *testing.T, e *itEnv, opts Options) uint64 {
	client := e.admin
	mode := opts.Mode
	opts.PollInterval = 10 * time.Millisecond
	c, err := New(client, e.partitionOf, opts)
	if err != nil {
		t.Fatal(err)
	}
	cms := c.InformerFor(ConfigMaps)
	secrets := c.InformerFor(Secrets)
	pods := c.InformerFor(Pods)
	mon := &monitor{adds: map[partition.ID]int{}, deletes: map[partition.ID]int{}, partitionOf: e.partitionOf}
	if _, err := cms.AddEventHandler(mon.handler()); err != nil {
		t.Fatal(err)
	}
	if err := c.Prepare(ctx, []partition.ID{0}); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	c.Start(runCtx)
	if err := c.WaitForCacheSync(ctx); err != nil {
		t.Fatal(err)
	}
	e.eventually(ctx, "start", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0) })
	e.eventually(ctx, "start", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 0) })
	if mode == ModeServerFilter && c.filter.ignored.Load() {
		t.Fatal("the apiserver ignored the shard selector: is the ShardedListAndWatch gate on?")
	}

	// Churn in every partition, owned or not.
	// (Cancelled after 3 s rather than given a deadline: a deadline makes the client's
	// rate limiter fail a write at once when its wait would pass it, before the context
	// ends, which churn cannot tell from a real error; CI failed so once.)
	churnCtx, stopChurn := context.WithCancel(ctx)
	time.AfterFunc(3*time.Second, stopChurn)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.churn(churnCtx, e.namespaces(0, 1, 2, 3)) }()
	wg.Wait()
	e.eventually(ctx, "churn", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0) })

	// A namespace of an admitted partition created after the start, its objects created
	// at once: every one of them is cached.
	fresh := e.prefix + "-p0-new"
	t.Cleanup(func() {
		_ = e.admin.CoreV1().Pods(fresh).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
		e.cleanup([]string{fresh})
	})
	if _, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fresh}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// (The serviceaccount controller is kshard's: create the account pods need.)
	if _, err := e.admin.CoreV1().ServiceAccounts(fresh).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := e.admin.CoreV1().ConfigMaps(fresh).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := e.admin.CoreV1().Pods(fresh).Create(ctx, testPod(fmt.Sprintf("pod-%d", i)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.layout[0] = append(e.layout[0], fresh)
	defer func() { e.layout[0] = e.layout[0][:len(e.layout[0])-1] }()
	e.eventually(ctx, "new namespace", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0) })
	podKeys := func(partitions ...partition.ID) map[string]uint64 {
		out := map[string]uint64{}
		for _, ns := range e.namespaces(partitions...) {
			l, err := e.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range l.Items {
				v, _ := parseRV(p.ResourceVersion)
				out[ns+"/"+p.Name] = v
			}
		}
		return out
	}
	e.eventually(ctx, "new namespace", pods, func() map[string]uint64 { return podKeys(0) })

	// Handoff: partition 1 comes, then 0 goes.
	if err := c.Prepare(ctx, []partition.ID{1}); err != nil {
		t.Fatal(err)
	}
	e.eventually(ctx, "prepare 1", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 0, 1) })
	e.eventually(ctx, "prepare 1", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 0, 1) })
	if err := c.Release(ctx, []partition.ID{0}); err != nil {
		t.Fatal(err)
	}
	e.eventually(ctx, "release 0", cms, func() map[string]uint64 { return e.truth(ctx, "configmaps", 1) })
	e.eventually(ctx, "release 0", secrets, func() map[string]uint64 { return e.truth(ctx, "secrets", 1) })
	e.eventually(ctx, "release 0", pods, func() map[string]uint64 { return podKeys(1) })
	if regressions, _, _ := mon.get(); len(regressions) > 0 {
		t.Errorf("resourceVersions went backwards: %v", regressions)
	}

	var dropped uint64
	for _, s := range c.Stats() {
		t.Logf("stats %s: objects=%d clusterLists=%d namespaceLists=%d bulkLists=%d watches=%d dropped=%d synthetic=%d selectorRanges=%d selectorRestarts=%d",
			s.Resource, s.Objects, s.ClusterLists, s.NamespaceLists, s.BulkLists, s.Watches, s.DroppedObjects, s.SyntheticEvents, s.SelectorRanges, s.SelectorRestarts)
		dropped += s.DroppedObjects
		if mode == ModeServerFilter && s.Resource == "configmaps" && s.SelectorRestarts == 0 {
			t.Errorf("configmaps: no selector restart, although a namespace and a partition were added")
		}
	}
	t.Logf("namespaces covered but not owned: %d", c.NamespacesCoveredNotOwned())
	if opts.MaxSelectorWatches > 1 {
		// Where one range cannot name the owned namespaces exactly, the selector must
		// have been split (the namespaces' names are random: it depends on the run).
		one := hashrange.Build(c.nsInformer.GetIndexer().ListKeys(), c.adm.namespaceAdmitted, 1)
		cov := c.filter.current()
		switch {
		case cov == nil:
			t.Error("no selector")
		case one.Foreign > 0 && cov.set.Bits == 0:
			t.Errorf("one range covers %d foreign namespaces, but the selector was not split", one.Foreign)
		default:
			t.Logf("selector: %d slices, %d ranges, %d foreign namespaces covered (one range: %d)", len(cov.sels), cov.set.Ranges(), cov.set.Foreign, one.Foreign)
		}
	}
	return dropped
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
	}
}

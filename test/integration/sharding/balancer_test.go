package sharding

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	"github.com/kshard/kshard/pkg/sharding/partition"
	auditlog "github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

// The balancer test's sizes: few enough objects that the test stays short on a 2-core
// machine, a hot namespace driven hard enough that its partition alone carries far more
// than a shard's fair share (about 6 API requests per change, against a tenth of a request
// per second for each quiet namespace's audit reconciles).
const (
	balancerShards = 3
	// quietNamespaces carry one audited ConfigMap and one Deployment of 0 replicas each.
	quietNamespaces = 12
	// hotDeployments are scaled between 0 and 1 replica in turn, one change every
	// hotChangeEvery.
	hotDeployments = 8
	hotChangeEvery = 250 * time.Millisecond
	// nobodyScheduler is the pods' scheduler: no scheduler or kwok node works them, so
	// the load stays the deployment and replicaset controllers' own.
	nobodyScheduler = "kshard-e2e-nobody"
)

// balancerArgs run the coordinators with placement by load and the balancer's clocks
// scaled down from minutes to seconds: a load report every heartbeat (1s), a half-life
// of 3 reports, a round every 2s. The cooldown stays at its default (30m): partitions
// placed by membership at the cold start must not cool (only load and hot moves do), or
// no partition could leave the hot shard for half an hour.
//
// The warm-up is short (2s): a round before the hot namespace's load is reported sees
// only the start's transients (each namespace's ServiceAccount, root CA ConfigMap and
// ReplicaSet written at once) and may move a quiet partition for load onto the shard
// about to turn hot (1 of 7 runs did, with a 1s warm-up, before the balancer moved
// cooling partitions off a hot shard); that partition, cooling, must still leave it.
var balancerArgs = []string{"--placement=load", "--load-report-interval=1s", "--load-half-life=3s",
	"--balance-interval=2s", "--balance-warmup=2s"}

// TestBalancer runs placement by load on the real control plane (issue 31,
// docs/design-placement.md §2.5 rule 6): three shards with the kshard-audit controller and
// the deployment and replicaset controllers, a coordinator with --placement=load, twelve
// quiet namespaces and one hot namespace whose Deployments the test scales in a loop from
// the start. Then:
//   - the hot namespace's partition ends alone on its shard: no other partition holding
//     a namespace (as the API server lists them) is left there, every other shard holds
//     namespaces, the leader counts a hot partition and moves for reason "hot", and the
//     partitions moved are cooling while the hot one, placed at the cold start, is not;
//   - every namespace is reconciled after the moves (the audit), the quiet namespaces by
//     shards other than the hot one, and each quiet Deployment scaled after the moves
//     is worked by its new owner;
//   - the audit shows no two shards reconciling one namespace at once, over the whole test.
//
// It is a regression test for cooling: when every acquisition cooled, a cold start froze
// hot and load moves for --balance-cooldown.
func TestBalancer(t *testing.T) {
	f := framework.Get(t)
	ctx := context.Background()
	auditDir := framework.AuditDir(t)
	pm, err := partition.NewMap(partition.DefaultCount)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, audit: auditDir}
	h.k = f.NewKShard(t, framework.KShardOptions{Partitions: pm.Count, SessionTTL: ttl, Margin: margin, Audit: true,
		ShardArgs:       []string{"--controllers", "deployment,replicaset,kshard-audit", "--audit-resync-interval", "1s", "--audit-work-duration", "10ms"},
		CoordinatorArgs: balancerArgs})
	h.k.SetShardArgs(func(name string) []string {
		return []string{"--audit-log-file", filepath.Join(auditDir, name+".jsonl")}
	})
	// The processes start first: the namespaces and objects are made during the new
	// leader's grace (session TTL + margin), in which it grants nothing.
	started := time.Now()
	h.k.StartCoordinator("coordinator-a")
	for range balancerShards {
		h.startShard()
	}

	// Namespaces, each in a partition of its own: the hot one last.
	used := map[partition.ID]bool{}
	for len(h.nss) < quietNamespaces+1 {
		ns := f.Namespace(t, nil).Name
		if p := pm.For(ns); !used[p] {
			used[p] = true
			h.nss = append(h.nss, ns)
		}
	}
	quiet, hot := h.nss[:quietNamespaces], h.nss[quietNamespaces]
	hotP := pm.For(hot)
	createBalancerObjects(t, f, quiet, hot)
	stop := driveHot(t, f, hot)
	t.Cleanup(stop)

	leader := h.converge(fmt.Sprintf("%d shards", balancerShards))
	before, err := leader.Assignments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placed := framework.Owners(before)
	t.Logf("placed by membership %s after the start: namespaces per shard %v", time.Since(started).Round(time.Millisecond), h.k.NamespacesPerShard(ctx, t, h.nss))

	// Rule 6: the hot partition's owner becomes exclusive, and every other partition
	// holding a namespace moves off it.
	var hotShard string
	framework.Eventually(t, 60*time.Second, "the hot namespace's partition alone on its shard", func(ctx context.Context) (bool, error) {
		l, err := h.k.Leader(ctx)
		if err != nil {
			return false, err
		}
		a, err := l.Assignments(ctx)
		if err != nil {
			return false, err
		}
		owners := framework.Owners(a)
		hs := owners[uint32(hotP)]
		list, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var shared []string
		for _, ns := range list.Items {
			if p := pm.For(ns.Name); p != hotP && owners[uint32(p)] == hs {
				shared = append(shared, ns.Name)
			}
		}
		s, err := framework.Scrape(ctx, l.HTTPURL)
		if err != nil {
			return false, err
		}
		hotGauge, hotMoves := s.Value("kshard_coordinator_hot_partitions"), s.Value("kshard_coordinator_balancer_moves_total", `reason="hot"`)
		if !a.Converged || len(shared) > 0 || hotGauge < 1 || hotMoves < 1 {
			o, err := ownerOf(ctx, l, hot)
			if err != nil {
				return false, err
			}
			msg := fmt.Sprintf("converged %v; hot partition %d (load %.1f, cooling %v) on %s with %d other namespaces", a.Converged, hotP, o.PartitionLoad, o.Cooling, hs, len(shared))
			if len(shared) > 0 {
				so, err := ownerOf(ctx, l, shared[0])
				if err != nil {
					return false, err
				}
				msg += fmt.Sprintf(" (e.g. %s: partition %d, cooling %v)", shared[0], so.Partition, so.Cooling)
			}
			return false, fmt.Errorf("%s; hot partitions %v, moves %s, rounds %s", msg, hotGauge, byLabel(s, "kshard_coordinator_balancer_moves_total", "reason"),
				byLabel(s, "kshard_coordinator_balancer_rounds_total", "outcome"))
		}
		hotShard, leader = hs, l
		return true, nil
	})
	isolated := time.Now()

	a, err := leader.Assignments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := framework.Scrape(ctx, leader.HTTPURL)
	if err != nil {
		t.Fatal(err)
	}
	per := h.k.NamespacesPerShard(ctx, t, h.nss)
	var loads []string
	for _, sv := range a.Shards {
		loads = append(loads, fmt.Sprintf("%s:%.2f", sv.Shard, sv.Load))
	}
	t.Logf("hot partition %d alone on %s %s after the start: test namespaces per shard %v, cost per shard %v, moves %s, rounds %s, hot partitions %v",
		hotP, hotShard, isolated.Sub(started).Round(time.Millisecond), per, loads, byLabel(s, "kshard_coordinator_balancer_moves_total", "reason"),
		byLabel(s, "kshard_coordinator_balancer_rounds_total", "outcome"), s.Value("kshard_coordinator_hot_partitions"))

	// The rest are spread over the others: every other shard holds namespaces.
	list, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners, held := framework.Owners(a), map[string]int{}
	for _, ns := range list.Items {
		held[owners[uint32(pm.For(ns.Name))]]++
	}
	for name := range h.k.Live() {
		if name != hotShard && held[name] == 0 {
			t.Errorf("%s holds no namespace (namespaces per shard %v): the hot shard's were not spread over the others", name, held)
		}
	}

	// Cooling: the hot partition, placed by membership at the cold start, does not cool;
	// a partition moved off the hot shard (for reason hot, or load) does.
	for _, ns := range h.nss {
		o := owner(t, leader, ns)
		switch moved := placed[o.Partition] != o.Shard; {
		case ns == hot && o.Cooling:
			t.Errorf("the hot partition %d, acquired at the cold start and never moved, is cooling", o.Partition)
		case moved && !o.Cooling:
			t.Errorf("%s's partition %d moved from %s to %s after the cold start, and is not cooling", ns, o.Partition, placed[o.Partition], o.Shard)
		}
	}

	// Every quiet namespace is worked by its owner after the moves: a Deployment scaled
	// now is observed and its ReplicaSet creates the pod.
	scaleQuiet(t, f, quiet)
	// Every namespace reconciled since the moves, and no overlap over the whole test.
	h.check("after the hot partition was isolated", isolated)
	recs, err := auditlog.ReadDir(auditDir)
	if err != nil {
		t.Fatal(err)
	}
	last := auditlog.Owners(recs, isolated, time.Now())
	for _, ns := range quiet {
		if last[ns] == hotShard {
			t.Errorf("quiet namespace %s was reconciled by the hot shard %s after the moves", ns, hotShard)
		}
	}
	if last[hot] != hotShard {
		t.Errorf("the hot namespace %s was last reconciled by %q after the moves, want its owner %s", hot, last[hot], hotShard)
	}
	t.Logf("took %s", time.Since(started).Round(time.Millisecond))
}

// createBalancerObjects creates, in every namespace, the ConfigMap the audit controller
// reconciles; in each quiet namespace a Deployment "app" of 0 replicas; and in the hot one
// hotDeployments Deployments of 0 replicas, which driveHot scales.
func createBalancerObjects(t *testing.T, f *framework.Framework, quiet []string, hot string) {
	t.Helper()
	type object struct {
		ns, name string
		cm       bool
	}
	var objs []object
	for _, ns := range append(slices.Clone(quiet), hot) {
		objs = append(objs, object{ns: ns, name: "probe", cm: true})
	}
	for _, ns := range quiet {
		objs = append(objs, object{ns: ns, name: "app"})
	}
	for i := range hotDeployments {
		objs = append(objs, object{ns: hot, name: fmt.Sprintf("hot-%d", i)})
	}
	err := framework.Parallel(len(objs), 16, func(i int) error {
		o := objs[i]
		if o.cm {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: o.name, Labels: map[string]string{audit.Label: "true"}}}
			_, err := f.Client.CoreV1().ConfigMaps(o.ns).Create(context.Background(), cm, metav1.CreateOptions{})
			return err
		}
		d := framework.NewRollingDeployment(o.name, 0, intstr.FromInt32(1), intstr.FromInt32(0), "registry.k8s.io/pause:3.10", nil)
		d.Spec.Template.Spec.SchedulerName = nobodyScheduler
		_, err := f.Client.AppsV1().Deployments(o.ns).Create(context.Background(), d, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// driveHot scales the hot namespace's Deployments between 0 and 1 replica, one change
// every hotChangeEvery, until the returned stop is called (which logs how many changes
// were made).
func driveHot(t *testing.T, f *framework.Framework, hot string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg              sync.WaitGroup
		changes, failed atomic.Int64
		lastErr         atomic.Value
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(hotChangeEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			replicas := 1 - (i/hotDeployments)%2 // every Deployment to 1, then every one to 0, …
			patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
			_, err := f.Client.AppsV1().Deployments(hot).Patch(ctx, fmt.Sprintf("hot-%d", i%hotDeployments), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			switch {
			case err == nil:
				changes.Add(1)
			case ctx.Err() == nil:
				failed.Add(1)
				lastErr.Store(err.Error())
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		t.Logf("hot namespace %s: %d changes made, %d failed (last error: %v)", hot, changes.Load(), failed.Load(), lastErr.Load())
	}
}

// scaleQuiet scales the Deployment "app" of every quiet namespace to 1 and waits until
// each is observed and its ReplicaSet has created the pod.
func scaleQuiet(t *testing.T, f *framework.Framework, quiet []string) {
	t.Helper()
	err := framework.Parallel(len(quiet), 16, func(i int) error {
		_, err := f.Client.AppsV1().Deployments(quiet[i]).Patch(context.Background(), "app", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "every quiet namespace's Deployment scaled by its owner", func(ctx context.Context) (bool, error) {
		var behind []string
		for _, ns := range quiet {
			d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !scaled(d) {
				behind = append(behind, fmt.Sprintf("%s (generation %d, observed %d, replicas %d)", ns, d.Generation, d.Status.ObservedGeneration, d.Status.Replicas))
			}
		}
		if len(behind) > 0 {
			return false, fmt.Errorf("%d not scaled, e.g. %s", len(behind), behind[0])
		}
		return true, nil
	})
}

// scaled says whether the deployment controller has observed d's last change and its
// ReplicaSet has created one pod.
func scaled(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == 1
}

// byLabel lists the samples of a metric by the value of one label, for messages.
func byLabel(s framework.Samples, name, label string) string {
	var out []string
	for _, x := range s {
		if x.Name == name {
			out = append(out, fmt.Sprintf("%s=%v", x.Labels[label], x.Value))
		}
	}
	sort.Strings(out)
	return "{" + strings.Join(out, " ") + "}"
}

package workloadstress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/workloadstress/invariant"
)

// controllers are the shards' controllers (the framework adds the housekeeping ones:
// serviceaccount, root-ca-cert-publisher, namespace, garbagecollector).
var controllers = []string{"statefulset", "daemonset", "disruption", "pvc-protection"}

// setRef is one StatefulSet or DaemonSet of the run and its template generation.
type setRef struct {
	ns, name string
	sts      *stsKind
	ds       *dsKind
	replicas int32
	gen      atomic.Int64
	pdb      string
	pdbKind  *pdbKind
}

func TestWorkloadStress(t *testing.T) {
	if os.Getenv("KSHARD_WORKLOAD_STRESS") != "1" {
		t.Skip("the workload stress test runs with KSHARD_WORKLOAD_STRESS=1 (make workload-stress)")
	}
	f := framework.Get(t)
	upstream := os.Getenv(framework.UpstreamControllersEnv) == "1"
	for _, c := range controllers[:3] {
		on, err := f.KCMRuns(c)
		if err != nil {
			t.Fatal(err)
		}
		if on != upstream {
			t.Fatalf("the cluster's kube-controller-manager runs %s: %v, but %s=%v: the stress test needs kshard to run it alone, or (reference run) upstream to run it",
				c, on, framework.UpstreamControllersEnv, upstream)
		}
	}
	nNS := framework.EnvInt("KSHARD_WORKLOAD_STRESS_NAMESPACES", 24)
	nNodes := framework.EnvInt("KSHARD_WORKLOAD_STRESS_NODES", 30)
	nDS := min(framework.EnvInt("KSHARD_WORKLOAD_STRESS_DAEMONSETS", 6), nNS)
	duration := 8 * time.Minute
	if v := os.Getenv("KSHARD_WORKLOAD_STRESS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KSHARD_WORKLOAD_STRESS_DURATION: %v", err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KSHARD_WORKLOAD_STRESS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KSHARD_WORKLOAD_STRESS_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (KSHARD_WORKLOAD_STRESS_SEED replays the drivers' pauses); %d namespaces, %d kwok nodes, %d DaemonSets, %s of rollouts",
		seed, nNS, nNodes, nDS, duration)
	ctx := context.Background()
	cs := f.LoadClient(t)
	run := f.RunID
	began := time.Now()
	stall := framework.WatchStalls(t)

	// kshard: two coordinators (one restarted if it exits, as its Deployment would) and
	// three shards.
	var k *framework.KShard
	if !upstream {
		k = f.NewKShard(t, framework.KShardOptions{ShardArgs: []string{"--controllers", strings.Join(controllers, ",")}})
		k.GuardAlone(t)
		stop := k.SuperviseCoordinators(t)
		defer stop()
		for i := 1; i <= 3; i++ {
			k.StartShard(fmt.Sprintf("shard-%d", i))
		}
		k.WaitAllOwned(t, 90*time.Second)
		t.Logf("3 shards own every partition after %s", time.Since(began).Round(time.Second))
	} else {
		t.Logf("reference run: the cluster's kube-controller-manager runs the controllers; no shards, no shard events")
	}

	// The checker and its watches, started before any object exists.
	chk := invariant.New(nil)
	podHandlers, pdbHandlers := chk.Handlers()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = runLabel + "=" + run }))
	podInf := factory.Core().V1().Pods().Informer()
	pdbInf := factory.Policy().V1().PodDisruptionBudgets().Informer()
	kub := newKubelet(cs)
	for _, h := range []cache.ResourceEventHandlerFuncs{podHandlers, kub.handler()} {
		if _, err := podInf.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pdbInf.AddEventHandler(pdbHandlers); err != nil {
		t.Fatal(err)
	}
	informerStop := make(chan struct{})
	// Stopped after the namespaces' teardown (cleanups run last registered first): the
	// kubelet ends the pods their deletion leaves terminating.
	t.Cleanup(func() { close(informerStop); kub.stop() })
	factory.Start(informerStop)
	factory.WaitForCacheSync(informerStop)

	// Nodes first (their deletion then comes after the namespaces' teardown among the
	// cleanups), then the namespaces. The test tears them down itself at the end, while the
	// shards run their namespace controller and the test's kubelet ends the pods left
	// terminating; a failed test does it in a cleanup (after the shards it started
	// mid-test are gone: their partitions move to the first ones first).
	nodes := createNodes(t, cs, run, nNodes)
	t.Logf("%d kwok nodes Ready after %s", len(nodes), time.Since(began).Round(time.Second))
	nss := make([]string, nNS)
	if err := framework.Parallel(nNS, 8, func(i int) error {
		nss[i] = f.Namespace(t, nil).Name
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	hbNS := f.Namespace(t, nil).Name
	tornDown := false
	t.Cleanup(func() {
		if !tornDown {
			teardown(t, f, append([]string{hbNS}, nss...))
		}
	})
	f.WaitDefaultServiceAccount(t, hbNS)
	checkHoldStage(t, cs, hbNS, nodes[0])
	stopHeartbeat := heartbeat(t, cs, run, hbNS)
	defer stopHeartbeat()

	// The objects: per namespace a budget and a StatefulSet, and in the first nDS a
	// DaemonSet on the test's nodes.
	var sets []*setRef
	var daemons []*setRef
	for i, ns := range nss {
		sk := &stsKinds[i%len(stsKinds)]
		pk := &pdbKinds[(i/len(stsKinds)+i)%len(pdbKinds)]
		name := "web-" + sk.name
		r := &setRef{ns: ns, name: name, sts: sk, replicas: sk.replicas, pdb: "pdb-" + pk.name, pdbKind: pk}
		r.gen.Store(1)
		sets = append(sets, r)
		chk.AddStatefulSet(ns, name, sk.replicas)
		pdb := newPDB(run, ns, r.pdb, name, pk.spec[0])
		if err := chk.AddPDB(pdb); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, newSTS(run, name, *sk), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i < nDS {
			dk := &dsKinds[i%len(dsKinds)]
			d := &setRef{ns: ns, name: "ds-" + dk.name, ds: dk}
			d.gen.Store(1)
			surge, err := intstr.GetScaledValueFromIntOrPercent(&dk.maxSurge, len(nodes), true)
			if err != nil {
				t.Fatal(err)
			}
			chk.AddDaemonSet(ns, d.name, surge, len(nodes), 1)
			if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, newDS(run, d.name, *dk), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			daemons = append(daemons, d)
		}
	}
	waitConverged(t, cs, chk, sets, daemons, int32(len(nodes)), 4*time.Minute, "the first rollout")
	t.Logf("%d StatefulSets (%d pods), %d budgets and %d DaemonSets (%d pods) rolled out after %s",
		len(sets), sumReplicas(sets), len(sets), len(daemons), len(daemons)*len(nodes), time.Since(began).Round(time.Second))
	if k != nil {
		k.LogOwners(t, nss, "at start")
	}

	// The rollouts: every StatefulSet changes its template every 8-30s (overlapping its
	// rollouts), every budget toggles its spec every 30-60s, surging DaemonSets start their
	// next rollout once the previous is complete, the others every 10-25s.
	start := time.Now()
	deadline := start.Add(duration)
	var counts struct {
		stsRollouts, dsRollouts, dsCompleted, pdbChanges atomic.Int64
	}
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var driverErr error
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if err != nil && driverErr == nil {
			driverErr = err
		}
	}
	pause := func(rng *rand.Rand, lo, hi time.Duration) bool {
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
		if time.Now().Add(d).After(deadline) {
			return false
		}
		time.Sleep(d)
		return true
	}
	for i, r := range sets {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(2*i)))
			for pause(rng, 8*time.Second, 30*time.Second) {
				g := int(r.gen.Add(1))
				fail(patchSTS(ctx, cs, r.ns, r.name, genPatch(g, nil)))
				counts.stsRollouts.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(2*i+1)))
			for n := 1; pause(rng, 30*time.Second, 60*time.Second); n++ {
				_, err := cs.PolicyV1().PodDisruptionBudgets(r.ns).Patch(ctx, r.pdb, types.MergePatchType,
					pdbSpecPatch(r.pdbKind.spec[n%2]), metav1.PatchOptions{})
				fail(err)
				counts.pdbChanges.Add(1)
			}
		}()
	}
	for i, d := range daemons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(1000+i)))
			for {
				if d.ds.sequential {
					if !waitDaemonSet(ctx, cs, chk, d, int32(len(nodes)), deadline) {
						return
					}
					counts.dsCompleted.Add(1)
					if !pause(rng, time.Second, 5*time.Second) {
						return
					}
				} else if !pause(rng, 10*time.Second, 25*time.Second) {
					return
				}
				g := int(d.gen.Add(1))
				chk.SetDaemonSetGen(d.ns, d.name, g)
				fail(patchDS(ctx, cs, d.ns, d.name, genPatch(g, nil)))
				counts.dsRollouts.Add(1)
			}
		}()
	}

	// The shard events, while the drivers run.
	events := 0
	if k != nil {
		at := func(frac float64) { time.Sleep(time.Until(start.Add(time.Duration(frac * float64(duration))))) }
		since := func() string { return "+" + time.Since(start).Round(time.Second).String() }
		at(0.15)
		s4, s5 := k.StartShard("shard-4"), k.StartShard("shard-5")
		events += 2
		k.WaitAllOwned(t, 90*time.Second)
		framework.WaitHTTP(t, s4.HTTPURL+"/readyz", 60*time.Second)
		framework.WaitHTTP(t, s5.HTTPURL+"/readyz", 60*time.Second)
		t.Logf("%s scaled out to 5 shards", since())
		k.LogOwners(t, nss, "after the scale-out")

		at(0.35)
		k.ScaleIn(t, "shard-1")
		events++
		t.Logf("%s scaled in to 4 shards (shard-1 handed over and exited)", since())

		at(0.55)
		if err := k.Shards["shard-2"].Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		events++
		_, _ = k.Shards["shard-2"].Wait(10 * time.Second)
		t.Logf("%s SIGKILLed shard-2", since())
		k.WaitOwnsNothing(t, "shard-2")
		t.Logf("%s its partitions owned by the 3 live shards", since())

		at(0.75)
		s2 := k.StartShard("shard-2")
		events++
		k.WaitAllOwned(t, 90*time.Second)
		framework.WaitHTTP(t, s2.HTTPURL+"/readyz", 60*time.Second)
		t.Logf("%s shard-2 restarted: 4 shards", since())
		k.ScaleIn(t, "shard-4")
		events++
		t.Logf("%s scaled in to 3 shards (shard-4 handed over and exited)", since())
		k.LogOwners(t, nss, "at the end")
	}
	wg.Wait()
	if driverErr != nil {
		t.Fatalf("a rollout driver: %v", driverErr)
	}

	// The last rollout of every set (partitions down to 0), then everything converges.
	for _, r := range sets {
		g := int(r.gen.Add(1))
		var partition *int32
		if r.sts.partition > 0 {
			partition = new(int32)
		}
		if err := patchSTS(ctx, cs, r.ns, r.name, genPatch(g, partition)); err != nil {
			t.Fatal(err)
		}
		counts.stsRollouts.Add(1)
	}
	for _, d := range daemons {
		g := int(d.gen.Add(1))
		chk.SetDaemonSetGen(d.ns, d.name, g)
		if err := patchDS(ctx, cs, d.ns, d.name, genPatch(g, nil)); err != nil {
			t.Fatal(err)
		}
		counts.dsRollouts.Add(1)
	}
	lastChange := time.Now()
	waitConverged(t, cs, chk, sets, daemons, int32(len(nodes)), 5*time.Minute, "the last rollout")
	t.Logf("+%s every set rolled out with its last template and every budget's status exact, %s after the last change",
		time.Since(start).Round(time.Second), time.Since(lastChange).Round(time.Second))

	// Every budget status written is checked once the pod watch passes it (the heartbeat
	// pod moves it on).
	framework.Eventually(t, 60*time.Second, "every budget status checked", func(context.Context) (bool, error) {
		if n := chk.Report().PDBPending; n > 0 {
			return false, fmt.Errorf("%d statuses not checked yet (pod watch at rv %d)", n, chk.PodRV())
		}
		return true, nil
	})

	// Results.
	rep := chk.Report()
	created, explained, unexplained := chk.Recreations()
	t.Logf("rollouts: %d StatefulSet template changes (%d sets), %d DaemonSet template changes (%d sets; %d surging rollouts completed before the next), %d budget spec changes (%d budgets)",
		counts.stsRollouts.Load(), len(sets), counts.dsRollouts.Load(), len(daemons), counts.dsCompleted.Load(), counts.pdbChanges.Load(), len(sets))
	t.Logf("shard events: %d", events)
	t.Logf("invariant checks: %d pod events; %d StatefulSet ordinal checks; %d DaemonSet checks (every node of the set at each of its pod events); %d budget statuses checked against the pod views",
		rep.PodEvents, rep.OrdinalChecks, rep.DaemonSetChecks, rep.PDBStatuses)
	t.Logf("StatefulSet pods created: %d; deleted: %d with the template's grace period (the controller's deletes), %d forced (grace 0: kwok's delete by name of a pod just created), %d other; ordinals created again at a revision they had: %d, each after kwok's forced delete of the pod before",
		created, rep.StatefulSetDeletes[grace], rep.StatefulSetDeletes[0], deletesOther(rep.StatefulSetDeletes), explained)
	var dsLines []string
	for _, d := range daemons {
		key := d.ns + "/" + d.name
		dsLines = append(dsLines, fmt.Sprintf("%s: surging nodes max %d, pods on a node max %d, pods above desired max %d",
			d.name, rep.MaxSurging[key], rep.MaxPerNode[key], rep.MaxAbove[key]))
	}
	t.Logf("DaemonSets: %s", strings.Join(dsLines, "; "))
	t.Logf("budget status lag (disruptionsAllowed above what the current view allows, until the next status or pod change): %d episodes, longest %s (%s), %d open",
		rep.Lag.Episodes, rep.Lag.Longest.Round(time.Millisecond), rep.Lag.LongestOf, rep.Lag.Open)
	if rep.UnknownDeletes > 0 {
		t.Logf("pod deletions seen only by a relist: %d", rep.UnknownDeletes)
	}
	for _, u := range unexplained[:min(20, len(unexplained))] {
		t.Errorf("ordinal created twice at one revision: %s", u)
	}
	vs := chk.Violations()
	for _, v := range vs[:min(30, len(vs))] {
		t.Errorf("%s", v)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("violations by invariant: %v", rep.Violations)
	}
	if n := kub.errs.Load(); n > 0 {
		t.Errorf("the test's kubelet failed to end %d terminating pods, last: %v", n, kub.lastErr.Load())
	}
	t.Logf("terminating pods ended by the test's kubelet: %d", kub.ended.Load())
	stall()
	teardown(t, f, append([]string{hbNS}, nss...))
	tornDown = true
	if t.Failed() && k != nil {
		for _, s := range k.Shards {
			t.Logf("%s log: %s", s.Name, s.LogPath)
		}
	}
	t.Logf("total %s", time.Since(began).Round(time.Second))
}

func deletesOther(by map[int64]int) int {
	n := 0
	for g, k := range by {
		if g != grace && g != 0 {
			n += k
		}
	}
	return n
}

func sumReplicas(sets []*setRef) int32 {
	var n int32
	for _, s := range sets {
		n += s.replicas
	}
	return n
}

// waitDaemonSet waits until a DaemonSet has rolled out its current generation (status
// and the checker's view), or the deadline passes (false).
func waitDaemonSet(ctx context.Context, cs kubernetes.Interface, chk *invariant.Checker, d *setRef, nodes int32, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		ds, err := cs.AppsV1().DaemonSets(d.ns).Get(ctx, d.name, metav1.GetOptions{})
		if err == nil && dsDone(ds, nodes, int(d.gen.Load())) == "" {
			if ok, _ := chk.DaemonSetSettled(d.ns, d.name); ok {
				return true
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// waitConverged waits until every StatefulSet and DaemonSet has rolled out its current
// generation and every budget's status is exact; it fails with what is left, and the
// pods of the StatefulSets left.
func waitConverged(t *testing.T, cs kubernetes.Interface, chk *invariant.Checker, sets, daemons []*setRef, nodes int32, timeout time.Duration, what string) {
	t.Helper()
	var left []string
	var stuck, stuckDS []*setRef
	err := wait(timeout, func(ctx context.Context) (bool, error) {
		left, stuck, stuckDS = nil, nil, nil
		for _, r := range sets {
			s, err := cs.AppsV1().StatefulSets(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			pods, err := cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: appLabel + "=" + r.name})
			if err != nil {
				return false, err
			}
			if why := stsDone(s, pods.Items, int(r.gen.Load())); why != "" {
				left = append(left, fmt.Sprintf("StatefulSet %s/%s: %s", r.ns, r.name, why))
				stuck = append(stuck, r)
			}
			p, err := cs.PolicyV1().PodDisruptionBudgets(r.ns).Get(ctx, r.pdb, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if why := pdbDone(p, r.replicas); why != "" {
				left = append(left, fmt.Sprintf("PodDisruptionBudget %s/%s: %s", r.ns, r.pdb, why))
			}
		}
		for _, d := range daemons {
			ds, err := cs.AppsV1().DaemonSets(d.ns).Get(ctx, d.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if why := dsDone(ds, nodes, int(d.gen.Load())); why != "" {
				left = append(left, fmt.Sprintf("DaemonSet %s/%s: %s", d.ns, d.name, why))
				stuckDS = append(stuckDS, d)
			} else if ok, why := chk.DaemonSetSettled(d.ns, d.name); !ok {
				left = append(left, fmt.Sprintf("DaemonSet %s/%s pods: %s", d.ns, d.name, why))
				stuckDS = append(stuckDS, d)
			}
		}
		return len(left) == 0, fmt.Errorf("%d objects not done", len(left))
	})
	if err == nil {
		return
	}
	sort.Strings(left)
	t.Errorf("%s not converged after %s: %v", what, timeout, err)
	for _, l := range left[:min(30, len(left))] {
		t.Errorf("  %s", l)
	}
	for _, r := range append(stuck[:min(3, len(stuck))], stuckDS[:min(2, len(stuckDS))]...) {
		dumpSet(t, cs, r)
	}
	t.FailNow()
}

// dumpSet logs a set's pods and its namespace's last events.
func dumpSet(t *testing.T, cs kubernetes.Interface, r *setRef) {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s at generation %d:\n", r.ns, r.name, r.gen.Load())
	if pods, err := cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: appLabel + "=" + r.name}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "  pod %s uid %s gen %s rev %s phase %s ready %v deleting %v node %q created %s\n", p.Name, p.UID,
				p.Labels[invariant.GenLabel], p.Labels["controller-revision-hash"], p.Status.Phase, podReady(&p), p.DeletionTimestamp != nil,
				p.Spec.NodeName, p.CreationTimestamp.Format("15:04:05"))
		}
	}
	if evs, err := cs.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{}); err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
		for _, ev := range evs.Items[max(0, len(evs.Items)-15):] {
			fmt.Fprintf(&b, "  event %s %s/%s %s x%d %s: %s\n", ev.LastTimestamp.Format("15:04:05"), ev.InvolvedObject.Kind, ev.InvolvedObject.Name,
				ev.Reason, ev.Count, ev.Source.Component, ev.Message)
		}
	}
	t.Log(b.String())
}

// createNodes creates n kwok nodes labelled with the run (kwok manages nodes annotated
// kwok.x-k8s.io/node=fake), deletes them when the test ends, and waits until they are Ready.
func createNodes(t *testing.T, cs kubernetes.Interface, run string, n int) []string {
	t.Helper()
	ctx := context.Background()
	names := make([]string, n)
	if err := framework.Parallel(n, 8, func(i int) error {
		name := fmt.Sprintf("wls-%s-%02d", strings.ToLower(run), i)
		names[i] = name
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok", runLabel: run},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range names {
			_ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	framework.Eventually(t, 2*time.Minute, fmt.Sprintf("%d kwok nodes Ready", n), func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: runLabel + "=" + run})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, nd := range l.Items {
			for _, c := range nd.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready < n {
			return false, fmt.Errorf("%d of %d Ready", ready, n)
		}
		return true, nil
	})
	return names
}

// heartbeat keeps a pod of the run changing (an annotation, twice a second) so that the
// pod watch moves past every budget status written: a status is checked once the watch
// has delivered every pod event below it. The pod stays Pending (it selects no node).
func heartbeat(t *testing.T, cs kubernetes.Interface, run, ns string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "heartbeat", Labels: map[string]string{runLabel: run}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"kshard.io/no-such-node": "none"}, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "c", Image: image}}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			_, _ = cs.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType,
				mergePatch(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"kshard.io/beat": strconv.Itoa(i)}}}), metav1.PatchOptions{})
		}
	}()
	return func() { cancel(); <-done }
}

// teardown deletes the run's namespaces and waits until they are gone, while the nodes
// (kwok ends the terminating pods) and the shards (the namespace controller) still run.
func teardown(t *testing.T, f *framework.Framework, nss []string) {
	began := time.Now()
	for _, ns := range nss {
		f.DeleteNamespace(t, ns)
	}
	err := wait(3*time.Minute, func(ctx context.Context) (bool, error) {
		left := 0
		for _, ns := range nss {
			if _, err := f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
				left++
			}
		}
		return left == 0, fmt.Errorf("%d namespaces left", left)
	})
	if err != nil {
		t.Errorf("teardown: %v", err)
		return
	}
	t.Logf("the run's %d namespaces deleted and gone in %s", len(nss), time.Since(began).Round(time.Second))
}

func wait(timeout time.Duration, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return last
		case <-time.After(time.Second):
		}
	}
}

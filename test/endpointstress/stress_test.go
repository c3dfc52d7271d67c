package endpointstress

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/endpointstress/invariant"
	"github.com/kshard/kshard/test/framework"
)

// managedBy selects the slices of kube-controller-manager's (and kshard's) EndpointSlice
// controller.
const managedBy = discoveryv1.LabelManagedBy + "=endpointslice-controller.k8s.io"

func TestEndpointStress(t *testing.T) {
	if os.Getenv("KSHARD_ENDPOINT_STRESS") != "1" {
		t.Skip("the EndpointSlice stress test runs with KSHARD_ENDPOINT_STRESS=1 (make endpoint-stress)")
	}
	f := framework.Get(t)
	upstream := os.Getenv(framework.UpstreamControllersEnv) == "1"
	on, err := f.KCMRuns("endpointslice")
	if err != nil {
		t.Fatal(err)
	}
	if on != upstream {
		t.Fatalf("the cluster's kube-controller-manager runs endpointslice: %v, but %s=%v: the stress test needs kshard to run it alone, or (reference run) upstream to run it",
			on, framework.UpstreamControllersEnv, upstream)
	}
	auditLog := filepath.Join(f.ClusterDir(), "logs", "kube-apiserver-audit.log")
	auditStart, err := os.Stat(auditLog)
	if err != nil {
		t.Fatalf("kube-apiserver's audit log: %v (start the control plane with KSHARD_APISERVER_AUDIT=1: hack/cluster.sh down, then up)", err)
	}
	nNS := framework.EnvInt("KSHARD_ENDPOINT_STRESS_NAMESPACES", 24)
	nSvc := framework.EnvInt("KSHARD_ENDPOINT_STRESS_SERVICES", 6)
	podsPer := framework.EnvInt("KSHARD_ENDPOINT_STRESS_PODS", 12)
	duration := 6 * time.Minute
	if v := os.Getenv("KSHARD_ENDPOINT_STRESS_DURATION"); v != "" {
		if duration, err = time.ParseDuration(v); err != nil {
			t.Fatalf("KSHARD_ENDPOINT_STRESS_DURATION: %v", err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KSHARD_ENDPOINT_STRESS_SEED"); v != "" {
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("KSHARD_ENDPOINT_STRESS_SEED: %v", err)
		}
	}
	t.Logf("seed %d; %d namespaces × %d Services × %d pods at start, %s of churn", seed, nNS, nSvc, podsPer, duration)
	ctx := context.Background()
	cs := f.Client
	began := time.Now()
	stall := framework.WatchStalls(t)

	var k *framework.KShard
	if !upstream {
		args := []string{"--controllers", "endpointslice"}
		if v := os.Getenv("KSHARD_ENDPOINT_STRESS_SHARD_V"); v != "" {
			args = append(args, "--v", v)
		}
		k = f.NewKShard(t, framework.KShardOptions{PodIdentity: true, Fence: true, ShardArgs: args})
		k.GuardAlone(t)
		stop := k.SuperviseCoordinators(t)
		defer stop()
		for i := 1; i <= 3; i++ {
			k.StartShard(fmt.Sprintf("shard-%d", i))
		}
		k.WaitAllOwned(t, 90*time.Second)
		t.Logf("3 shards own every partition after %s", time.Since(began).Round(time.Second))
	} else {
		t.Logf("reference run: the cluster's kube-controller-manager runs the EndpointSlice controller; no shards, no shard events")
	}

	// The checker's watch of every managed slice, started before any Service exists.
	chk := invariant.New(nil)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managedBy }))
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	if _, err := sliceInf.AddEventHandler(chk.Handlers()); err != nil {
		t.Fatal(err)
	}
	informerStop := make(chan struct{})
	t.Cleanup(func() { close(informerStop) })
	factory.Start(informerStop)
	factory.WaitForCacheSync(informerStop)

	node := createNode(t, cs, f.RunID)
	st := &stats{}
	models := make([]*nsModel, nNS)
	if err := framework.Parallel(nNS, 8, func(i int) error {
		ns := f.Namespace(t, nil).Name
		m := &nsModel{ns: ns, node: node, pods: map[string]*podModel{}, stats: st}
		for j := range nSvc {
			m.svcs = append(m.svcs, &svcModel{name: fmt.Sprintf("svc-%d", j), narrow: j%3 == 2})
		}
		models[i] = m
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	nss := map[string]bool{}
	for _, m := range models {
		nss[m.ns] = true
	}
	tornDown := false
	// A test that stops early deletes its namespaces without waiting: the shards started
	// mid-test are gone by then (cleanups run last registered first), and TestMain's
	// namespace finisher ends what is left.
	t.Cleanup(func() {
		if !tornDown {
			teardown(t, f, models, false)
		}
	})
	for _, m := range models {
		f.WaitDefaultServiceAccount(t, m.ns)
	}
	if err := framework.Parallel(nNS, 8, func(i int) error { return populate(ctx, cs, chk, models[i], podsPer) }); err != nil {
		t.Fatal(err)
	}
	waitShown(t, cs, k, chk, models, 5*time.Minute, "the first slices", true)
	t.Logf("%d Services with %d pods shown by their slices after %s", nNS*nSvc, nNS*nSvc*podsPer, time.Since(began).Round(time.Second))
	if k != nil {
		k.LogOwners(t, namespacesOf(models), "at start")
	}

	// The churn, one driver per namespace, while the shard set changes.
	start := time.Now()
	deadline := start.Add(duration)
	var wg sync.WaitGroup
	errs := make([]error, nNS)
	for i, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &driver{cs: cs, chk: chk, m: m, rng: rand.New(rand.NewPCG(seed, uint64(i))), podsPer: podsPer, deadline: deadline}
			errs[i] = d.run(ctx)
		}()
	}
	kills := map[string][]time.Time{}
	events := 0
	if k != nil {
		at := func(frac float64) { time.Sleep(time.Until(start.Add(time.Duration(frac * float64(duration))))) }
		since := func() string { return "+" + time.Since(start).Round(time.Second).String() }
		at(0.10)
		s4, s5 := k.StartShard("shard-4"), k.StartShard("shard-5")
		events += 2
		k.WaitAllOwned(t, 90*time.Second)
		framework.WaitHTTP(t, s4.HTTPURL+"/readyz", 60*time.Second)
		framework.WaitHTTP(t, s5.HTTPURL+"/readyz", 60*time.Second)
		t.Logf("%s scaled out to 5 shards", since())
		k.LogOwners(t, namespacesOf(models), "after the scale-out")
		for i, name := range []string{"shard-1", "shard-3", "shard-4"} {
			at(0.25 + 0.15*float64(i))
			k.ScaleIn(t, name)
			events++
			t.Logf("%s scaled in to %d shards (%s handed over and exited)", since(), 4-i, name)
		}
		k.LogOwners(t, namespacesOf(models), "after the scale-in")
		at(0.70)
		kills["shard-2"] = append(kills["shard-2"], time.Now())
		if err := k.Shards["shard-2"].Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		events++
		_, _ = k.Shards["shard-2"].Wait(10 * time.Second)
		t.Logf("%s SIGKILLed shard-2", since())
		k.WaitOwnsNothing(t, "shard-2")
		t.Logf("%s its partitions owned by shard-5 alone", since())
		at(0.85)
		s2 := k.StartShard("shard-2")
		events++
		k.WaitAllOwned(t, 90*time.Second)
		framework.WaitHTTP(t, s2.HTTPURL+"/readyz", 60*time.Second)
		t.Logf("%s shard-2 restarted: 2 shards", since())
		k.LogOwners(t, namespacesOf(models), "at the end")
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a churn driver: %v", err)
		}
	}
	lastChange := time.Now()
	if waitShown(t, cs, k, chk, models, 90*time.Second, "the last changes", false) {
		t.Logf("+%s every Service's slices show the test's last change, %s after it", time.Since(start).Round(time.Second),
			time.Since(lastChange).Round(time.Second))
	}

	// The end state from the API: slices against pods and Services, no duplicates.
	checkAgainstAPI(t, cs, models)
	// No shard still failing syncs now that the churn has ended.
	checkSyncErrors(t, cs, k, models)

	// Results.
	rep := chk.Report()
	t.Logf("churn: %d readiness flips, %d pod deletes, %d creates, %d relabels (a pod moved between Services), %d selector changes; %d intents, %d shown by the slices (p50 %s, p99 %s, max %s of %s); %d not shown within %s%s",
		st.flips.Load(), st.deletes.Load(), st.creates.Load(), st.relabels.Load(), st.selectors.Load(), rep.Intents, rep.Reflected,
		rep.ReflectP50.Round(time.Millisecond), rep.ReflectP99.Round(time.Millisecond), rep.ReflectMax.Round(time.Millisecond), rep.ReflectMaxOf,
		st.slow.Load(), reflectTimeout, lastSlow(st))
	t.Logf("shard events: %d", events)
	t.Logf("invariant checks: %d slice events; %d stably ready endpoints checked; violations %v; duplicate episodes (a pod in two slices of one Service): %d %s",
		rep.SliceEvents, rep.StableChecks, rep.Violations, rep.DuplicateEpisodes, rep.DuplicateOf)
	vs := chk.Violations()
	for _, v := range vs[:min(30, len(vs))] {
		if v.Kind == invariant.Moved {
			t.Logf("reported (an endpoint moved between two slices in two writes): %s", v)
		} else {
			t.Errorf("%s", v)
		}
	}
	if st.slow.Load() > 0 {
		t.Errorf("%d changes not shown by the slices within %s%s", st.slow.Load(), reflectTimeout, lastSlow(st))
	}

	checkWrites(t, k, auditLog, auditStart, nss, kills)
	stall()
	tornDown = true
	teardown(t, f, models, true)
	if t.Failed() && k != nil {
		for _, s := range k.Shards {
			t.Logf("%s log: %s", s.Name, s.LogPath)
		}
	}
	t.Logf("total %s", time.Since(began).Round(time.Second))
}

func lastSlow(st *stats) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lastSlow == "" {
		return ""
	}
	return " (last: " + st.lastSlow + ")"
}

// waitShown waits until no Service has an intent its slices do not show, and fails with
// the Services left, how their slices differ, and (the first few) their pods and slices
// as the API has them and their namespace's owner.
func waitShown(t *testing.T, cs kubernetes.Interface, k *framework.KShard, chk *invariant.Checker, models []*nsModel, timeout time.Duration, what string, fatal bool) bool {
	t.Helper()
	type left struct {
		m   *nsModel
		svc string
	}
	var ls []left
	var diffs []string
	err := framework.Poll(timeout, func(context.Context) (bool, error) {
		ls, diffs = nil, nil
		for _, m := range models {
			for _, s := range m.svcs {
				if out, _ := chk.Outstanding(m.ns, s.name); out {
					u, _ := chk.Union(m.ns, s.name)
					ls = append(ls, left{m, s.name})
					diffs = append(diffs, fmt.Sprintf("%s/%s: %s", m.ns, s.name, invariant.Diff(u, m.members(s.name))))
				}
			}
		}
		if len(ls) > 0 {
			return false, fmt.Errorf("%d Services left", len(ls))
		}
		return true, nil
	})
	if err == nil {
		return true
	}
	t.Errorf("%s not shown by every Service's slices: %v", what, err)
	for _, d := range diffs[:min(20, len(diffs))] {
		t.Errorf("  %s", d)
	}
	for _, l := range ls[:min(3, len(ls))] {
		dumpService(t, cs, k, l.m.ns, l.svc)
	}
	if fatal {
		t.FailNow()
	}
	return false
}

// dumpService logs a Service's pods and slices as the API has them, and its namespace's
// owner.
func dumpService(t *testing.T, cs kubernetes.Interface, k *framework.KShard, ns, svc string) {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "Service %s/%s:\n", ns, svc)
	if k != nil {
		o, err := k.NamespaceOwner(ctx, ns)
		fmt.Fprintf(&b, "  owner %+v (%v), partition %s\n", o, err, k.PartitionOf(ns))
	}
	if pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: svcLabel + "=" + svc}); err == nil {
		for _, p := range pods.Items {
			var readyAt string
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					readyAt = c.LastTransitionTime.Format("15:04:05")
				}
			}
			fmt.Fprintf(&b, "  pod %s rv %s group %s ready %v (since %s) ip %s\n", p.Name, p.ResourceVersion, p.Labels[groupLabel],
				podReady(&p), readyAt, p.Status.PodIP)
		}
	}
	if sl, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc}); err == nil {
		for _, es := range sl.Items {
			var eps []string
			for _, ep := range es.Endpoints {
				if ep.TargetRef != nil {
					eps = append(eps, fmt.Sprintf("%s:%v", ep.TargetRef.Name, ep.Conditions.Ready != nil && *ep.Conditions.Ready))
				}
			}
			fmt.Fprintf(&b, "  slice %s rv %s gen %d managed-by %s: %s\n", es.Name, es.ResourceVersion, es.Generation,
				es.Labels[discoveryv1.LabelManagedBy], strings.Join(eps, " "))
		}
	}
	t.Log(b.String())
}

// checkAgainstAPI compares every Service's slices with its pods as the API server has
// them (not the test's model): each pod the selector takes, with an IP, not being deleted,
// shown once per address type with its readiness; nothing else.
func checkAgainstAPI(t *testing.T, cs kubernetes.Interface, models []*nsModel) {
	t.Helper()
	ctx := context.Background()
	bad := 0
	for _, m := range models {
		svcs, err := cs.CoreV1().Services(m.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := cs.CoreV1().Pods(m.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slices, err := cs.DiscoveryV1().EndpointSlices(m.ns).List(ctx, metav1.ListOptions{LabelSelector: managedBy})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs.Items {
			sel := labels.SelectorFromSet(s.Spec.Selector)
			want := map[string]bool{}
			for _, p := range pods.Items {
				if sel.Matches(labels.Set(p.Labels)) && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
					want[p.Name] = podReady(&p)
				}
			}
			got := map[string]bool{}
			seen := map[string]string{}
			for _, es := range slices.Items {
				if es.Labels[discoveryv1.LabelServiceName] != s.Name {
					continue
				}
				for _, ep := range es.Endpoints {
					if ep.TargetRef == nil {
						continue
					}
					k := string(es.AddressType) + "/" + ep.TargetRef.Name
					if other, ok := seen[k]; ok {
						bad++
						t.Errorf("Service %s/%s: pod %s in slices %s and %s", m.ns, s.Name, ep.TargetRef.Name, other, es.Name)
					}
					seen[k] = es.Name
					got[ep.TargetRef.Name] = ep.Conditions.Ready == nil || *ep.Conditions.Ready
				}
			}
			if d := invariant.Diff(got, want); d != "" {
				bad++
				t.Errorf("Service %s/%s: slices differ from its pods: %s", m.ns, s.Name, d)
			}
			if d := invariant.Diff(want, m.members(s.Name)); d != "" {
				t.Errorf("Service %s/%s: the test's model differs from the API's pods: %s", m.ns, s.Name, d)
			}
		}
	}
	if bad == 0 {
		t.Logf("at the end every Service's slices equal its pods (from the API), no pod in two slices")
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkWrites reads this run's EndpointSlice writes from kube-apiserver's audit log and,
// with shards, checks them against the shards' ownership intervals from their logs.
func checkWrites(t *testing.T, k *framework.KShard, auditLog string, from os.FileInfo, nss map[string]bool, kills map[string][]time.Time) {
	t.Helper()
	audit, closeAudit, err := auditSince(auditLog, from)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAudit()
	writes, err := invariant.ParseAudit(audit, func(ns string) bool { return nss[ns] })
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) == 0 {
		t.Errorf("the audit log %s holds no EndpointSlice write of the run", auditLog)
		return
	}
	byUser := map[string]int{}
	for _, w := range writes {
		u := w.User
		if w.Pod != "" {
			u += " (pod " + w.Pod + ")"
		}
		byUser[fmt.Sprintf("%s %s %d", u, w.Verb, w.Code)]++
	}
	t.Logf("audit log: %d EndpointSlice write requests in the run's namespaces: %v", len(writes), sortedCounts(byUser))
	if k == nil {
		return
	}
	shardLogs := map[string]io.Reader{}
	for name, s := range k.Shards {
		lf, err := os.Open(s.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		shardLogs[name] = lf
	}
	var coordLogs []io.Reader
	for _, c := range k.Coordinators {
		lf, err := os.Open(c.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		coordLogs = append(coordLogs, lf)
	}
	intervals, err := invariant.ParseOwnership(shardLogs, coordLogs, kills)
	if err != nil {
		t.Fatal(err)
	}
	unclosed := 0
	for _, iv := range intervals {
		if iv.Unclosed {
			unclosed++
		}
	}
	if unclosed > 0 {
		t.Logf("%d ownership intervals without a release or kill before the shard worked the partition again", unclosed)
	}
	shardUser := "system:serviceaccount:" + k.PodNamespace() + ":" + k.ServiceAccount()
	vs, rep := invariant.CheckWrites(writes, shardUser, intervals, func(ns string) uint32 {
		p, err := strconv.ParseUint(k.PartitionOf(ns), 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(p)
	})
	t.Logf("writes: accepted %v, refused %v (403: the fence); by shard %v; slices written by n shards %v; %d changes of writer on one slice, each across a handoff unless reported below; %d ownership intervals from the shards' logs",
		rep.Accepted, rep.Refused, rep.ByShard, rep.SlicesByShards, rep.Handovers, len(intervals))
	for _, v := range vs[:min(30, len(vs))] {
		t.Errorf("%s", v)
	}
	if len(vs) > 30 {
		t.Errorf("… %d write violations in all", len(vs))
	}
}

func sortedCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// createNode creates the test's node, managed by kwok (which keeps it Ready, so that the
// node lifecycle controller does not mark its pods not ready), unschedulable (only the
// test's pods, bound by name, run there), deleted when the test ends.
func createNode(t *testing.T, cs kubernetes.Interface, run string) string {
	t.Helper()
	name := "es-stress-" + strings.ToLower(run)
	_, err := cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok", corev1.LabelTopologyZone: "zone-a"},
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec: corev1.NodeSpec{Unschedulable: true}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	framework.Eventually(t, 2*time.Minute, "the test's kwok node Ready", func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("not Ready")
	})
	return name
}

// teardown deletes the run's pods at once and its namespaces, and with wait waits until
// they are gone (the namespace controller, kshard's or upstream's, finishes them).
func teardown(t *testing.T, f *framework.Framework, models []*nsModel, wait bool) {
	began := time.Now()
	for _, m := range models {
		if m == nil {
			continue
		}
		if err := forceDeletePods(context.Background(), f.Client, m.ns); err != nil {
			t.Errorf("deleting the pods of %s: %v", m.ns, err)
		}
		f.DeleteNamespace(t, m.ns)
	}
	if !wait {
		return
	}
	ours := map[string]bool{}
	for _, m := range models {
		if m != nil {
			ours[m.ns] = true
		}
	}
	err := framework.Poll(3*time.Minute, func(ctx context.Context) (bool, error) {
		list, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: framework.RunLabel + "=" + f.RunID})
		if err != nil {
			return false, err
		}
		left := 0
		for _, ns := range list.Items {
			if ours[ns.Name] {
				left++
			}
		}
		if left > 0 {
			return false, fmt.Errorf("%d namespaces left", left)
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("teardown: %v", err)
		return
	}
	t.Logf("the run's %d namespaces deleted and gone in %s", len(models), time.Since(began).Round(time.Second))
}

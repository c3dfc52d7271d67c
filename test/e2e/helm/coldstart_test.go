package helm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kshard/kshard/test/framework"
)

// endpointSliceController is the managed-by value of the slices an EndpointSlice
// controller writes (upstream's and kshard's alike): kube-controller-manager runs none
// here, so a slice that carries it was written by kshard.
const endpointSliceController = "endpointslice-controller.k8s.io"

// coldStartTimeout bounds the cold start's recovery: a takeover of a Lease nobody released
// (the chart's 15 s Lease), the new leader's grace (session TTL + margin, 30 s), the
// shards' first lists and a workload's rollout, on a loaded 2-core machine.
const coldStartTimeout = 3 * time.Minute

// coldStart: a node failure that takes every coordinator and shard at once: their
// processes SIGKILLed together (a node losing power), then their pods force-deleted
// (grace 0, as for a node that is gone). That is harder than a deletion with the default
// grace, or with grace 0 alone: either leaves the processes running while the kubelet
// stops them (with grace 0 too the kubelet gives them their termination grace), so the
// shards leave, the leader releases the Lease, and the shard that owns the release
// namespace recreates the deleted pods itself within a second (the first run of this
// step saw exactly that). Here no process does anything after the kill: nothing is
// handed over, the Lease stays with the dead leader until it expires, and the peers
// Service's EndpointSlices keep the old pods' addresses, ready, which only kshard,
// running the EndpointSlice controller, would change.
//
// kshard is also the ReplicaSet controller of its own pods: with every pod gone nothing
// in the cluster recreates them. The test does what charts/README.md tells an operator to
// do then: kube-controller-manager runs its replicaset-controller again (and nothing
// else of kshard's, so that the EndpointSlices stay kshard's to repair) until the
// replacement pods exist. Then the replacements must be Ready, one coordinator lead
// (found by the shards through the election Lease, as the peers Service names the old
// pods), every partition and workload namespace be owned by the new shards, kshard
// rewrite the release's slices (the peers Service's among them) and kube-dns's with the
// new pods only, and a change of the workload made while kshard was down and one made
// after it recovered be rolled out. Each stage is logged with its time since the kill.
func (e *e2e) coldStart(t *testing.T) {
	ctx := context.Background()
	coordinators, shards := e.replicas(t, "kshard-coordinator"), e.replicas(t, "kshard-shard")
	old := map[types.UID]*corev1.Pod{}
	for _, component := range []string{"coordinator", "shard"} {
		for _, p := range e.pods(t, component) {
			old[p.UID] = p
		}
	}
	if len(old) != coordinators+shards {
		t.Fatalf("%d coordinator and shard pods before the cold start, want %d and %d", len(old), coordinators, shards)
	}
	oldPeers, err := e.sliceAddresses(ctx, namespace, "kshard-coordinator-peers")
	if err != nil {
		t.Fatal(err)
	}
	holderBefore, _ := e.leaseHolder(ctx)

	var pids []int
	for _, p := range old {
		for _, cs := range p.Status.ContainerStatuses {
			pid, err := containerProcess(cs.ContainerID)
			if err != nil {
				t.Fatalf("pod %s container %s: %v", p.Name, cs.Name, err)
			}
			pids = append(pids, pid)
		}
	}

	// The outage, and a change of the workload while no kshard runs: half the sample
	// Deployments scaled down (the rest are scaled once kshard has recovered).
	during, after := e.workload[:len(e.workload)/2], e.workload[len(e.workload)/2:]
	zero := int64(0)
	start := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("SIGKILL of pid %d: %v", pid, err)
		}
	}
	if err := e.f.Client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release + ",app.kubernetes.io/component in (coordinator,shard)"}); err != nil {
		t.Fatal(err)
	}
	if left := len(e.pods(t, "coordinator")) + len(e.pods(t, "shard")); left != 0 {
		t.Fatalf("%d coordinator and shard pods left after deleting them with grace 0", left)
	}
	e.scaleSample(t, during, 1)
	t.Logf("SIGKILLed the processes of all %d coordinator and shard pods and deleted the pods with grace 0 (the Lease held by %s); scaled the sample Deployment of %d namespaces to 1 while no kshard runs",
		len(old), holderBefore, len(during))

	// The operator's part: kube-controller-manager's ReplicaSet controller recreates the
	// pods, and is switched off again before kshard works anything (a new leader grants
	// nothing within its grace, session TTL + margin, longer than this restart).
	e.kcmAlsoRuns(t, "replicaset-controller")
	framework.Eventually(t, time.Minute, "kube-controller-manager's replicaset-controller created the replacement pods", func(ctx context.Context) (bool, error) {
		return e.replacements(t, old, coordinators, shards, false)
	})
	created := time.Since(start)
	var running []string
	for _, p := range old {
		for _, cs := range p.Status.ContainerStatuses {
			if _, err := containerProcess(cs.ContainerID); err == nil {
				running = append(running, p.Name)
			}
		}
	}
	sort.Strings(running)
	if len(running) > 0 {
		t.Fatalf("old pods whose process runs again (the kubelet restarted it before the pod's deletion reached it): %v", running)
	}
	// Who created the replacements: kube-controller-manager, as no kshard process ran.
	creators := map[string]int{}
	for _, component := range []string{"coordinator", "shard"} {
		for _, p := range e.pods(t, component) {
			for _, m := range p.ManagedFields {
				if m.Operation == metav1.ManagedFieldsOperationUpdate && m.Subresource == "" {
					creators[m.Manager]++
				}
			}
		}
	}
	if len(creators) != 1 || creators["kube-controller-manager"] == 0 {
		t.Fatalf("the replacement pods were written by %v, want kube-controller-manager alone", creators)
	}
	e.kcmAlsoRuns(t)
	if leader, err := e.leaderPod(ctx, t); err == nil {
		if a, err := assignments(ctx, leader, httpPort); err == nil && len(framework.Owners(a)) > 0 {
			t.Fatalf("kshard owned %d partitions (%s) before kube-controller-manager's replicaset-controller was off: two ReplicaSet controllers ran at once",
				len(framework.Owners(a)), shardSummary(a))
		}
	}
	kcmOff := time.Since(start)
	t.Logf("kube-controller-manager's replicaset-controller created the %d replacement pods after %s (no old process ran; their writers %v); off again (kshard's controllers only) after %s",
		len(old), created.Round(100*time.Millisecond), creators, kcmOff.Round(100*time.Millisecond))

	// The recovery, stage by stage: each is checked on every poll from when the one it
	// needs has passed, and logged with the time it was first seen.
	var leader *corev1.Pod
	var owners map[string]string
	var peersAtReady []string
	stages := []*stage{
		{name: "replacement pods Ready", check: func(ctx context.Context) error {
			if _, err := e.replacements(t, old, coordinators, shards, true); err != nil {
				return err
			}
			// A shard is Ready once the leader welcomed it: what the peers Service
			// resolved to then.
			var err error
			peersAtReady, err = e.sliceAddresses(ctx, namespace, "kshard-coordinator-peers")
			return err
		}},
		{name: "a new coordinator leads", check: func(ctx context.Context) error {
			p, err := e.leaderPod(ctx, t)
			if err != nil {
				return err
			}
			if old[p.UID] != nil {
				return fmt.Errorf("the old pod %s leads", p.Name)
			}
			leader = p
			return nil
		}},
		{name: "every partition and workload namespace owned by the new shards", after: 2, check: func(ctx context.Context) error {
			if _, err := e.owned(ctx, t, shards); err != nil {
				return err
			}
			var err error
			owners, err = e.workloadOwners(ctx, t, leader)
			return err
		}},
		{name: "EndpointSlices rewritten by kshard with the new pods", after: 1, check: func(ctx context.Context) error {
			return e.slicesRepaired(ctx, t, old)
		}},
		{name: fmt.Sprintf("the scale to 1 made during the outage rolled out (%d Deployments)", len(during)), after: 3, check: func(ctx context.Context) error {
			return e.sampleScaled(ctx, during, 1)
		}},
	}
	runStages(t, start, coldStartTimeout, stages)
	for _, s := range stages {
		t.Logf("cold start: %s after %s", s.name, s.at.Round(100*time.Millisecond))
	}
	newPeers, err := e.sliceAddresses(ctx, namespace, "kshard-coordinator-peers")
	if err != nil {
		t.Fatal(err)
	}
	holder, _ := e.leaseHolder(ctx)
	t.Logf("the peers Service's slices: %v before the kill, %v when the shards were Ready (welcomed by the leader), %v now; %s holds the Lease and leads; workload owners: %s",
		oldPeers, peersAtReady, newPeers, holder, ownerSummary(owners))

	// kshard works, not only runs: a change made now is rolled out too.
	changed := time.Now()
	e.scaleSample(t, after, 1)
	framework.Eventually(t, time.Minute, fmt.Sprintf("the scale to 1 of %d sample Deployments made after the recovery rolled out", len(after)), func(ctx context.Context) (bool, error) {
		err := e.sampleScaled(ctx, after, 1)
		return err == nil, err
	})
	t.Logf("cold start: the scale to 1 of %d Deployments made after the recovery rolled out in %s (%s after the kill)",
		len(after), time.Since(changed).Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
}

// stage is one condition of a recovery: check returns why it does not hold yet; it is
// checked once the stage numbered after (1-based; 0: none) holds, and at is when it first
// held, since the start.
type stage struct {
	name  string
	after int
	check func(ctx context.Context) error
	at    time.Duration
	done  bool
	last  error
}

// runStages polls every stage not yet done (whose needed stage is done) until all are,
// recording when each first held; after timeout it fails with every stage's state.
func runStages(t *testing.T, start time.Time, timeout time.Duration, stages []*stage) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, max(timeout-time.Since(start), time.Second), true, func(ctx context.Context) (bool, error) {
		all := true
		for _, s := range stages {
			if s.done {
				continue
			}
			if s.after > 0 && !stages[s.after-1].done {
				all = false
				continue
			}
			if s.last = s.check(ctx); s.last == nil {
				s.done, s.at = true, time.Since(start)
			} else {
				all = false
			}
		}
		return all, nil
	})
	if err != nil {
		var b strings.Builder
		for _, s := range stages {
			switch {
			case s.done:
				fmt.Fprintf(&b, "\n  %s: after %s", s.name, s.at.Round(100*time.Millisecond))
			case s.last != nil:
				fmt.Fprintf(&b, "\n  %s: NOT YET: %v", s.name, s.last)
			case s.after > 0:
				fmt.Fprintf(&b, "\n  %s: NOT YET: waits for %q", s.name, stages[s.after-1].name)
			default:
				fmt.Fprintf(&b, "\n  %s: NOT YET", s.name)
			}
		}
		t.Fatalf("the cold start did not recover within %s of the kill:%s", timeout, b.String())
	}
}

// replicas is a Deployment's spec.replicas in the release namespace.
func (e *e2e) replicas(t *testing.T, deployment string) int {
	t.Helper()
	d, err := e.f.Client.AppsV1().Deployments(namespace).Get(context.Background(), deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil {
		return 1
	}
	return int(*d.Spec.Replicas)
}

// replacements reports whether the release runs the wanted number of coordinator and
// shard pods, none of them an old one, and (with ready) all Ready with an IP.
func (e *e2e) replacements(t *testing.T, old map[types.UID]*corev1.Pod, coordinators, shards int, ready bool) (bool, error) {
	for component, want := range map[string]int{"coordinator": coordinators, "shard": shards} {
		pods := e.pods(t, component)
		var notReady []string
		for _, p := range pods {
			if old[p.UID] != nil {
				return false, fmt.Errorf("the old %s pod %s is still there", component, p.Name)
			}
			if ready && (!podReady(p) || p.Status.PodIP == "") {
				notReady = append(notReady, fmt.Sprintf("%s (%s)", p.Name, p.Status.Phase))
			}
		}
		if len(pods) != want {
			return false, fmt.Errorf("%d %s pods, want %d", len(pods), component, want)
		}
		if len(notReady) > 0 {
			return false, fmt.Errorf("%s pods not Ready: %s", component, strings.Join(notReady, ", "))
		}
	}
	return true, nil
}

// workloadOwners asks the leader who owns each workload namespace; every owner must be a
// Ready shard pod now running.
func (e *e2e) workloadOwners(ctx context.Context, t *testing.T, leader *corev1.Pod) (map[string]string, error) {
	current := map[string]bool{}
	for _, p := range e.pods(t, "shard") {
		current[p.Name] = podReady(p)
	}
	owners := map[string]string{}
	for _, ns := range e.workload {
		o, err := ownerOf(ctx, leader, ns)
		if err != nil {
			return nil, err
		}
		if !current[o.Shard] {
			return nil, fmt.Errorf("namespace %s owned by %q, no Ready shard pod", ns, o.Shard)
		}
		owners[ns] = o.Shard
	}
	return owners, nil
}

func ownerSummary(owners map[string]string) string {
	count := map[string]int{}
	for _, s := range owners {
		count[s]++
	}
	var out []string
	for s, n := range count {
		out = append(out, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// slicesRepaired checks the EndpointSlices of every Service of the release namespace and
// of kube-dns: written by an EndpointSlice controller (kshard's: the cluster runs no
// other), each endpoint a pod running now with that pod's IP and readiness, every such
// pod listed, and none of the old pods (by UID, or by an IP no current pod has).
func (e *e2e) slicesRepaired(ctx context.Context, t *testing.T, old map[types.UID]*corev1.Pod) error {
	services, err := e.f.Client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	dns, err := e.f.Client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		return err
	}
	checked := 0
	for _, svc := range append(services.Items, *dns) {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		if err := e.sliceMatchesPods(ctx, &svc, old); err != nil {
			return err
		}
		checked++
	}
	if checked < 5 { // the coordinator, peers and two metrics Services, and kube-dns
		return fmt.Errorf("only %d Services with a selector checked", checked)
	}
	return nil
}

// sliceMatchesPods compares a Service's EndpointSlices with its pods.
func (e *e2e) sliceMatchesPods(ctx context.Context, svc *corev1.Service, old map[types.UID]*corev1.Pod) error {
	pods, err := e.f.Client.CoreV1().Pods(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
	if err != nil {
		return err
	}
	want := map[types.UID]*corev1.Pod{}
	ips := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			want[p.UID] = p
			ips[p.Status.PodIP] = true
		}
	}
	slices, err := e.f.Client.DiscoveryV1().EndpointSlices(svc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc.Name})
	if err != nil {
		return err
	}
	name := svc.Namespace + "/" + svc.Name
	got := map[types.UID]bool{}
	for _, sl := range slices.Items {
		if m := sl.Labels[discoveryv1.LabelManagedBy]; m != endpointSliceController {
			return fmt.Errorf("%s: slice %s managed by %q, want %s", name, sl.Name, m, endpointSliceController)
		}
		for _, ep := range sl.Endpoints {
			addr := strings.Join(ep.Addresses, ",")
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" {
				return fmt.Errorf("%s: slice %s lists %s without a pod", name, sl.Name, addr)
			}
			if o := old[ep.TargetRef.UID]; o != nil {
				return fmt.Errorf("%s: slice %s still lists the deleted pod %s (%s)", name, sl.Name, o.Name, addr)
			}
			p := want[ep.TargetRef.UID]
			if p == nil {
				return fmt.Errorf("%s: slice %s lists pod %s (%s), no pod of the Service now", name, sl.Name, ep.TargetRef.Name, addr)
			}
			if len(ep.Addresses) != 1 || ep.Addresses[0] != p.Status.PodIP {
				return fmt.Errorf("%s: slice %s lists pod %s at %s, its IP is %s", name, sl.Name, p.Name, addr, p.Status.PodIP)
			}
			if podReady(p) && (ep.Conditions.Ready == nil || !*ep.Conditions.Ready) {
				return fmt.Errorf("%s: slice %s lists the Ready pod %s as not ready", name, sl.Name, p.Name)
			}
			got[p.UID] = true
		}
	}
	for uid, p := range want {
		if !got[uid] {
			return fmt.Errorf("%s: pod %s (%s) in no slice (%d slices)", name, p.Name, p.Status.PodIP, len(slices.Items))
		}
	}
	// An old pod's IP that no current pod has is caught by its UID above; say it plainly
	// for the IPs too, in case a slice lost its target references.
	for _, o := range old {
		if !ips[o.Status.PodIP] {
			for _, sl := range slices.Items {
				for _, ep := range sl.Endpoints {
					if len(ep.Addresses) > 0 && ep.Addresses[0] == o.Status.PodIP {
						return fmt.Errorf("%s: slice %s still lists %s, the IP of the deleted pod %s", name, sl.Name, o.Status.PodIP, o.Name)
					}
				}
			}
		}
	}
	return nil
}

// sliceAddresses lists the addresses of a Service's EndpointSlices, sorted.
func (e *e2e) sliceAddresses(ctx context.Context, ns, service string) ([]string, error) {
	slices, err := e.f.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sl := range slices.Items {
		for _, ep := range sl.Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	sort.Strings(out)
	return out, nil
}

// leaseHolder is the pod name in the coordinators' election Lease holder identity.
func (e *e2e) leaseHolder(ctx context.Context) (string, error) {
	l, err := e.f.Client.CoordinationV1().Leases(namespace).Get(ctx, "kshard-coordinator", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", errors.New("the Lease has no holder")
	}
	holder, _, _ := strings.Cut(*l.Spec.HolderIdentity, "@")
	return holder, nil
}

// scaleSample sets the replicas of the sample Deployment in each of the namespaces.
func (e *e2e) scaleSample(t *testing.T, namespaces []string, replicas int) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	for _, ns := range namespaces {
		if _, err := e.f.Client.AppsV1().Deployments(ns).Patch(context.Background(), "sample", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("scaling the sample Deployment of %s: %v", ns, err)
		}
	}
}

// sampleScaled reports why the sample Deployments of the namespaces are not yet rolled
// out at replicas: the Deployment observed and Available at that size, its ReplicaSet
// following, and that many pods left.
func (e *e2e) sampleScaled(ctx context.Context, namespaces []string, replicas int32) error {
	for _, ns := range namespaces {
		d, err := e.f.Client.AppsV1().Deployments(ns).Get(ctx, "sample", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ObservedGeneration != d.Generation || d.Status.Replicas != replicas || d.Status.AvailableReplicas != replicas || d.Status.UpdatedReplicas != replicas {
			return fmt.Errorf("%s/sample: generation %d observed %d, replicas %d, updated %d, available %d; want %d",
				ns, d.Generation, d.Status.ObservedGeneration, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, replicas)
		}
		rss, err := e.f.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=sample"})
		if err != nil {
			return err
		}
		var sum int32
		for _, rs := range rss.Items {
			if rs.Spec.Replicas != nil {
				sum += *rs.Spec.Replicas
			}
			if rs.Status.ObservedGeneration != rs.Generation || rs.Spec.Replicas != nil && rs.Status.Replicas != *rs.Spec.Replicas {
				return fmt.Errorf("%s/%s: generation %d observed %d, %d replicas of %v", ns, rs.Name, rs.Generation, rs.Status.ObservedGeneration, rs.Status.Replicas, rs.Spec.Replicas)
			}
		}
		if sum != replicas {
			return fmt.Errorf("%s: the ReplicaSets want %d pods, want %d", ns, sum, replicas)
		}
		pods, err := e.f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=sample"})
		if err != nil {
			return err
		}
		alive := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				alive++
			}
		}
		if alive != int(replicas) {
			return fmt.Errorf("%s: %d sample pods, want %d", ns, alive, replicas)
		}
	}
	return nil
}

package podgc

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/test/framework"
)

// hold is the tests' own finalizer, which keeps a deleted pod terminating.
const hold = "kshard.io/e2e-hold"

// unschedulable pods name a scheduler that does not exist: neither the scheduler nor kwok
// touches them.
func unschedulable(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{SchedulerName: "kshard-e2e-none", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

func create(t *testing.T, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := cs.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// setPhase writes the pod's status.phase (and reason) as a kubelet would.
func setPhase(t *testing.T, cs kubernetes.Interface, ns, name string, phase corev1.PodPhase, reason string) {
	t.Helper()
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.Reason = phase, reason
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// terminatedPods returns the keys of the cluster's terminated pods.
func terminatedPods(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out, nil
}

// waitNoTerminatedPods waits until the cluster has no terminated pod, which the threshold
// would count. Those of namespaces being deleted (a test run before, e.g. with -count)
// go with their namespace within seconds; one of a namespace that is not being deleted
// stays, and fails the test at once.
func waitNoTerminatedPods(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	var stay []string
	framework.Eventually(t, 90*time.Second, "no terminated pod in the cluster (the threshold is the cluster's)", func(ctx context.Context) (bool, error) {
		got, err := terminatedPods(ctx, cs)
		if err != nil || len(got) == 0 {
			return err == nil, err
		}
		for _, key := range got {
			ns, _, _ := strings.Cut(key, "/")
			n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
			if err == nil && n.DeletionTimestamp == nil {
				stay = append(stay, key)
			}
		}
		if len(stay) > 0 {
			return true, nil
		}
		return false, fmt.Errorf("terminated pods of namespaces being deleted: %v", got)
	})
	if len(stay) > 0 {
		t.Fatalf("the cluster has terminated pods outside namespaces being deleted (%v): the threshold is the cluster's", stay)
	}
}

// TestThresholdSharded: terminated pods in namespaces of several shards are counted
// together against the threshold: exactly count − threshold are deleted, evicted ones
// first and then the oldest, none of the newer; after the owner of a namespace is killed
// and its namespaces move, new terminated pods are again collected down to the threshold,
// the oldest first. Not parallel: the threshold counts every terminated pod of the cluster.
func TestThresholdSharded(t *testing.T) {
	f := framework.Get(t)
	c := framework.RunningControllers(t)
	cs := f.Client
	waitNoTerminatedPods(t, cs)
	const namespaces = 6
	var nss []string
	for range namespaces {
		ns := f.Namespace(t, nil).Name
		f.WaitDefaultServiceAccount(t, ns)
		nss = append(nss, ns)
	}
	owners := map[string]string{}
	if c.KShard != nil {
		for _, ns := range nss {
			owners[ns] = c.KShard.StableOwner(t, ns).Name
		}
		distinct := map[string]bool{}
		for _, o := range owners {
			distinct[o] = true
		}
		t.Logf("namespace owners: %v", owners)
		if len(distinct) < 2 {
			t.Fatalf("the test's namespaces are all on one shard: %v", owners)
		}
	}
	// Pods p00..p11, created in this order and spread over the namespaces (names break
	// ties of equal creation seconds the same way); p10 and p11, the newest, are evicted.
	key := func(i int) string { return fmt.Sprintf("%s/p%02d", nss[i%namespaces], i) }
	for i := range 12 {
		create(t, cs, unschedulable(nss[i%namespaces], fmt.Sprintf("p%02d", i)))
	}
	for i := range 12 {
		ns, name := nss[i%namespaces], fmt.Sprintf("p%02d", i)
		switch {
		case i >= 10:
			setPhase(t, cs, ns, name, corev1.PodFailed, "Evicted")
		case i%2 == 0:
			setPhase(t, cs, ns, name, corev1.PodSucceeded, "")
		default:
			setPhase(t, cs, ns, name, corev1.PodFailed, "")
		}
	}
	// 12 terminated, threshold 5: the 2 evicted and the 5 oldest others go.
	want := []string{key(5), key(6), key(7), key(8), key(9)}
	if len(want) != threshold {
		t.Fatalf("the test expects %d pods kept, the shards' threshold is %d", len(want), threshold)
	}
	sort.Strings(want)
	framework.Eventually(t, 90*time.Second, "terminated pods collected down to the threshold", func(ctx context.Context) (bool, error) {
		got, err := terminatedPods(ctx, cs)
		if err != nil {
			return false, err
		}
		if !slices.Equal(got, want) {
			return false, fmt.Errorf("terminated pods %v, want %v", got, want)
		}
		return true, nil
	})

	if c.KShard == nil {
		return
	}
	// The owner of p05's namespace dies; a new shard starts. Three new terminated pods
	// (the newest) make 8: the 3 oldest, p05..p07, go, whoever owns their namespaces now.
	victim := c.KShard.Shards[owners[nss[5]]]
	t.Logf("SIGKILL of %s (owner of %s)", victim.Name, nss[5])
	_ = victim.Signal(syscall.SIGKILL)
	c.KShard.StartShard(fmt.Sprintf("%s-replacement-%d", victim.Name, time.Now().Unix()%1000))
	for _, ns := range nss {
		c.KShard.StableOwner(t, ns)
	}
	for i := 12; i < 15; i++ {
		create(t, cs, unschedulable(nss[i%namespaces], fmt.Sprintf("p%02d", i)))
		setPhase(t, cs, nss[i%namespaces], fmt.Sprintf("p%02d", i), corev1.PodSucceeded, "")
	}
	want = []string{key(8), key(9), key(12), key(13), key(14)}
	sort.Strings(want)
	framework.Eventually(t, 90*time.Second, "terminated pods collected down to the threshold after the move", func(ctx context.Context) (bool, error) {
		got, err := terminatedPods(ctx, cs)
		if err != nil {
			return false, err
		}
		if !slices.Equal(got, want) {
			return false, fmt.Errorf("terminated pods %v, want %v", got, want)
		}
		return true, nil
	})
}

// kwokNode creates a kwok node of the test's own, tainted so that nothing else is
// scheduled on it, and deletes it when the test ends.
func kwokNode(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		Labels:      map[string]string{"type": "kwok-podgc-e2e", "kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kshard.io/e2e-podgc", Effect: corev1.TaintEffectNoSchedule}}}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", name, err)
		}
	})
}

// TestOrphanedPods: the pods of a deleted node, in namespaces of several shards, are
// marked Failed with DisruptionTarget (DeletionByPodGC, "PodGC: node no longer exists")
// and deleted.
func TestOrphanedPods(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	cs := f.Client
	ctx := context.Background()
	node := "kwok-podgc-" + f.RunID
	kwokNode(t, cs, node)
	type podRef struct{ ns, name string }
	var refs []podRef
	for range 3 {
		ns := f.Namespace(t, nil).Name
		f.WaitDefaultServiceAccount(t, ns)
		for j := range 2 {
			p := unschedulable(ns, fmt.Sprintf("orphan-%d", j))
			p.Spec.NodeName = node
			p.Spec.Tolerations = []corev1.Toleration{{Key: "kshard.io/e2e-podgc", Operator: corev1.TolerationOpExists}}
			create(t, cs, p)
			refs = append(refs, podRef{ns, p.Name})
		}
	}
	// Watch each namespace for the last state of its pods before they go.
	last := map[string]*corev1.Pod{}
	type ev struct {
		key string
		pod *corev1.Pod
		del bool
	}
	events := make(chan ev, 100)
	seen := map[string]bool{}
	for _, r := range refs {
		if seen[r.ns] {
			continue
		}
		seen[r.ns] = true
		w, err := cs.CoreV1().Pods(r.ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for e := range w.ResultChan() {
				if p, ok := e.Object.(*corev1.Pod); ok {
					events <- ev{p.Namespace + "/" + p.Name, p, e.Type == watch.Deleted}
				}
			}
		}()
	}
	framework.Eventually(t, 60*time.Second, "kwok runs the pods on its node", func(ctx context.Context) (bool, error) {
		for _, r := range refs {
			p, err := cs.CoreV1().Pods(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, fmt.Errorf("%s/%s: %v", r.ns, r.name, err)
			}
		}
		return true, nil
	})
	if err := cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	framework.Eventually(t, 60*time.Second, "the orphans deleted", func(context.Context) (bool, error) {
		for {
			select {
			case e := <-events:
				last[e.key] = e.pod
				if e.del {
					deleted[e.key] = true
				}
				continue
			default:
			}
			break
		}
		if len(deleted) < len(refs) {
			return false, fmt.Errorf("%d of %d deleted", len(deleted), len(refs))
		}
		return true, nil
	})
	for k, p := range last {
		if p.Status.Phase != corev1.PodFailed {
			t.Errorf("%s went %s, want Failed", k, p.Status.Phase)
		}
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.DisruptionTarget {
				cond = &p.Status.Conditions[i]
			}
		}
		if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != "DeletionByPodGC" || cond.Message != "PodGC: node no longer exists" {
			t.Errorf("%s: DisruptionTarget condition %+v", k, cond)
		}
	}
}

// TestUnscheduledTerminating: a pod deleted before it was scheduled, kept by a finalizer,
// is marked Failed and force-deleted (its finalizer still holds it; once the test removes
// it, the pod is gone).
func TestUnscheduledTerminating(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	cs := f.Client
	ctx := context.Background()
	ns := f.Namespace(t, nil).Name
	f.WaitDefaultServiceAccount(t, ns)
	p := unschedulable(ns, "never")
	p.Finalizers = []string{hold}
	p = create(t, cs, p)
	t.Cleanup(func() { // a failed run must not leave the pod held: the threshold counts it
		_, _ = cs.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	framework.Eventually(t, 60*time.Second, "the unscheduled terminating pod marked Failed", func(ctx context.Context) (bool, error) {
		var err error
		got, err = cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Status.Phase != corev1.PodFailed {
			return false, fmt.Errorf("phase %s", got.Status.Phase)
		}
		return true, nil
	})
	if got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 0 {
		t.Errorf("deletionGracePeriodSeconds %v, want 0 (force deleted)", got.DeletionGracePeriodSeconds)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == corev1.DisruptionTarget {
			t.Errorf("unexpected DisruptionTarget condition %+v", c)
		}
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the pod gone", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

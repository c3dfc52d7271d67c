package statefuldaemon

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	// label marks a run's namespaces (value: the run), so that they are deleted together.
	label = "kshard.io/bench-statefuldaemon"
	// nodeLabel marks the benchmark's kwok nodes (value: the benchmark's RunID); the
	// DaemonSets select them by it, so the cluster's own kwok nodes are not theirs.
	nodeLabel = "kshard.io/bench-statefuldaemon-node"
	image     = "registry.k8s.io/pause:3.10"
	// image2 is the template change that starts every rollout.
	image2 = "registry.k8s.io/pause:3.9"
	// createWorkers bounds the benchmark's own parallel creates and patches.
	createWorkers = 32
	// nodesReadyLimit bounds the wait for kwok to report the benchmark's nodes Ready.
	nodesReadyLimit = 5 * time.Minute
)

// --- the nodes ----------------------------------------------------------------------------

// nodeName is the i-th benchmark node of run id.
func nodeName(id string, i int) string { return fmt.Sprintf("sd-%s-node-%03d", strings.ToLower(id), i) }

// createNodes deletes the nodes an earlier, interrupted benchmark left (any value of
// nodeLabel), creates n kwok nodes labelled nodeLabel=id, waits until kwok reports every
// one Ready, and deletes them (and the Leases kwok keeps for them) when the benchmark
// ends.
func createNodes(b *testing.B, client kubernetes.Interface, id string, n int) []string {
	b.Helper()
	ctx := context.Background()
	deleteNodes(b, client, nodeLabel)
	names := make([]string, n)
	for i := range names {
		names[i] = nodeName(id, i)
	}
	b.Cleanup(func() { deleteNodes(b, client, nodeLabel+"="+id) })
	start := time.Now()
	err := framework.Parallel(n, createWorkers, func(i int) error {
		name := names[i]
		_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// As hack/cluster.sh makes its kwok nodes.
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"type": "kwok", nodeLabel: id},
		}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("creating %d kwok nodes: %v", n, err)
	}
	framework.Eventually(b, nodesReadyLimit, fmt.Sprintf("%d kwok nodes Ready", n), func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeLabel + "=" + id, ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, node := range l.Items {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready != n {
			return false, fmt.Errorf("%d of %d Ready", ready, n)
		}
		return true, nil
	})
	b.Logf("%d kwok nodes created and Ready in %s", n, time.Since(start).Round(100*time.Millisecond))
	return names
}

// deleteNodes deletes the nodes selector selects and the Leases of their names in
// kube-node-lease (kwok's heartbeats; the garbage collector, which would delete them as
// the nodes' dependents, may not run on this cluster).
func deleteNodes(b *testing.B, client kubernetes.Interface, selector string) {
	b.Helper()
	ctx := context.Background()
	l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		b.Errorf("listing nodes %s: %v", selector, err)
		return
	}
	if len(l.Items) == 0 {
		return
	}
	notFound := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if err := framework.Parallel(len(l.Items), createWorkers, func(i int) error {
		return notFound(client.CoreV1().Nodes().Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{}))
	}); err != nil {
		b.Errorf("deleting nodes %s: %v", selector, err)
	}
	if err := framework.Parallel(len(l.Items), createWorkers, func(i int) error {
		return notFound(client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{}))
	}); err != nil {
		b.Errorf("deleting the Leases of nodes %s: %v", selector, err)
	}
	b.Logf("deleted %d nodes (%s) and their Leases", len(l.Items), selector)
}

// --- the namespaces -----------------------------------------------------------------------

// createNamespaces creates names, labelled label=run, each with its "default"
// ServiceAccount: the measured processes run no serviceaccount controller, and the API
// server refuses a pod whose ServiceAccount does not exist.
func createNamespaces(b *testing.B, client kubernetes.Interface, run string, names []string) {
	b.Helper()
	ctx := context.Background()
	err := framework.Parallel(len(names), createWorkers, func(i int) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i], Labels: map[string]string{label: run, framework.RunLabel: "bench"}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := client.CoreV1().ServiceAccounts(names[i]).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		b.Fatalf("creating %d namespaces: %v", len(names), err)
	}
}

// --- the objects --------------------------------------------------------------------------

const (
	dsName  = "daemon"
	stsName = "web"
)

// newDaemonSet is a RollingUpdate DaemonSet (maxSurge 0, maxUnavailable as given) of
// pause pods on the benchmark's nodes (nodeSelector nodeLabel=id).
func newDaemonSet(run, id string, maxUnavailable intstr.IntOrString) *appsv1.DaemonSet {
	labels := map[string]string{"app": dsName}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: dsName, Labels: map[string]string{label: run}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable, MaxSurge: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{nodeLabel: id}, TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// newStatefulSet is a RollingUpdate StatefulSet of replicas pause pods with policy, no
// volume claim templates.
func newStatefulSet(run string, replicas int32, policy appsv1.PodManagementPolicyType) *appsv1.StatefulSet {
	labels := map[string]string{"app": stsName}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: stsName, Labels: map[string]string{label: run}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(replicas), ServiceName: stsName, PodManagementPolicy: policy,
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// imagePatch is the strategic merge patch that changes the template's image to image2.
var imagePatch = []byte(fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, image2))

// dsRolledOut returns nil when ds has rolled out on want nodes: the controller has
// observed its generation, every one of the nodes runs an updated, available pod, and no
// pod is misscheduled (what `kubectl rollout status` waits for, and the rest of the
// status settled). Otherwise it says what is missing.
func dsRolledOut(ds *appsv1.DaemonSet, want int32) error {
	s := ds.Status
	switch {
	case s.ObservedGeneration < ds.Generation:
		return fmt.Errorf("daemonset %s/%s: generation %d not observed (%d)", ds.Namespace, ds.Name, ds.Generation, s.ObservedGeneration)
	case s.DesiredNumberScheduled != want || s.CurrentNumberScheduled != want || s.NumberMisscheduled != 0:
		return fmt.Errorf("daemonset %s/%s: %d desired, %d scheduled, %d misscheduled, want %d nodes",
			ds.Namespace, ds.Name, s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.NumberMisscheduled, want)
	case s.UpdatedNumberScheduled != want || s.NumberReady != want || s.NumberAvailable != want || s.NumberUnavailable != 0:
		return fmt.Errorf("daemonset %s/%s: %d updated, %d ready, %d available, %d unavailable of %d",
			ds.Namespace, ds.Name, s.UpdatedNumberScheduled, s.NumberReady, s.NumberAvailable, s.NumberUnavailable, want)
	}
	return nil
}

// stsRolledOut returns nil when sts has rolled out: the controller has observed its
// generation, every replica is ready, available and of the update revision, and the
// update revision is current (what `kubectl rollout status` waits for with partition 0).
// Otherwise it says what is missing.
func stsRolledOut(sts *appsv1.StatefulSet) error {
	s, want := sts.Status, ptr.Deref(sts.Spec.Replicas, 1)
	switch {
	case s.ObservedGeneration < sts.Generation:
		return fmt.Errorf("statefulset %s/%s: generation %d not observed (%d)", sts.Namespace, sts.Name, sts.Generation, s.ObservedGeneration)
	case s.Replicas != want || s.ReadyReplicas != want || s.AvailableReplicas != want || s.UpdatedReplicas != want || s.CurrentReplicas != want:
		return fmt.Errorf("statefulset %s/%s: %d replicas, %d ready, %d available, %d updated, %d current of %d",
			sts.Namespace, sts.Name, s.Replicas, s.ReadyReplicas, s.AvailableReplicas, s.UpdatedReplicas, s.CurrentReplicas, want)
	case s.UpdateRevision == "" || s.CurrentRevision != s.UpdateRevision:
		return fmt.Errorf("statefulset %s/%s: current revision %q, update revision %q", sts.Namespace, sts.Name, s.CurrentRevision, s.UpdateRevision)
	}
	return nil
}

// kind is one of the two workloads: how to create its objects (one in each of its
// namespaces), change their template, and tell which have rolled out.
type kind struct {
	name       string // daemonSets, statefulSets
	namespaces []string
	create     func(ctx context.Context, ns string) error
	update     func(ctx context.Context, ns string) error
	// rolledOut lists the kind's objects of the run and returns, per namespace, nil for
	// a rolled-out object or what it waits for. The list is a consistent read, so an
	// object updated a moment ago is never seen with its earlier, rolled-out status.
	rolledOut func(ctx context.Context) (map[string]error, error)
}

const (
	daemonSets   = "DaemonSets"
	statefulSets = "StatefulSets"
)

func daemonSetKind(client kubernetes.Interface, run, id string, nss []string, nodes int, maxUnavailable intstr.IntOrString) kind {
	return kind{name: daemonSets, namespaces: nss,
		create: func(ctx context.Context, ns string) error {
			_, err := client.AppsV1().DaemonSets(ns).Create(ctx, newDaemonSet(run, id, maxUnavailable), metav1.CreateOptions{})
			return err
		},
		update: func(ctx context.Context, ns string) error {
			_, err := client.AppsV1().DaemonSets(ns).Patch(ctx, dsName, types.StrategicMergePatchType, imagePatch, metav1.PatchOptions{})
			return err
		},
		rolledOut: func(ctx context.Context) (map[string]error, error) {
			l, err := client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + run})
			if err != nil {
				return nil, err
			}
			out := map[string]error{}
			for i := range l.Items {
				out[l.Items[i].Namespace] = dsRolledOut(&l.Items[i], int32(nodes))
			}
			return out, nil
		}}
}

func statefulSetKind(client kubernetes.Interface, run string, nss []string, replicas int32, policy appsv1.PodManagementPolicyType) kind {
	return kind{name: statefulSets, namespaces: nss,
		create: func(ctx context.Context, ns string) error {
			_, err := client.AppsV1().StatefulSets(ns).Create(ctx, newStatefulSet(run, replicas, policy), metav1.CreateOptions{})
			return err
		},
		update: func(ctx context.Context, ns string) error {
			_, err := client.AppsV1().StatefulSets(ns).Patch(ctx, stsName, types.StrategicMergePatchType, imagePatch, metav1.PatchOptions{})
			return err
		},
		rolledOut: func(ctx context.Context) (map[string]error, error) {
			l, err := client.AppsV1().StatefulSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + run})
			if err != nil {
				return nil, err
			}
			out := map[string]error{}
			for i := range l.Items {
				out[l.Items[i].Namespace] = stsRolledOut(&l.Items[i])
			}
			return out, nil
		}}
}

// waitRolledOut polls k's objects every pollEvery until every namespace's object has
// rolled out, and returns, per namespace, when it was first seen rolled out (after
// start), and when all were. It fails b after timeout, naming how many are left and what
// one of them waits for.
func waitRolledOut(ctx context.Context, b *testing.B, k kind, start time.Time, timeout time.Duration) (done map[string]time.Duration, all time.Duration) {
	b.Helper()
	done = map[string]time.Duration{}
	deadline := start.Add(timeout)
	var last string
	for {
		states, err := k.rolledOut(ctx)
		now := time.Since(start)
		if err != nil {
			last = err.Error()
		} else {
			left := 0
			var waiting []string
			for _, ns := range k.namespaces {
				e, seen := states[ns]
				switch {
				case !seen:
					left++
					waiting = append(waiting, ns+": not listed")
				case e != nil:
					left++
					waiting = append(waiting, e.Error())
				default:
					if _, ok := done[ns]; !ok {
						done[ns] = now
					}
				}
			}
			if left == 0 {
				return done, now
			}
			sort.Strings(waiting)
			last = fmt.Sprintf("%d of %d not rolled out, e.g. %s", left, len(k.namespaces), waiting[0])
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not rolled out after %s: %s", k.name, timeout, last)
		}
		time.Sleep(pollEvery)
	}
}

package daemonset

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	image  = "registry.k8s.io/pause:3.10"
	image2 = "registry.k8s.io/pause:3.9"
	// settle bounds how long a rollout or a status may take.
	settle = 120 * time.Second
	// nodeLabel carries the test's namespace on the test's own nodes.
	nodeLabel = "kshard.io/ds-e2e"
)

// env is one test's namespace and nodes.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	e := &env{t: t, f: f, cs: f.Client, ns: f.Namespace(t, nil).Name}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	return e
}

func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s; %s\n", e.ns, framework.RunningControllers(e.t))
	if l, err := e.cs.AppsV1().DaemonSets(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range l.Items {
			fmt.Fprintf(&b, "ds %s gen=%d status=%+v\n", d.Name, d.Generation, d.Status)
		}
	}
	if l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		reasons := map[string]int{}
		for _, ev := range l.Items {
			reasons[ev.InvolvedObject.Name+" "+ev.Reason] += int(ev.Count)
		}
		fmt.Fprintf(&b, "events %v\n", reasons)
	}
	e.t.Log(b.String())
}

// nodeSpec describes a group of the test's nodes.
type nodeSpec struct {
	prefix string
	count  int
	labels map[string]string
	taints []corev1.Taint
}

// nodeName is the name of the i-th node of prefix in the test's namespace.
func (e *env) nodeName(prefix string, i int) string {
	return fmt.Sprintf("%s-%s-%03d", e.ns, prefix, i)
}

// nodes creates kwok nodes (kwok manages nodes annotated kwok.x-k8s.io/node=fake),
// labelled with the test's namespace, deletes them when the test ends, and waits until
// kwok reports them Ready.
func (e *env) nodes(specs ...nodeSpec) []string {
	e.t.Helper()
	ctx := context.Background()
	var names []string
	for _, s := range specs {
		for i := range s.count {
			names = append(names, e.node(ctx, e.nodeName(s.prefix, i), s.labels, s.taints))
		}
	}
	e.waitNodesReady(names)
	return names
}

func (e *env) node(ctx context.Context, name string, labels map[string]string, taints []corev1.Taint) string {
	e.t.Helper()
	l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok", nodeLabel: e.ns}
	for k, v := range labels {
		l[k] = v
	}
	_, err := e.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:       corev1.NodeSpec{Taints: taints},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

func (e *env) waitNodesReady(names []string) {
	e.t.Helper()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	framework.Eventually(e.t, settle, fmt.Sprintf("%d nodes Ready", len(names)), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeLabel + "=" + e.ns})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, n := range l.Items {
			if !want[n.Name] {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(names), nil
	})
}

// daemonSet creates a DaemonSet named name placing pods on the test's nodes that have
// the extra node selector.
func (e *env) daemonSet(name string, sel map[string]string, mutate ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	e.t.Helper()
	ns := map[string]string{nodeLabel: e.ns}
	for k, v := range sel {
		ns[k] = v
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{NodeSelector: ns, TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
	for _, m := range mutate {
		m(ds)
	}
	created, err := e.cs.AppsV1().DaemonSets(e.ns).Create(context.Background(), ds, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

func rolling(surge, unavailable intstr.IntOrString) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxSurge: &surge, MaxUnavailable: &unavailable}}
	}
}

// want is a DaemonSet status to wait for (observedGeneration current).
type want struct{ desired, current, ready, updated, available, misscheduled int32 }

// waitStatus waits until the DaemonSet's status is w with its generation observed.
func (e *env) waitStatus(name string, w want) *appsv1.DaemonSet {
	e.t.Helper()
	var last *appsv1.DaemonSet
	framework.Eventually(e.t, settle, fmt.Sprintf("daemonset %s status %+v", name, w), func(ctx context.Context) (bool, error) {
		ds, err := e.cs.AppsV1().DaemonSets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = ds
		s := ds.Status
		return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == w.desired &&
			s.CurrentNumberScheduled == w.current && s.NumberReady == w.ready && s.UpdatedNumberScheduled == w.updated &&
			s.NumberAvailable == w.available && s.NumberMisscheduled == w.misscheduled &&
			s.NumberUnavailable == w.desired-w.available, nil
	})
	return last
}

// all is the status of a settled DaemonSet on n nodes.
func all(n int32) want { return want{desired: n, current: n, ready: n, updated: n, available: n} }

// pods returns the DaemonSet's pods not being deleted, by node.
func (e *env) pods(name string) map[string][]corev1.Pod {
	e.t.Helper()
	l, err := e.cs.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]corev1.Pod{}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], p)
		}
	}
	return out
}

func (e *env) setImage(name, img string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, img)
	if _, err := e.cs.AppsV1().DaemonSets(e.ns).Patch(context.Background(), name, "application/strategic-merge-patch+json",
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) kubectl(args ...string) (string, error) {
	e.t.Helper()
	path, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output()
	if err != nil {
		e.t.Fatalf("hack/tools.sh path kubectl: %v", err)
	}
	out, err := exec.Command(strings.TrimSpace(string(path)), append([]string{"--kubeconfig", e.f.Kubeconfig, "-n", e.ns}, args...)...).CombinedOutput()
	e.t.Logf("kubectl %s -> err=%v\n%s", strings.Join(args, " "), err, out)
	return string(out), err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

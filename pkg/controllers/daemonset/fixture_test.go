package daemonset

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/templatehash"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose informer caches the test fills by
// hand (sample-controller style): the informers never run, so "informer lag" is simply
// not adding an object to an indexer.
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(t0)}
	controllertest.GenerateNames(f.Client, "pods")
	controllertest.StatusSubresource(f.Client, appsv1.SchemeGroupVersion.WithResource("daemonsets"))
	ctrl, err := newController(f.ControllerContext(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// actions returns the fake client's writes as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string { return controllertest.Actions(f.Client, controllertest.Writes) }

// lastStatus returns the status of the last UpdateStatus, and false without one.
func (f *fixture) lastStatus() (appsv1.DaemonSetStatus, bool) {
	dss := controllertest.StatusUpdates[*appsv1.DaemonSet](f.Client)
	if len(dss) == 0 {
		return appsv1.DaemonSetStatus{}, false
	}
	return dss[len(dss)-1].Status, true
}

// createdPods returns the pods the controller created, in order.
func (f *fixture) createdPods() []*corev1.Pod { return controllertest.Created[*corev1.Pod](f.Client) }

// createdNodes returns the nodes the created pods are pinned to, in order.
func (f *fixture) createdNodes() []string {
	var out []string
	for _, p := range f.createdPods() {
		n, err := targetNode(p)
		if err != nil {
			f.T.Fatalf("created pod %s: %v", p.Name, err)
		}
		out = append(out, n)
	}
	return out
}

// deletedPods returns the names of the pods the controller deleted, in no order.
func (f *fixture) deletedPods() []string {
	var out []string
	for _, a := range controllertest.Actions(f.Client, controllertest.Writes) {
		if name, ok := strings.CutPrefix(a, "delete pods "); ok {
			out = append(out, name)
		}
	}
	return out
}

// --- object builders ---

var selectorLabels = map[string]string{"app": "agent"}

type dsOpt func(*appsv1.DaemonSet)

func newDS(name string, opts ...dsOpt) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1,
			ResourceVersion: "1", Annotations: map[string]string{appsv1.DeprecatedTemplateGeneration: "1"}},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:1"}}},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromInt32(0))}},
			RevisionHistoryLimit: ptr.To[int32](10),
		},
	}
	for _, o := range opts {
		o(ds)
	}
	return ds
}

func withImage(img string) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = img }
}

func withSurge(surge, unavailable intstr.IntOrString) dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxSurge: &surge, MaxUnavailable: &unavailable}
	}
}

func onDelete() dsOpt {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}
}

func withNodeSelector(sel map[string]string) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = sel }
}

func withTolerations(ts ...corev1.Toleration) dsOpt {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Tolerations = ts }
}

func withMinReady(s int32) dsOpt { return func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = s } }

type nodeOpt func(*corev1.Node)

func newNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
		Labels: map[string]string{"kubernetes.io/hostname": name}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func nodeLabels(l map[string]string) nodeOpt {
	return func(n *corev1.Node) {
		for k, v := range l {
			n.Labels[k] = v
		}
	}
}

func taint(key string, effect corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect}) }
}

type podOpt func(*corev1.Pod)

// newPodOf returns ds's pod bound to node, of the revision hash (labels as the
// controller sets them), Running and Ready since an hour.
func newPodOf(name string, ds *appsv1.DaemonSet, node, hash string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			ResourceVersion: "1", Labels: map[string]string{"app": "agent", hashLabel: hash},
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}},
	}
	if ds != nil {
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady() podOpt { return func(p *corev1.Pod) { p.Status.Conditions = nil } }

func readySince(t time.Time) podOpt {
	return func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t) }
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }
}

func created(t time.Time) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

// hashOf is the revision hash of ds's current template.
func hashOf(ds *appsv1.DaemonSet) string {
	return templatehash.Compute(&ds.Spec.Template, ds.Status.CollisionCount)
}

package podgc

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose caches the test fills by hand.
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
}

// newFixture serves api from the fake API server; the caches start empty (Cache).
func newFixture(t *testing.T, opts Options, api ...runtime.Object) *fixture {
	t.Helper()
	if opts.Quarantine == 0 {
		opts.Quarantine = defaultQuarantine
	}
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), api...), clock: clocktesting.NewFakeClock(t0)}
	ctrl, err := newController(f.ControllerContext(), opts, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	return f
}

// actions returns the fake client's requests as "verb resource[/sub] name".
func (f *fixture) actions() []string { return controllertest.Actions(f.Client, controllertest.Reads) }

type podOpt func(*corev1.Pod)

func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
		ResourceVersion: "1", Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func inNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }
func onNode(n string) podOpt       { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}
func evictedPod() podOpt {
	return func(p *corev1.Pod) { p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted" }
}
func created(at time.Time) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(at) }
}
func terminating() podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
		p.Finalizers = []string{"example.com/hold"}
	}
}

type nodeOpt func(*corev1.Node)

func newNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func notReady() nodeOpt {
	return func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
}

func outOfServiceTaint() nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Effect: corev1.TaintEffectNoExecute})
	}
}

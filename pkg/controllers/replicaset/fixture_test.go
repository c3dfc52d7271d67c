package replicaset

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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
	ctrl, err := newController(f.ControllerContext(), ReplicaSets(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// actions returns the fake client's requests as "verb resource[/subresource] [name]",
// reads left out unless withReads.
func (f *fixture) actions(withReads bool) []string {
	if withReads {
		return controllertest.Actions(f.Client, controllertest.Reads)
	}
	return controllertest.Actions(f.Client, controllertest.Writes)
}

// lastStatus returns the status of the last UpdateStatus, and false without one.
func (f *fixture) lastStatus() (appsv1.ReplicaSetStatus, bool) {
	rss := controllertest.StatusUpdates[*appsv1.ReplicaSet](f.Client)
	if len(rss) == 0 {
		return appsv1.ReplicaSetStatus{}, false
	}
	return rss[len(rss)-1].Status, true
}

// --- object builders ---

var selectorLabels = map[string]string{"app": "web"}

type rsOpt func(*appsv1.ReplicaSet)

func newRS(name string, replicas int32, opts ...rsOpt) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1,
			ResourceVersion: "1"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
	for _, o := range opts {
		o(rs)
	}
	return rs
}

func withMinReady(s int32) rsOpt { return func(rs *appsv1.ReplicaSet) { rs.Spec.MinReadySeconds = s } }

func withStatus(st appsv1.ReplicaSetStatus) rsOpt {
	return func(rs *appsv1.ReplicaSet) { rs.Status = st }
}

func ownedBy(owner metav1.Object, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

type podOpt func(*corev1.Pod)

func newPodOf(name string, rs *appsv1.ReplicaSet, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			ResourceVersion: "1", Labels: map[string]string{"app": "web", "tier": "front"},
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if rs != nil {
		p.OwnerReferences = []metav1.OwnerReference{ownedBy(rs, "ReplicaSet")}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(since time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(since)}}
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }
}

func labelled(l map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = l } }

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func created(t time.Time) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

func restarts(n int32) podOpt {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: n}}
	}
}

func cost(v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[DeletionCostAnnotation] = v
	}
}

func rv(v string) podOpt { return func(p *corev1.Pod) { p.ResourceVersion = v } }

func objs(rs *appsv1.ReplicaSet, pods ...*corev1.Pod) []runtime.Object {
	return append([]runtime.Object{rs}, controllertest.Objects(pods...)...)
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// apiPods returns the pods the fake API server holds, by name.
func (f *fixture) apiPods() []*corev1.Pod {
	return controllertest.Stored[*corev1.Pod](f.T, f.Client, "ns")
}

package disruption

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	fakediscovery "k8s.io/client-go/discovery/fake"
	fakescale "k8s.io/client-go/scale/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/scale"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// widgets are a custom resource with a scale subresource; gadgets one without.
var (
	widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	gadgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
)

// fixture is a controller on a fake clientset whose caches the test fills by hand, with a
// fake scale client serving scales (the test's scales, by "resource/name") and a fake
// discovery that serves widgets with a scale subresource and gadgets without.
type fixture struct {
	*controllertest.Fixture
	ctrl   *Controller
	clock  *clocktesting.FakeClock
	scales *fakescale.FakeScaleClient
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(t0),
		scales: &fakescale.FakeScaleClient{}}
	controllertest.StatusSubresource(f.Client, policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"))
	mapper := apimeta.NewDefaultRESTMapper(nil)
	mapper.Add(widgetGVK, apimeta.RESTScopeNamespace)
	mapper.Add(gadgetGVK, apimeta.RESTScopeNamespace)
	mapper.Add(rsKind, apimeta.RESTScopeNamespace)
	mapper.Add(rcKind, apimeta.RESTScopeNamespace)
	disc := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disc.Resources = []*metav1.APIResourceList{{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
		{Name: "widgets", Namespaced: true, Kind: "Widget"},
		{Name: "widgets/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale"},
		{Name: "gadgets", Namespaced: true, Kind: "Gadget"},
	}}, {GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "replicasets", Namespaced: true, Kind: "ReplicaSet"},
		{Name: "replicasets/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale"},
	}}, {GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "replicationcontrollers", Namespaced: true, Kind: "ReplicationController"},
		{Name: "replicationcontrollers/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale"},
	}}}
	ctrl, err := newController(f.ControllerContext(), scale.Access{Scales: f.scales, Mapper: mapper, Discovery: disc},
		f.clock, StalePodDisruptionTimeout)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// serveScale makes the scale client answer a GET of resource's name with replicas and uid;
// other GETs are NotFound.
func (f *fixture) serveScale(resource, name string, uid types.UID, replicas int32) {
	f.scales.AddReactor("get", resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.GetAction).GetName() != name {
			return false, nil, nil
		}
		return true, &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid},
			Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}, nil
	})
}

// notFoundScales makes every scale GET that nothing else answered NotFound.
func (f *fixture) notFoundScales() {
	f.scales.AddReactor("get", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(a.GetResource().GroupResource(), a.(clienttesting.GetAction).GetName())
	})
}

// lastStatus returns the status of the budget's last status update, and false without one.
func (f *fixture) lastStatus() (policyv1.PodDisruptionBudgetStatus, bool) {
	ups := controllertest.StatusUpdates[*policyv1.PodDisruptionBudget](f.Client)
	if len(ups) == 0 {
		return policyv1.PodDisruptionBudgetStatus{}, false
	}
	return ups[len(ups)-1].Status, true
}

// --- object builders ---

var webLabels = map[string]string{"app": "web"}

type pdbOpt func(*policyv1.PodDisruptionBudget)

func newPDB(name string, opts ...pdbOpt) *policyv1.PodDisruptionBudget {
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1, ResourceVersion: "1"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: webLabels}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func minAvailable(v intstr.IntOrString) pdbOpt {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = &v }
}

func maxUnavailable(v intstr.IntOrString) pdbOpt {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = &v }
}

func selector(s *metav1.LabelSelector) pdbOpt {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.Selector = s }
}

func disruptedAt(pod string, at time.Time) pdbOpt {
	return func(p *policyv1.PodDisruptionBudget) {
		if p.Status.DisruptedPods == nil {
			p.Status.DisruptedPods = map[string]metav1.Time{}
		}
		p.Status.DisruptedPods[pod] = metav1.NewTime(at)
	}
}

// upToDate gives the budget the status a sync would write for these values.
func upToDate(healthy, desired, expected, allowed int32) pdbOpt {
	return func(p *policyv1.PodDisruptionBudget) {
		cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
			Reason: policyv1.InsufficientPodsReason, ObservedGeneration: p.Generation}
		if allowed > 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
		}
		p.Status = policyv1.PodDisruptionBudgetStatus{CurrentHealthy: healthy, DesiredHealthy: desired, ExpectedPods: expected,
			DisruptionsAllowed: allowed, ObservedGeneration: p.Generation, Conditions: []metav1.Condition{cond}}
	}
}

type podOpt func(*corev1.Pod)

// newPod is a Ready pod labelled app=web.
func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: webLabels, ResourceVersion: "1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }

func deleting(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func labels(l map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = l } }

// ownedBy makes the pod controlled by an object of gvk named name (uid "uid-<name>").
func ownedBy(gvk schema.GroupVersionKind, name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, *metav1.NewControllerRef(&metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, gvk))
	}
}

// disruptionTarget gives the pod a DisruptionTarget condition.
func disruptionTarget(status corev1.ConditionStatus, reason string, at time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: status,
			Reason: reason, Message: "evicted", LastTransitionTime: metav1.NewTime(at)})
	}
}

var (
	rsKind   = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	depKind  = appsv1.SchemeGroupVersion.WithKind("Deployment")
	ssKind   = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	rcKind   = corev1.SchemeGroupVersion.WithKind("ReplicationController")
	extRSKnd = schema.GroupVersionKind{Group: "extensions", Version: "v1beta1", Kind: "ReplicaSet"}
)

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "1"}
}

func newRS(name string, replicas int32, owner string) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{ObjectMeta: meta(name), Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas)}}
	if owner != "" {
		rs.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&metav1.ObjectMeta{Name: owner, UID: types.UID("uid-" + owner)}, depKind)}
	}
	return rs
}

func newDeployment(name string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: meta(name), Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas)}}
}

func newStatefulSet(name string, replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: meta(name), Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas)}}
}

func newRC(name string, replicas int32) *corev1.ReplicationController {
	return &corev1.ReplicationController{ObjectMeta: meta(name), Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To(replicas)}}
}

package horizontalpodautoscaling

import (
	"context"
	"sync"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	fakescale "k8s.io/client-go/scale/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/scale"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

var deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// fakeCalc is a replica calculator that proposes what the test says and records what it
// was asked.
type fakeCalc struct {
	mu       sync.Mutex
	replicas int32
	metric   string
	statuses []autoscalingv2.MetricStatus
	cond     *autoscalingv2.HorizontalPodAutoscalerCondition
	err      error
	calls    int
	selector labels.Selector
}

func (c *fakeCalc) ComputeReplicasForMetrics(_ context.Context, _ *autoscalingv2.HorizontalPodAutoscaler, _ *autoscalingv1.Scale,
	selector labels.Selector, _ []autoscalingv2.MetricSpec) (int32, string, []autoscalingv2.MetricStatus, time.Time, *autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	c.selector = selector
	cond := c.cond
	if cond == nil && c.replicas >= 0 {
		cond = &autoscalingv2.HorizontalPodAutoscalerCondition{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionTrue,
			Reason: "ValidMetricFound", Message: "the HPA was able to successfully calculate a replica count from " + c.metric}
	}
	return c.replicas, c.metric, c.statuses, t0, cond, c.err
}

// propose makes the calculator propose replicas from the CPU metric.
func (c *fakeCalc) propose(replicas int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replicas, c.metric, c.cond, c.err = replicas, "cpu resource utilization (percentage of request)", nil, nil
}

// fixture is a controller on a fake clientset whose caches the test fills by hand, with
// a fake scale client serving the scales of Deployments (by name, in scales) and a fake
// calculator.
type fixture struct {
	*controllertest.Fixture
	ctrl   *Controller
	clock  *clocktesting.FakeClock
	calc   *fakeCalc
	opts   Options
	scaler *fakescale.FakeScaleClient

	mu       sync.Mutex
	scales   map[string]*autoscalingv1.Scale
	scaleErr error
}

const cpuMetric = "cpu resource utilization (percentage of request)"

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(t0),
		calc: &fakeCalc{}, opts: DefaultOptions(), scales: map[string]*autoscalingv1.Scale{}}
	f.calc.propose(1)
	controllertest.StatusSubresource(f.Client, autoscalingv2.SchemeGroupVersion.WithResource("horizontalpodautoscalers"))
	f.scaler = &fakescale.FakeScaleClient{}
	f.scaler.AddReactor("get", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		name := a.(clienttesting.GetAction).GetName()
		if f.scaleErr != nil {
			return true, nil, f.scaleErr
		}
		s, ok := f.scales[name]
		if !ok {
			return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "deployments"}, name)
		}
		return true, s.DeepCopy(), nil
	})
	f.scaler.AddReactor("update", "deployments", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		s := a.(clienttesting.UpdateAction).GetObject().(*autoscalingv1.Scale).DeepCopy()
		f.scales[s.Name] = s
		return true, s.DeepCopy(), nil
	})
	f.build()
	f.Seed(objs...)
	return f
}

// build builds the controller on the fixture's (current) caches and queue.
func (f *fixture) build() {
	mapper := apimeta.NewDefaultRESTMapper([]schema.GroupVersion{deploymentGVK.GroupVersion()})
	mapper.Add(deploymentGVK, apimeta.RESTScopeNamespace)
	ctrl, err := newController(f.ControllerContext(), f.opts, scale.Access{Scales: f.scaler, Mapper: mapper}, f.calc, f.clock)
	if err != nil {
		f.T.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
}

// restart is the HPA coming to a new owner (or the process restarting): empty caches and
// memory, the same API server; objs are cached and the add handler registers the HPAs.
func (f *fixture) restart(objs ...runtime.Object) {
	f.Restart()
	f.build()
	f.Seed(objs...)
	for _, o := range objs {
		if h, ok := o.(*autoscalingv2.HorizontalPodAutoscaler); ok {
			f.ctrl.addHPA(controllertest.Logger(f.T), h)
		}
	}
	f.Queue.Keys()
}

// serveScale makes the scale of Deployment name have replicas and the selector app=web.
func (f *fixture) serveScale(name string, replicas int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scales[name] = &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: autoscalingv1.ScaleSpec{Replicas: replicas}, Status: autoscalingv1.ScaleStatus{Replicas: replicas, Selector: "app=web"}}
}

// replicas is the scale's replicas of Deployment name.
func (f *fixture) replicas(name string) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scales[name].Spec.Replicas
}

// status returns the status of the HPA's last status update, and false without one.
func (f *fixture) status() (autoscalingv2.HorizontalPodAutoscalerStatus, bool) {
	ups := controllertest.StatusUpdates[*autoscalingv2.HorizontalPodAutoscaler](f.Client)
	if len(ups) == 0 {
		return autoscalingv2.HorizontalPodAutoscalerStatus{}, false
	}
	return ups[len(ups)-1].Status, true
}

// condition returns the reason of the condition t in the last status written, "" if
// none, with "True " or "False " before it.
func (f *fixture) condition(t autoscalingv2.HorizontalPodAutoscalerConditionType) string {
	st, ok := f.status()
	if !ok {
		return ""
	}
	for _, c := range st.Conditions {
		if c.Type == t {
			return string(c.Status) + " " + c.Reason
		}
	}
	return ""
}

// syncAt advances the clock to at and syncs the HPA "ns/web".
func (f *fixture) syncAt(at time.Time) error {
	f.clock.SetTime(at)
	return f.Sync("ns/web")
}

// --- object builders ---

type hpaOpt func(*autoscalingv2.HorizontalPodAutoscaler)

func newHPA(name string, opts ...hpaOpt) *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name), Generation: 1, ResourceVersion: "1"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To[int32](1), MaxReplicas: 10,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)}}}},
		},
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

func withTarget(name string) hpaOpt {
	return func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.Name = name }
}

func withMinMax(minR, maxR int32) hpaOpt {
	return func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.MinReplicas, h.Spec.MaxReplicas = ptr.To(minR), maxR
	}
}

func withBehavior(b *autoscalingv2.HorizontalPodAutoscalerBehavior) hpaOpt {
	return func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Behavior = b }
}

func withLastScale(at time.Time, current, desired int32) hpaOpt {
	return func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Status.LastScaleTime = &metav1.Time{Time: at}
		h.Status.CurrentReplicas, h.Status.DesiredReplicas = current, desired
	}
}

func newPod(name string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbls}}
}

// rescaleEvent is the SuccessfulRescale event the HPA controller records, at at.
func rescaleEvent(hpa *autoscalingv2.HorizontalPodAutoscaler, name, message string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: hpa.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "HorizontalPodAutoscaler", Namespace: hpa.Namespace, Name: hpa.Name, UID: hpa.UID},
		Reason:         rescaleEventReason, Message: message, Type: corev1.EventTypeNormal,
		Source:        corev1.EventSource{Component: EventSource},
		LastTimestamp: metav1.Time{Time: at}, FirstTimestamp: metav1.Time{Time: at}, Count: 1,
	}
}

package replicacalc

import (
	"context"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// sampleWindow is the window of the tests' samples.
const sampleWindow = 30 * time.Second

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

// pod is a Running pod of the target (app=web) in ns, started ten minutes before t0 and
// Ready since nine, with one container "app" requesting 1 CPU and 1Gi of memory.
func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "app",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
		}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			StartTime:  &metav1.Time{Time: t0.Add(-10 * time.Minute)},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-9 * time.Minute))}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0.Add(-time.Second)} }
}

// started sets the pod's start ago before t0 (nil start time when ago < 0).
func started(ago time.Duration) podOpt {
	return func(p *corev1.Pod) {
		if ago < 0 {
			p.Status.StartTime = nil
			return
		}
		p.Status.StartTime = &metav1.Time{Time: t0.Add(-ago)}
	}
}

// readiness sets the Ready condition's status and its last transition ago before t0.
func readiness(s corev1.ConditionStatus, ago time.Duration) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: s, LastTransitionTime: metav1.NewTime(t0.Add(-ago))}}
	}
}

// neverReady: not ready, its readiness last set 10 s after its start ten minutes ago.
func neverReady() podOpt { return readiness(corev1.ConditionFalse, 10*time.Minute-10*time.Second) }

func noReadyCondition() podOpt { return func(p *corev1.Pod) { p.Status.Conditions = nil } }

// requests sets the request of r of every container ("" removes it).
func requests(r corev1.ResourceName, q string) podOpt {
	return func(p *corev1.Pod) {
		for i := range p.Spec.Containers {
			if q == "" {
				delete(p.Spec.Containers[i].Resources.Requests, r)
				continue
			}
			p.Spec.Containers[i].Resources.Requests[r] = resource.MustParse(q)
		}
	}
}

// container adds a container requesting cpu.
func container(name, cpu string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name:      name,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		})
	}
}

// samples are PodMetricsInfo taken at t0 over sampleWindow from pod name to value.
func samples(kv map[string]int64) PodMetricsInfo {
	m := PodMetricsInfo{}
	for k, v := range kv {
		m[k] = PodMetric{Timestamp: t0, Window: sampleWindow, Value: v}
	}
	return m
}

// stubMetrics is a MetricsClient serving fixed answers and recording what it was asked.
type stubMetrics struct {
	pods      PodMetricsInfo
	object    int64
	external  []int64
	timestamp time.Time
	err       error

	asked []string // "resource cpu app=web container=sidecar", "pods qps app=web verb=GET", …
}

func (s *stubMetrics) copyPods() PodMetricsInfo {
	m := make(PodMetricsInfo, len(s.pods))
	for k, v := range s.pods {
		m[k] = v
	}
	return m
}

func (s *stubMetrics) GetResourceMetric(_ context.Context, r corev1.ResourceName, namespace string, selector labels.Selector, container string) (PodMetricsInfo, time.Time, error) {
	s.asked = append(s.asked, "resource "+string(r)+" "+namespace+" "+selector.String()+" container="+container)
	if s.err != nil {
		return nil, time.Time{}, s.err
	}
	return s.copyPods(), s.timestamp, nil
}

func (s *stubMetrics) GetRawMetric(name string, namespace string, selector labels.Selector, metricSelector labels.Selector) (PodMetricsInfo, time.Time, error) {
	s.asked = append(s.asked, "pods "+name+" "+namespace+" "+selector.String()+" "+metricSelector.String())
	if s.err != nil {
		return nil, time.Time{}, s.err
	}
	return s.copyPods(), s.timestamp, nil
}

func (s *stubMetrics) GetObjectMetric(name string, namespace string, ref *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int64, time.Time, error) {
	s.asked = append(s.asked, "object "+name+" "+namespace+" "+ref.Kind+"/"+ref.Name+" "+metricSelector.String())
	if s.err != nil {
		return 0, time.Time{}, s.err
	}
	return s.object, s.timestamp, nil
}

func (s *stubMetrics) GetExternalMetric(name, namespace string, selector labels.Selector) ([]int64, time.Time, error) {
	s.asked = append(s.asked, "external "+name+" "+namespace+" "+selector.String())
	if s.err != nil {
		return []int64{}, time.Time{}, s.err
	}
	return s.external, s.timestamp, nil
}

// podLister is a pod cache holding pods.
func podLister(t testing.TB, pods ...*corev1.Pod) corelisters.PodLister {
	t.Helper()
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewPodLister(idx)
}

// newCalculator is a Calculator over m and pods with upstream's default flags, a clock
// at t0 and recorder (may be nil).
func newCalculator(t testing.TB, m MetricsClient, recorder record.EventRecorder, pods ...*corev1.Pod) *Calculator {
	return New(Config{
		Metrics:                 m,
		Pods:                    podLister(t, pods...),
		Tolerance:               DefaultTolerance,
		CPUInitializationPeriod: DefaultCPUInitializationPeriod,
		InitialReadinessDelay:   DefaultInitialReadinessDelay,
		Recorder:                recorder,
		Clock:                   clocktesting.NewFakePassiveClock(t0),
	})
}

// defaultTolerances are the flag's default in both directions.
var defaultTolerances = Tolerances{ScaleDown: DefaultTolerance, ScaleUp: DefaultTolerance}

// errorIs checks a case's error against want, the exact message it expects ("" for none),
// and reports whether the case expected an error (its other checks are then moot).
func errorIs(t *testing.T, err error, want string) bool {
	t.Helper()
	return checkError(t, err, want, func(got string) bool { return got == want })
}

// errorContains is errorIs for a want that is part of the message.
func errorContains(t *testing.T, err error, want string) bool {
	t.Helper()
	return checkError(t, err, want, func(got string) bool { return strings.Contains(got, want) })
}

func checkError(t *testing.T, err error, want string, match func(string) bool) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	if err == nil || !match(err.Error()) {
		t.Fatalf("error %v, want %q", err, want)
	}
	return true
}

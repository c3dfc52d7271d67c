package hpa

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	image = "registry.k8s.io/pause:3.10"
	// settle bounds how long a rescale or a status may take to appear: metrics-server
	// scrapes every 15 s, and the HPA syncs every 5 s.
	settle = 90 * time.Second
	// cpuUsageAnnotation is kwok's: a pod's emulated CPU usage.
	cpuUsageAnnotation = "kwok.x-k8s.io/usage-cpu"
	// externalLabel marks the ConfigMaps the metrics adapter serves external metrics from.
	externalLabel = "metrics.test.kshard.io/external"
)

// env is one test's namespace.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

// newEnv gives the test its own namespace; a failed test logs its HPAs, Deployments,
// pods and events.
func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	return envIn(t, f, f.Namespace(t, nil).Name)
}

// newEnvOn is newEnv with a namespace in a partition shard owns (KShard.NamespaceOn).
func newEnvOn(t *testing.T, k *framework.KShard, shard *framework.Shard) *env {
	t.Helper()
	f := framework.Get(t)
	return envIn(t, f, k.NamespaceOn(t, shard, nil).Name)
}

// envIn is the env of the test's namespace ns.
func envIn(t *testing.T, f *framework.Framework, ns string) *env {
	e := &env{t: t, f: f, cs: f.Client, ns: ns}
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
	if l, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, h := range l.Items {
			fmt.Fprintf(&b, "hpa %s gen=%d status=%+v\n", h.Name, h.Generation, h.Status)
		}
	}
	if l, err := e.cs.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range l.Items {
			fmt.Fprintf(&b, "deployment %s replicas=%d status=%+v\n", d.Name, ptr.Deref(d.Spec.Replicas, 1), d.Status)
		}
	}
	if l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			fmt.Fprintf(&b, "pod %s phase=%s usage=%s\n", p.Name, p.Status.Phase, p.Annotations[cpuUsageAnnotation])
		}
	}
	for _, ev := range e.events() {
		fmt.Fprintf(&b, "event %s/%s %s %s x%d from %s at %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type,
			ev.Reason, ev.Count, ev.Source.Component, ev.LastTimestamp.Format(time.RFC3339), ev.Message)
	}
	e.t.Log(b.String())
}

// events lists the namespace's events.
func (e *env) events() []corev1.Event {
	l, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Logf("list events: %v", err)
		return nil
	}
	return l.Items
}

// deployment creates a Deployment of replicas pods labelled app=name, each requesting
// 100m of CPU and, with usage set, annotated with that CPU usage.
func (e *env) deployment(name string, replicas int32, usage string) {
	e.t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// No grace: kwok has nothing to stop, and a deleted namespace's
					// controller waits for its pods' grace (half of it and a second)
					// before it looks again, which the package's end would wait for.
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
					Containers: []corev1.Container{{Name: "c", Image: image,
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
			},
		},
	}
	if usage != "" {
		d.Spec.Template.Annotations = map[string]string{cpuUsageAnnotation: usage}
	}
	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// hpa creates an HPA of the Deployment name.
func (e *env) hpa(name string, minR, maxR int32, metrics []autoscalingv2.MetricSpec, behavior *autoscalingv2.HorizontalPodAutoscalerBehavior) {
	e.t.Helper()
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To(minR), MaxReplicas: maxR, Metrics: metrics, Behavior: behavior,
		},
	}
	if _, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(e.ns).Create(context.Background(), h, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// cpuUtilization is a CPU utilisation target in percent of the requests.
func cpuUtilization(percent int32) []autoscalingv2.MetricSpec {
	return []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(percent)}}}}
}

// externalAverage is a target of perPod of the external metric name (no selector).
func externalAverage(name, perPod string) []autoscalingv2.MetricSpec {
	q := resource.MustParse(perPod)
	return []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: name},
		Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &q}}}}
}

// setExternal sets the external metric name of the namespace to value (the ConfigMap
// "external-<name>" the adapter reads).
func (e *env) setExternal(name, value string) {
	e.t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "external-" + strings.ReplaceAll(name, "_", "-"), Namespace: e.ns,
		Labels: map[string]string{externalLabel: "true"}}, Data: map[string]string{name: value}}
	_, err := e.cs.CoreV1().ConfigMaps(e.ns).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		_, err = e.cs.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// setPodsUsage annotates every pod of app=name with a CPU usage.
func (e *env) setPodsUsage(name, usage string) {
	e.t.Helper()
	ctx := context.Background()
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cpuUsageAnnotation, usage)
	for _, p := range pods.Items {
		if _, err := e.cs.CoreV1().Pods(e.ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// waitPods waits until n pods of app=name exist, none of them being deleted.
func (e *env) waitPods(name string, n int) {
	e.t.Helper()
	framework.Eventually(e.t, settle, fmt.Sprintf("%d pods of %s", n, name), func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		live := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live++
			}
		}
		if live != n {
			return false, fmt.Errorf("%d pods", live)
		}
		return true, nil
	})
}

// podsUsageBelow returns nil when metrics.k8s.io (what the HPA reads) serves the metrics
// of exactly n pods of app=name, each using less CPU than below.
func (e *env) podsUsageBelow(ctx context.Context, name string, n int, below string) error {
	mc, err := metricsclient.NewForConfig(e.f.Config)
	if err != nil {
		return err
	}
	list, err := mc.MetricsV1beta1().PodMetricses(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return err
	}
	if len(list.Items) != n {
		return fmt.Errorf("metrics of %d pods, want %d", len(list.Items), n)
	}
	limit := resource.MustParse(below)
	for _, p := range list.Items {
		for _, c := range p.Containers {
			if cpu := c.Usage[corev1.ResourceCPU]; cpu.Cmp(limit) >= 0 {
				return fmt.Errorf("pod %s uses %s of CPU", p.Name, cpu.String())
			}
		}
	}
	return nil
}

// replicas is the Deployment's spec.replicas.
func (e *env) replicas(name string) (int32, error) {
	d, err := e.cs.AppsV1().Deployments(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	return ptr.Deref(d.Spec.Replicas, 1), nil
}

// scale sets the Deployment's replicas, as kubectl scale does (the scale subresource).
func (e *env) scale(name string, replicas int32) {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.cs.AppsV1().Deployments(e.ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := e.cs.AppsV1().Deployments(e.ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitReplicas waits until the Deployment's replicas is want, and returns when the
// test saw it.
func (e *env) waitReplicas(name string, want int32, timeout time.Duration) time.Time {
	e.t.Helper()
	framework.Eventually(e.t, timeout, fmt.Sprintf("deployment %s at %d replicas", name, want), func(context.Context) (bool, error) {
		got, err := e.replicas(name)
		if err != nil {
			return false, err
		}
		if got != want {
			return false, fmt.Errorf("%d replicas", got)
		}
		return true, nil
	})
	return time.Now()
}

// getHPA reads the HPA.
func (e *env) getHPA(name string) *autoscalingv2.HorizontalPodAutoscaler {
	e.t.Helper()
	h, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// condition returns "Status Reason" of the HPA's condition t, "" without one.
func condition(h *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType) string {
	for _, c := range h.Status.Conditions {
		if c.Type == t {
			return string(c.Status) + " " + c.Reason
		}
	}
	return ""
}

// rescales returns the messages of the HPA's SuccessfulRescale events, oldest first.
func (e *env) rescales(name string) []string {
	var out []string
	evs := e.events()
	for i := range evs {
		ev := evs[i]
		if ev.InvolvedObject.Kind == "HorizontalPodAutoscaler" && ev.InvolvedObject.Name == name && ev.Reason == "SuccessfulRescale" {
			if ev.Source.Component != "horizontal-pod-autoscaler" {
				e.t.Errorf("event source %q, want horizontal-pod-autoscaler", ev.Source.Component)
			}
			out = append(out, ev.Message)
		}
	}
	return out
}

// holdAtLeast checks, polling until until, that the Deployment never has fewer than min
// replicas (a check that something does not happen for a while: nothing to wait for).
func (e *env) holdAtLeast(name string, minR int32, until time.Time) {
	e.t.Helper()
	for time.Now().Before(until) {
		got, err := e.replicas(name)
		if err != nil {
			e.t.Fatal(err)
		}
		if got < minR {
			e.t.Fatalf("deployment %s at %d replicas %s before %s: scaled down early (want at least %d until then)",
				name, got, time.Until(until).Round(time.Millisecond), until.Format(time.RFC3339Nano), minR)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// holdAtMost checks, polling until until, that the Deployment never has more than max
// replicas.
func (e *env) holdAtMost(name string, maxR int32, until time.Time) {
	e.t.Helper()
	for time.Now().Before(until) {
		got, err := e.replicas(name)
		if err != nil {
			e.t.Fatal(err)
		}
		if got > maxR {
			e.t.Fatalf("deployment %s at %d replicas %s before %s: scaled up early (want at most %d until then)",
				name, got, time.Until(until).Round(time.Millisecond), until.Format(time.RFC3339Nano), maxR)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitRescales waits until the messages of the HPA's SuccessfulRescale events satisfy
// check (events are sent after the rescale, asynchronously), failing with check's last
// error.
func (e *env) waitRescales(name string, check func(got []string) error) {
	e.t.Helper()
	framework.Eventually(e.t, settle, "the rescale events of "+name, func(context.Context) (bool, error) {
		if err := check(e.rescales(name)); err != nil {
			return false, err
		}
		return true, nil
	})
}

// exactly is a waitRescales check for exactly want.
func exactly(want ...string) func([]string) error {
	return func(got []string) error {
		if !slices.Equal(got, want) {
			return fmt.Errorf("rescales %q, want %q", got, want)
		}
		return nil
	}
}

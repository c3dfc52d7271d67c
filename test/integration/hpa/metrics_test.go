package hpa

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	"k8s.io/metrics/pkg/client/clientset/versioned"
	"k8s.io/metrics/pkg/client/custom_metrics"
	"k8s.io/metrics/pkg/client/external_metrics"

	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/metricsadapter"
)

// ensureDefaultServiceAccount creates namespace's default ServiceAccount when no
// serviceaccount controller has yet (TestMain runs none): pods need it.
func ensureDefaultServiceAccount(t *testing.T, f *framework.Framework, namespace string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	_, err := f.Client.CoreV1().ServiceAccounts(namespace).Create(context.Background(), sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func testPod(name string, labels, annotations map[string]string) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			NodeSelector:                 map[string]string{"type": "kwok"},
			Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "app", Image: "kshard.local/app:1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
				}},
			}},
		},
	}
}

// annotate merges annotations into an object's.
func annotate(annotations map[string]string) []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	return patch
}

// usage is a CPU and memory reading.
type usage struct {
	cpu, memory resource.Quantity
}

func (u usage) String() string {
	return fmt.Sprintf("cpu %s, memory %s", u.cpu.String(), u.memory.String())
}

// near reports whether got is want's CPU within 2% (metrics-server's CPU is a rate of
// kwok's counter over its scrape interval, timed by metrics-server's clock) and exactly
// want's memory (a gauge).
func (u usage) near(want usage) bool {
	got, w := float64(u.cpu.MilliValue()), float64(want.cpu.MilliValue())
	return math.Abs(got-w) <= 0.02*w && u.memory.Cmp(want.memory) == 0
}

// TestResourceMetrics: a pod's CPU and memory, set through kwok's usage annotations, come
// back from metrics.k8s.io (the HPA's resource metrics client lists PodMetrics by
// selector), and so do its node's; when the test changes the annotations the metrics
// follow.
func TestResourceMetrics(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	ctx := context.Background()
	ns := f.Namespace(t, nil).Name
	ensureDefaultServiceAccount(t, f, ns)

	// A node of the test's own, so that its usage is exactly the pod's; tainted so that
	// nothing else is scheduled there (the pod is bound by name).
	nodeName := "hpa-metrics-" + f.RunID
	node := framework.KwokMetricsNode(nodeName, nil)
	node.Spec.Taints = []corev1.Taint{{Key: "kshard.io/e2e-hpa-metrics", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := f.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The pod first, at once: once its node is gone kwok no longer finishes its
		// deletion, and the namespace would wait for it.
		zero := int64(0)
		err := f.Client.CoreV1().Pods(ns).Delete(context.Background(), "usage", metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting pod usage: %v", err)
		}
		if err := f.Client.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", nodeName, err)
		}
	})

	pod := testPod("usage", map[string]string{"app": "usage"}, map[string]string{
		framework.KwokUsageCPUAnnotation: "200m", framework.KwokUsageMemoryAnnotation: "64Mi",
	})
	pod.Spec.NodeName = nodeName
	pod.Spec.NodeSelector = nil
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	mc, err := versioned.NewForConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	// read returns the pod's usage (its one container's) and its node's.
	read := func(ctx context.Context) (podUsage, nodeUsage usage, err error) {
		list, err := mc.MetricsV1beta1().PodMetricses(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=usage"})
		if err != nil {
			return podUsage, nodeUsage, err
		}
		if len(list.Items) != 1 || len(list.Items[0].Containers) != 1 {
			return podUsage, nodeUsage, fmt.Errorf("pod metrics %+v, want one pod with one container", list.Items)
		}
		c := list.Items[0].Containers[0]
		podUsage = usage{cpu: c.Usage[corev1.ResourceCPU], memory: c.Usage[corev1.ResourceMemory]}
		nm, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return podUsage, nodeUsage, err
		}
		nodeUsage = usage{cpu: nm.Usage[corev1.ResourceCPU], memory: nm.Usage[corev1.ResourceMemory]}
		return podUsage, nodeUsage, nil
	}
	waitUsage := func(what string, timeout time.Duration, want usage) {
		t.Helper()
		start := time.Now()
		var last string
		framework.Eventually(t, timeout, what, func(ctx context.Context) (bool, error) {
			p, n, err := read(ctx)
			if err != nil {
				return false, err
			}
			last = fmt.Sprintf("pod %v, node %v", p, n)
			if !p.near(want) || !n.near(want) {
				return false, fmt.Errorf("%s, want %v for both", last, want)
			}
			return true, nil
		})
		t.Logf("%s after %s: %s", what, time.Since(start).Round(100*time.Millisecond), last)
	}

	// First metrics need the pod running and three scrapes (kwok's first CPU counter
	// reading is 0, which metrics-server drops; a rate needs two more): up to about 3 ×
	// the 15 s resolution.
	first := usage{cpu: resource.MustParse("200m"), memory: resource.MustParse("64Mi")}
	waitUsage("the pod's first metrics", 150*time.Second, first)

	// The test drives utilisation: kwok integrates the new usage from its next reading,
	// so metrics-server's next scrape reports it.
	patch := annotate(map[string]string{framework.KwokUsageCPUAnnotation: "800m", framework.KwokUsageMemoryAnnotation: "256Mi"})
	if _, err := f.Client.CoreV1().Pods(ns).Patch(ctx, "usage", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsage("the raised usage", 90*time.Second, usage{cpu: resource.MustParse("800m"), memory: resource.MustParse("256Mi")})

	patch = annotate(map[string]string{framework.KwokUsageCPUAnnotation: "50m", framework.KwokUsageMemoryAnnotation: "32Mi"})
	if _, err := f.Client.CoreV1().Pods(ns).Patch(ctx, "usage", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsage("the lowered usage", 90*time.Second, usage{cpu: resource.MustParse("50m"), memory: resource.MustParse("32Mi")})
}

// TestCustomAndExternalMetrics reads what the HPA's custom and external metrics clients
// (k8s.io/metrics, as upstream's REST metrics client builds them) request — a Pods metric
// by selector, an Object metric, an External metric by selector — through aggregation from
// the tests' adapter, as the test sets them with annotations and ConfigMaps.
func TestCustomAndExternalMetrics(t *testing.T) {
	t.Parallel()
	f := framework.Get(t)
	ctx := context.Background()
	ns := f.Namespace(t, nil).Name
	ensureDefaultServiceAccount(t, f, ns)

	metric := func(v string) map[string]string { return map[string]string{metricsadapter.Annotation("requests"): v} }
	web := map[string]string{"app": "web"}
	for _, p := range []*corev1.Pod{
		testPod("web-a", web, metric("10")),
		testPod("web-b", web, metric("30")),
		testPod("web-c", web, nil), // no value: left out, as an adapter without a series for it would
		testPod("other", map[string]string{"app": "other"}, metric("99")),
	} {
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	zero := int32(0)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{metricsadapter.Annotation("queue-length"): "120"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web-deploy"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web-deploy"}},
				Spec:       testPod("", nil, nil).Spec,
			},
		},
	}
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "jobs", Labels: map[string]string{metricsadapter.ExternalLabel: "true", "queue": "jobs"}},
			Data: map[string]string{"queue-depth": "42"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "mail", Labels: map[string]string{metricsadapter.ExternalLabel: "true", "queue": "mail"}},
			Data: map[string]string{"queue-depth": "5"}},
	} {
		if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The clients as upstream's HPA builds them: the custom metrics client picks the
	// preferred version by discovery and maps kinds with a discovery RESTMapper.
	disc, err := discovery.NewDiscoveryClientForConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	custom := custom_metrics.NewForConfig(f.Config, mapper, custom_metrics.NewAvailableAPIsGetter(disc))
	external, err := external_metrics.NewForConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}

	podGK := schema.GroupKind{Kind: "Pod"}
	podValues := func() map[string]string {
		t.Helper()
		list, err := custom.NamespacedMetrics(ns).GetForObjects(podGK, labels.SelectorFromSet(web), "requests", labels.Everything())
		if err != nil {
			t.Fatalf("pods metric requests: %v", err)
		}
		got := map[string]string{}
		for _, v := range list.Items {
			if v.Metric.Name != "requests" || v.DescribedObject.Kind != "Pod" || v.DescribedObject.Namespace != ns {
				t.Errorf("pods metric item %+v: want metric requests of a Pod in %s", v, ns)
			}
			got[v.DescribedObject.Name] = v.Value.String()
		}
		return got
	}
	if got, want := podValues(), map[string]string{"web-a": "10", "web-b": "30"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pods metric requests by app=web: %v, want %v", got, want)
	}
	if _, err := f.Client.CoreV1().Pods(ns).Patch(ctx, "web-a", types.MergePatchType, annotate(metric("15")), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := podValues(), map[string]string{"web-a": "15", "web-b": "30"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pods metric requests after web-a changed: %v, want %v", got, want)
	}

	deployGK := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	v, err := custom.NamespacedMetrics(ns).GetForObject(deployGK, "web", "queue-length", labels.Everything())
	if err != nil {
		t.Fatalf("object metric queue-length of Deployment web: %v", err)
	}
	if v.Value.String() != "120" || v.DescribedObject.Kind != "Deployment" || v.DescribedObject.Name != "web" {
		t.Errorf("object metric queue-length of Deployment web: %+v, want 120", v)
	}
	if _, err := custom.NamespacedMetrics(ns).GetForObject(deployGK, "web", "unset", labels.Everything()); !apierrors.IsNotFound(err) {
		t.Errorf("object metric unset of Deployment web: error %v, want NotFound", err)
	}

	// v1beta1 of custom metrics, which an HPA's client uses when it is the only version.
	old, err := custom_metrics.NewForVersionForConfig(f.Config, mapper, cmv1beta1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := old.NamespacedMetrics(ns).GetForObject(podGK, "web-b", "requests", labels.Everything()); err != nil || v.Value.String() != "30" {
		t.Errorf("v1beta1 pods metric requests of web-b: %v, %v; want 30", v, err)
	}

	externalValues := func(selector labels.Selector) map[string]string {
		t.Helper()
		list, err := external.NamespacedMetrics(ns).List("queue-depth", selector)
		if err != nil {
			t.Fatalf("external metric queue-depth (%s): %v", selector, err)
		}
		got := map[string]string{}
		for _, v := range list.Items {
			got[v.MetricLabels["queue"]] = v.Value.String()
		}
		return got
	}
	jobs := labels.SelectorFromSet(labels.Set{"queue": "jobs"})
	if got, want := externalValues(jobs), map[string]string{"jobs": "42"}; !reflect.DeepEqual(got, want) {
		t.Errorf("external metric queue-depth by queue=jobs: %v, want %v", got, want)
	}
	if got, want := externalValues(labels.Everything()), map[string]string{"jobs": "42", "mail": "5"}; !reflect.DeepEqual(got, want) {
		t.Errorf("external metric queue-depth, every series: %v, want %v", got, want)
	}
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{"queue-depth": "7"}})
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Patch(ctx, "jobs", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := externalValues(jobs), map[string]string{"jobs": "7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("external metric queue-depth by queue=jobs after the change: %v, want %v", got, want)
	}
}

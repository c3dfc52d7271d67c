package replicacalc

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	custommetricsv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	externalmetricsv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	resourcemetricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	customfake "k8s.io/metrics/pkg/client/custom_metrics/fake"
	externalfake "k8s.io/metrics/pkg/client/external_metrics/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// metricsWorld is what the three metrics APIs serve in a ComputeReplicasForMetrics test.
type metricsWorld struct {
	podMetrics []*resourcemetricsv1beta1.PodMetrics
	resErr     error
	// custom values by "<resource>/<name>/<metric>" ("pods/*/qps" for pods metrics);
	// a key without a value fails with customErr.
	custom    map[string][]custommetricsv1beta2.MetricValue
	customErr error
	// external values by metric name; a metric without values fails with externalErr.
	external    map[string][]string
	externalErr error
}

func (w metricsWorld) client() MetricsClient {
	custom := &customfake.FakeCustomMetricsClient{}
	custom.AddReactor("get", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ga := a.(customfake.GetForAction)
		items, ok := w.custom[ga.GetResource().Resource+"/"+ga.GetName()+"/"+ga.GetMetricName()]
		if !ok {
			return true, nil, w.customErr
		}
		return true, &custommetricsv1beta2.MetricValueList{Items: items}, nil
	})
	external := &externalfake.FakeExternalMetricsClient{}
	external.AddReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		values, ok := w.external[a.GetResource().Resource]
		if !ok {
			return true, nil, w.externalErr
		}
		list := &externalmetricsv1beta1.ExternalMetricValueList{}
		for _, v := range values {
			list.Items = append(list.Items, externalmetricsv1beta1.ExternalMetricValue{MetricName: a.GetResource().Resource, Timestamp: metav1.NewTime(t0.Add(-3 * time.Second)), Value: resource.MustParse(v)})
		}
		return true, list, nil
	})
	return NewMetricsClient(servePodMetrics(w.resErr, w.podMetrics...).MetricsV1beta1(), custom, external)
}

// cpuSamples are metrics-server samples (at t0 - 10s over 15s) of the app container's CPU.
func cpuSamples(kv ...any) []*resourcemetricsv1beta1.PodMetrics {
	var out []*resourcemetricsv1beta1.PodMetrics
	for i := 0; i < len(kv); i += 2 {
		out = append(out, podMetrics(kv[i].(string), t0.Add(-10*time.Second), 15*time.Second, cpuMem("app", kv[i+1].(string), "600Mi"), cpuMem("sidecar", "100m", "10Mi")))
	}
	return out
}

// Metric specs.
func cpuUtilization(pct int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: &pct}}}
}

func podsQPS(avg string) autoscalingv2.MetricSpec {
	q := resource.MustParse(avg)
	return autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "qps"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &q}}}
}

func objectQPS(target autoscalingv2.MetricTarget) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
		DescribedObject: *deploymentRef, Metric: autoscalingv2.MetricIdentifier{Name: "qps"}, Target: target}}
}

var jobsSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"queue": "jobs"}}

func externalQueue(target autoscalingv2.MetricTarget) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
		Metric: autoscalingv2.MetricIdentifier{Name: "queue_length", Selector: jobsSelector}, Target: target}}
}

func value(q string) autoscalingv2.MetricTarget {
	v := resource.MustParse(q)
	return autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &v}
}

func averageValue(q string) autoscalingv2.MetricTarget {
	v := resource.MustParse(q)
	return autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &v}
}

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func int32p(i int32) *int32 { return &i }

// Expected statuses.
func cpuStatus(pct int32, avg string) autoscalingv2.MetricStatus {
	return autoscalingv2.MetricStatus{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{
		Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: &pct, AverageValue: qty(avg)}}}
}

func podsStatus(avg string) autoscalingv2.MetricStatus {
	return autoscalingv2.MetricStatus{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{
		Metric: autoscalingv2.MetricIdentifier{Name: "qps"}, Current: autoscalingv2.MetricValueStatus{AverageValue: qty(avg)}}}
}

func externalStatus(current autoscalingv2.MetricValueStatus) autoscalingv2.MetricStatus {
	return autoscalingv2.MetricStatus{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricStatus{
		Metric: autoscalingv2.MetricIdentifier{Name: "queue_length", Selector: jobsSelector}, Current: current}}
}

func objectStatus(current autoscalingv2.MetricValueStatus) autoscalingv2.MetricStatus {
	return autoscalingv2.MetricStatus{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricStatus{
		DescribedObject: *deploymentRef, Metric: autoscalingv2.MetricIdentifier{Name: "qps"}, Current: current}}
}

func scalingActive(status corev1.ConditionStatus, reason, message string) *autoscalingv2.HorizontalPodAutoscalerCondition {
	return &autoscalingv2.HorizontalPodAutoscalerCondition{Type: autoscalingv2.ScalingActive, Status: status, Reason: reason, Message: message}
}

func validMetric(metric string) *autoscalingv2.HorizontalPodAutoscalerCondition {
	return scalingActive(corev1.ConditionTrue, "ValidMetricFound", "the HPA was able to successfully calculate a replica count from "+metric)
}

// observation is one call of ObserveMetricComputation.
type observation struct {
	action     ActionLabel
	err        ErrorLabel
	metricType autoscalingv2.MetricSourceType
}

func TestComputeReplicasForMetrics(t *testing.T) {
	three := []*corev1.Pod{pod("a"), pod("b"), pod("c")}
	qpsOf := func(kv ...any) []custommetricsv1beta2.MetricValue {
		var out []custommetricsv1beta2.MetricValue
		for i := 0; i < len(kv); i += 2 {
			out = append(out, customValue("Pod", kv[i].(string), kv[i+1].(string), t0.Add(-20*time.Second), nil))
		}
		return out
	}
	deploymentQPS := func(v string) map[string][]custommetricsv1beta2.MetricValue {
		return map[string][]custommetricsv1beta2.MetricValue{"deployments.apps/web/qps": {customValue("Deployment", "web", v, t0.Add(-20*time.Second), nil)}}
	}
	const cpuName = "cpu resource utilization (percentage of request)"
	const queueName = "external metric queue_length(&LabelSelector{MatchLabels:map[string]string{queue: jobs,},MatchExpressions:[]LabelSelectorRequirement{},})"
	noResourceMetrics := "failed to get cpu utilization: unable to get metrics for resource cpu: no metrics returned from resource metrics API"

	tests := []struct {
		name         string
		specs        []autoscalingv2.MetricSpec
		specReplicas int32
		status       int32 // scale.status.replicas; specReplicas when 0
		pods         []*corev1.Pod
		world        metricsWorld

		want          int32
		wantMetric    string
		wantStatuses  []autoscalingv2.MetricStatus
		wantTimestamp time.Time
		wantCondition *autoscalingv2.HorizontalPodAutoscalerCondition
		wantErr       string
		wantSpecErr   bool
		wantEvents    []string
		wantObserved  []observation
	}{
		{
			name:  "resource utilization",
			specs: []autoscalingv2.MetricSpec{cpuUtilization(50)}, specReplicas: 3, pods: three,
			world: metricsWorld{podMetrics: cpuSamples("a", "500m", "b", "600m", "c", "700m")},
			// Each pod uses its app's usage and 100m of its sidecar's (summed) of 1 CPU
			// requested: 2100m of 3 CPU, 70 %, 1.4.
			want:          5,
			wantMetric:    cpuName,
			wantStatuses:  []autoscalingv2.MetricStatus{cpuStatus(70, "700m")},
			wantTimestamp: t0.Add(-10 * time.Second),
			wantCondition: validMetric(cpuName),
			wantObserved:  []observation{{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ResourceMetricSourceType}},
		}, {
			name:         "memory average value, in binary units",
			specs:        []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceMemory, Target: averageValue("410Mi")}}},
			specReplicas: 2, pods: []*corev1.Pod{pod("a"), pod("b")},
			// 600Mi + 10Mi per pod: 1.49 → 2.98 → 3.
			world:         metricsWorld{podMetrics: cpuSamples("a", "1", "b", "1")},
			want:          3,
			wantMetric:    "memory resource",
			wantStatuses:  []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceMemory, Current: autoscalingv2.MetricValueStatus{AverageValue: qty("610Mi")}}}},
			wantTimestamp: t0.Add(-10 * time.Second),
			wantCondition: validMetric("memory resource"),
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelNone, autoscalingv2.ResourceMetricSourceType}},
		},
		{
			name: "container resource utilization: the container's usage over its request",
			specs: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricSource{
				Name: corev1.ResourceCPU, Container: "sidecar", Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: int32p(50)}}}},
			specReplicas: 3,
			pods:         []*corev1.Pod{pod("a", container("sidecar", "400m")), pod("b", container("sidecar", "400m")), pod("c", container("sidecar", "400m"))},
			// 100m of 400m: 25 %, 0.5 → 2.
			world:         metricsWorld{podMetrics: cpuSamples("a", "1", "b", "1", "c", "1")},
			want:          2,
			wantMetric:    "cpu container resource utilization (percentage of request)",
			wantStatuses:  []autoscalingv2.MetricStatus{{Type: autoscalingv2.ContainerResourceMetricSourceType, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: corev1.ResourceCPU, Container: "sidecar", Current: autoscalingv2.MetricValueStatus{AverageUtilization: int32p(25), AverageValue: qty("100m")}}}},
			wantTimestamp: t0.Add(-10 * time.Second),
			wantCondition: validMetric("cpu container resource utilization (percentage of request)"),
			wantObserved:  []observation{{ActionLabelScaleDown, ErrorLabelNone, autoscalingv2.ContainerResourceMetricSourceType}},
		},
		{
			name:  "pods metric",
			specs: []autoscalingv2.MetricSpec{podsQPS("1")}, specReplicas: 3, pods: three,
			world:         metricsWorld{custom: map[string][]custommetricsv1beta2.MetricValue{"pods/*/qps": qpsOf("a", "2", "b", "2", "c", "2")}},
			want:          6,
			wantMetric:    "pods metric qps",
			wantStatuses:  []autoscalingv2.MetricStatus{podsStatus("2")},
			wantTimestamp: t0.Add(-20 * time.Second),
			wantCondition: validMetric("pods metric qps"),
			wantObserved:  []observation{{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.PodsMetricSourceType}},
		},
		{
			name:  "object metric value: times the ready pods, no timestamp",
			specs: []autoscalingv2.MetricSpec{objectQPS(value("3"))}, specReplicas: 3, pods: three,
			world:         metricsWorld{custom: deploymentQPS("9")},
			want:          9,
			wantMetric:    "Deployment metric qps",
			wantStatuses:  []autoscalingv2.MetricStatus{objectStatus(autoscalingv2.MetricValueStatus{Value: qty("9")})},
			wantCondition: validMetric("Deployment metric qps"),
			wantObserved:  []observation{{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ObjectMetricSourceType}},
		},
		{
			name:  "object metric average value: over scale.status.replicas, described as upstream does",
			specs: []autoscalingv2.MetricSpec{objectQPS(averageValue("1"))}, specReplicas: 4, status: 3,
			world:         metricsWorld{custom: deploymentQPS("9")},
			want:          9,
			wantMetric:    "external metric qps(nil)",
			wantStatuses:  []autoscalingv2.MetricStatus{objectStatus(autoscalingv2.MetricValueStatus{AverageValue: qty("3")})},
			wantTimestamp: t0.Add(-20 * time.Second),
			wantCondition: validMetric("external metric qps(nil)"),
			wantObserved:  []observation{{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ObjectMetricSourceType}},
		},
		{
			name:  "external metric value: the sum, times the ready pods, no timestamp",
			specs: []autoscalingv2.MetricSpec{externalQueue(value("2"))}, specReplicas: 3, pods: three,
			world:         metricsWorld{external: map[string][]string{"queue_length": {"4", "2"}}},
			want:          9,
			wantMetric:    queueName,
			wantStatuses:  []autoscalingv2.MetricStatus{externalStatus(autoscalingv2.MetricValueStatus{Value: qty("6")})},
			wantCondition: validMetric(queueName),
			wantObserved:  []observation{{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ExternalMetricSourceType}},
		},
		{
			name:  "external metric average value: over scale.status.replicas",
			specs: []autoscalingv2.MetricSpec{externalQueue(averageValue("1"))}, specReplicas: 4, status: 3,
			world:         metricsWorld{external: map[string][]string{"queue_length": {"4", "2"}}},
			want:          6,
			wantMetric:    queueName,
			wantStatuses:  []autoscalingv2.MetricStatus{externalStatus(autoscalingv2.MetricValueStatus{AverageValue: qty("2")})},
			wantTimestamp: t0.Add(-3 * time.Second),
			wantCondition: validMetric(queueName),
			wantObserved:  []observation{{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ExternalMetricSourceType}},
		},
		{
			name:  "from zero replicas: an object metric's ratio rounded up",
			specs: []autoscalingv2.MetricSpec{objectQPS(value("4"))}, specReplicas: 0,
			world:         metricsWorld{custom: deploymentQPS("9")},
			want:          3,
			wantMetric:    "Deployment metric qps",
			wantStatuses:  []autoscalingv2.MetricStatus{objectStatus(autoscalingv2.MetricValueStatus{Value: qty("9")})},
			wantCondition: validMetric("Deployment metric qps"),
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelNone, autoscalingv2.ObjectMetricSourceType}},
		},
		{
			name:  "the largest proposal wins, with its metric and timestamp",
			specs: []autoscalingv2.MetricSpec{cpuUtilization(50), externalQueue(averageValue("1")), podsQPS("1")}, specReplicas: 3, pods: three,
			world: metricsWorld{
				podMetrics: cpuSamples("a", "500m", "b", "600m", "c", "700m"),
				external:   map[string][]string{"queue_length": {"4", "3"}},
				custom:     map[string][]custommetricsv1beta2.MetricValue{"pods/*/qps": qpsOf("a", "2", "b", "2", "c", "2")},
			},
			want:       7,
			wantMetric: queueName,
			wantStatuses: []autoscalingv2.MetricStatus{
				cpuStatus(70, "700m"),
				externalStatus(autoscalingv2.MetricValueStatus{AverageValue: qty("2334m")}),
				podsStatus("2"),
			},
			wantTimestamp: t0.Add(-3 * time.Second),
			wantCondition: validMetric(queueName),
			wantObserved: []observation{
				{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ResourceMetricSourceType},
				{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.ExternalMetricSourceType},
				{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.PodsMetricSourceType},
			},
		},
		{
			name:  "a failing metric and a scale-up: the count, ValidMetricFound, and the error",
			specs: []autoscalingv2.MetricSpec{cpuUtilization(50), podsQPS("1")}, specReplicas: 3, pods: three,
			world:         metricsWorld{custom: map[string][]custommetricsv1beta2.MetricValue{"pods/*/qps": qpsOf("a", "2", "b", "2", "c", "2")}},
			want:          6,
			wantMetric:    "pods metric qps",
			wantStatuses:  []autoscalingv2.MetricStatus{{}, podsStatus("2")},
			wantTimestamp: t0.Add(-20 * time.Second),
			wantCondition: validMetric("pods metric qps"),
			wantErr:       "invalid metrics (1 invalid out of 2), first error is: failed to get cpu resource metric value: " + noResourceMetrics,
			wantEvents:    []string{"Warning FailedGetResourceMetric " + noResourceMetrics},
			wantObserved: []observation{
				{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ResourceMetricSourceType},
				{ActionLabelScaleUp, ErrorLabelNone, autoscalingv2.PodsMetricSourceType},
			},
		},
		{
			name:  "a failing metric and the others at scale.spec.replicas: the count",
			specs: []autoscalingv2.MetricSpec{podsQPS("1"), cpuUtilization(50)}, specReplicas: 3, pods: three,
			world:         metricsWorld{custom: map[string][]custommetricsv1beta2.MetricValue{"pods/*/qps": qpsOf("a", "1", "b", "1", "c", "1")}},
			want:          3,
			wantMetric:    "pods metric qps",
			wantStatuses:  []autoscalingv2.MetricStatus{podsStatus("1"), {}},
			wantTimestamp: t0.Add(-20 * time.Second),
			wantCondition: validMetric("pods metric qps"),
			wantErr:       "invalid metrics (1 invalid out of 2), first error is: failed to get cpu resource metric value: " + noResourceMetrics,
			wantEvents:    []string{"Warning FailedGetResourceMetric " + noResourceMetrics},
			wantObserved: []observation{
				{ActionLabelNone, ErrorLabelNone, autoscalingv2.PodsMetricSourceType},
				{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ResourceMetricSourceType},
			},
		},
		{
			name:  "a failing metric and a scale-down: -1 and the failure's condition",
			specs: []autoscalingv2.MetricSpec{cpuUtilization(50), podsQPS("1")}, specReplicas: 3, pods: three,
			world:         metricsWorld{custom: map[string][]custommetricsv1beta2.MetricValue{"pods/*/qps": qpsOf("a", "100m", "b", "100m", "c", "100m")}},
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{{}, podsStatus("100m")},
			wantCondition: scalingActive(corev1.ConditionFalse, "FailedGetResourceMetric", "the HPA was unable to compute the replica count: "+noResourceMetrics),
			wantErr:       "invalid metrics (1 invalid out of 2), first error is: failed to get cpu resource metric value: " + noResourceMetrics,
			wantEvents:    []string{"Warning FailedGetResourceMetric " + noResourceMetrics},
			wantObserved: []observation{
				{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ResourceMetricSourceType},
				{ActionLabelScaleDown, ErrorLabelNone, autoscalingv2.PodsMetricSourceType},
			},
		},
		{
			name:  "every metric fails: the first failure's condition, an event each",
			specs: []autoscalingv2.MetricSpec{objectQPS(value("3")), externalQueue(value("1"))}, specReplicas: 3, pods: three,
			world:        metricsWorld{customErr: errors.New("boom"), externalErr: errors.New("bang")},
			want:         -1,
			wantStatuses: []autoscalingv2.MetricStatus{{}, {}},
			wantCondition: scalingActive(corev1.ConditionFalse, "FailedGetObjectMetric",
				"the HPA was unable to compute the replica count: unable to get metric qps on Deployment team-a/web: unable to fetch metrics from custom metrics API: boom"),
			wantErr: "invalid metrics (2 invalid out of 2), first error is: failed to get object metric value: unable to get metric qps on Deployment team-a/web: unable to fetch metrics from custom metrics API: boom",
			wantEvents: []string{
				"Warning FailedGetObjectMetric unable to get metric qps on Deployment team-a/web: unable to fetch metrics from custom metrics API: boom",
				"Warning FailedGetExternalMetric unable to get external metric team-a/queue_length/&LabelSelector{MatchLabels:map[string]string{queue: jobs,},MatchExpressions:[]LabelSelectorRequirement{},}: unable to fetch metrics from external metrics API: bang",
			},
			wantObserved: []observation{
				{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ObjectMetricSourceType},
				{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ExternalMetricSourceType},
			},
		},
		{
			name:  "an unknown metric source type is a spec error",
			specs: []autoscalingv2.MetricSpec{{Type: "Foo"}}, specReplicas: 3,
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{{}},
			wantCondition: scalingActive(corev1.ConditionFalse, "InvalidMetricSourceType", `the HPA was unable to compute the replica count: unknown metric source type "Foo"`),
			wantErr:       `invalid metrics (1 invalid out of 1), first error is: unknown metric source type "Foo"`,
			wantSpecErr:   true,
			wantEvents:    []string{`Warning InvalidMetricSourceType unknown metric source type "Foo"`},
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelSpec, "Foo"}},
		},
		{
			name:  "an object metric without a value or average value target",
			specs: []autoscalingv2.MetricSpec{objectQPS(autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: int32p(50)})}, specReplicas: 3,
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{{}},
			wantCondition: scalingActive(corev1.ConditionFalse, "FailedGetObjectMetric", "the HPA was unable to compute the replica count: invalid object metric source: neither a value target nor an average value target was set"),
			wantErr:       "invalid metrics (1 invalid out of 1), first error is: failed to get object metric value: invalid object metric source: neither a value target nor an average value target was set",
			wantEvents:    []string{"Warning FailedGetObjectMetric invalid object metric source: neither a value target nor an average value target was set"},
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ObjectMetricSourceType}},
		},
		{
			name: "a resource metric without a target",
			specs: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType}}}},
			specReplicas:  3,
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{{}},
			wantCondition: scalingActive(corev1.ConditionFalse, "FailedGetResourceMetric", "the HPA was unable to compute the replica count: invalid resource metric source: neither an average utilization target nor an average value (usage) target was set"),
			wantErr:       "invalid metrics (1 invalid out of 1), first error is: failed to get cpu resource metric value: invalid resource metric source: neither an average utilization target nor an average value (usage) target was set",
			wantEvents:    []string{"Warning FailedGetResourceMetric invalid resource metric source: neither an average utilization target nor an average value (usage) target was set"},
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ResourceMetricSourceType}},
		},
		{
			name: "an external metric with an invalid selector",
			specs: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue_length", Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "q", Operator: "Near"}}}},
				Target: value("1")}}},
			specReplicas:  3,
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{{}},
			wantCondition: scalingActive(corev1.ConditionFalse, "FailedGetExternalMetric", `the HPA was unable to compute the replica count: "Near" is not a valid label selector operator`),
			wantErr:       `invalid metrics (1 invalid out of 1), first error is: failed to get queue_length external metric value: failed to get external metric queue_length: "Near" is not a valid label selector operator`,
			wantEvents:    []string{`Warning FailedGetExternalMetric "Near" is not a valid label selector operator`},
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelInternal, autoscalingv2.ExternalMetricSourceType}},
		},
		{
			name:          "a pods metric without an average value target (refused by the API server) fails, no panic",
			specs:         []autoscalingv2.MetricSpec{{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: "qps"}}}},
			specReplicas:  3,
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{{}},
			wantCondition: scalingActive(corev1.ConditionFalse, "FailedGetPodsMetric", `the HPA was unable to compute the replica count: metric source of type "Pods" has no pods average value target`),
			wantErr:       `invalid metrics (1 invalid out of 1), first error is: metric source of type "Pods" has no pods average value target`,
			wantSpecErr:   true,
			wantEvents:    []string{`Warning FailedGetPodsMetric metric source of type "Pods" has no pods average value target`},
			wantObserved:  []observation{{ActionLabelNone, ErrorLabelSpec, autoscalingv2.PodsMetricSourceType}},
		},
		{
			name:          "no metrics: -1, an empty condition and no error, as upstream",
			specReplicas:  3,
			want:          -1,
			wantStatuses:  []autoscalingv2.MetricStatus{},
			wantCondition: &autoscalingv2.HorizontalPodAutoscalerCondition{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			recorder := record.NewFakeRecorder(10)
			var observed []observation
			c := New(Config{
				Metrics: tc.world.client(), Pods: podLister(t, tc.pods...),
				Tolerance: DefaultTolerance, CPUInitializationPeriod: DefaultCPUInitializationPeriod, InitialReadinessDelay: DefaultInitialReadinessDelay,
				Recorder: recorder, Clock: clocktesting.NewFakePassiveClock(t0),
				ObserveMetricComputation: func(a ActionLabel, e ErrorLabel, _ time.Duration, mt autoscalingv2.MetricSourceType) {
					observed = append(observed, observation{a, e, mt})
				},
			})
			hpa := &autoscalingv2.HorizontalPodAutoscaler{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
				Spec:       autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: *deploymentRef, MaxReplicas: 100, Metrics: tc.specs},
				Status:     autoscalingv2.HorizontalPodAutoscalerStatus{CurrentReplicas: 3},
			}
			before := hpa.DeepCopy()
			status := tc.status
			if status == 0 {
				status = tc.specReplicas
			}
			scale := &autoscalingv1.Scale{
				Spec:   autoscalingv1.ScaleSpec{Replicas: tc.specReplicas},
				Status: autoscalingv1.ScaleStatus{Replicas: status, Selector: "app=web"},
			}
			got, metric, statuses, ts, cond, err := c.ComputeReplicasForMetrics(testContext(t), hpa, scale, webSelector, tc.specs)

			if tc.wantErr == "" && err != nil {
				t.Errorf("error %v", err)
			}
			if tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if errors.Is(err, ErrSpec) != tc.wantSpecErr {
				t.Errorf("errors.Is(err, ErrSpec) = %v, want %v", !tc.wantSpecErr, tc.wantSpecErr)
			}
			if got != tc.want || metric != tc.wantMetric || !ts.Equal(tc.wantTimestamp) {
				t.Errorf("got %d from %q at %v, want %d from %q at %v", got, metric, ts, tc.want, tc.wantMetric, tc.wantTimestamp)
			}
			if g, w := asJSON(t, statuses), asJSON(t, tc.wantStatuses); g != w {
				t.Errorf("statuses\n%s\nwant\n%s", g, w)
			}
			if !reflect.DeepEqual(cond, tc.wantCondition) {
				t.Errorf("condition %+v, want %+v", cond, tc.wantCondition)
			}
			if events := drain(recorder); !reflect.DeepEqual(events, tc.wantEvents) {
				t.Errorf("events %q, want %q", events, tc.wantEvents)
			}
			if !reflect.DeepEqual(observed, tc.wantObserved) {
				t.Errorf("observed %v, want %v", observed, tc.wantObserved)
			}
			if !reflect.DeepEqual(hpa, before) {
				t.Error("the HPA was modified")
			}
		})
	}
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// drain returns the events recorded so far.
func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

package replicacalc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// Defaults of kube-controller-manager 1.37's HPA flags that the calculator reads.
const (
	// DefaultTolerance is --horizontal-pod-autoscaler-tolerance's default: a usage ratio
	// within 10 % of 1 changes nothing.
	DefaultTolerance = 0.1
	// DefaultCPUInitializationPeriod is --horizontal-pod-autoscaler-cpu-initialization-period's
	// default: for this long after a pod starts, a CPU sample counts only if the pod is
	// ready and the sample was taken a whole window after it became so.
	DefaultCPUInitializationPeriod = 5 * time.Minute
	// DefaultInitialReadinessDelay is --horizontal-pod-autoscaler-initial-readiness-delay's
	// default: a pod not ready after its initialization period whose readiness last
	// changed within this long of its start has never been ready, and its CPU sample is
	// not counted.
	DefaultInitialReadinessDelay = 30 * time.Second
)

// Config is what a Calculator needs.
type Config struct {
	// Metrics reads the metrics APIs.
	Metrics MetricsClient
	// Pods lists the pods a target's selector matches (the shard's pod cache).
	Pods corelisters.PodLister
	// Tolerance is --horizontal-pod-autoscaler-tolerance, for an HPA whose behavior sets
	// no tolerance of its own.
	Tolerance float64
	// CPUInitializationPeriod is --horizontal-pod-autoscaler-cpu-initialization-period.
	CPUInitializationPeriod time.Duration
	// InitialReadinessDelay is --horizontal-pod-autoscaler-initial-readiness-delay.
	InitialReadinessDelay time.Duration
	// Recorder records the Warning event of a metric that fails, as upstream records it
	// from the metric computation. Nil records none.
	Recorder record.EventRecorder
	// Clock is read for the pods' initialization windows; nil is the real clock.
	Clock clock.PassiveClock
	// ObserveMetricComputation, when set, is called once per metric computed, with
	// upstream's labels of horizontal_pod_autoscaler_controller_metric_computation_total
	// and _duration_seconds (action, error, metric_type) and the time it took.
	ObserveMetricComputation func(action ActionLabel, errLabel ErrorLabel, took time.Duration, metricType autoscalingv2.MetricSourceType)
}

// Calculator computes replica counts from metrics; see the package documentation. It
// keeps no state and is safe for concurrent use.
type Calculator struct {
	metrics                 MetricsClient
	pods                    corelisters.PodLister
	tolerance               float64
	cpuInitializationPeriod time.Duration
	initialReadinessDelay   time.Duration
	recorder                record.EventRecorder
	clock                   clock.PassiveClock
	observe                 func(ActionLabel, ErrorLabel, time.Duration, autoscalingv2.MetricSourceType)
}

// New returns a Calculator for cfg.
func New(cfg Config) *Calculator {
	c := &Calculator{
		metrics:                 cfg.Metrics,
		pods:                    cfg.Pods,
		tolerance:               cfg.Tolerance,
		cpuInitializationPeriod: cfg.CPUInitializationPeriod,
		initialReadinessDelay:   cfg.InitialReadinessDelay,
		recorder:                cfg.Recorder,
		clock:                   cfg.Clock,
		observe:                 cfg.ObserveMetricComputation,
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	return c
}

// Tolerances are how far a usage ratio may fall below 1 (ScaleDown) or rise above it
// (ScaleUp) and change nothing, as fractions (0.1 is 10 %).
type Tolerances struct {
	ScaleDown float64
	ScaleUp   float64
}

// String is upstream's rendering, which the controller logs.
func (t Tolerances) String() string {
	return fmt.Sprintf("[down:%.1f%%, up:%.1f%%]", t.ScaleDown*100., t.ScaleUp*100.)
}

// within reports whether ratio changes nothing.
func (t Tolerances) within(ratio float64) bool {
	return 1.0-t.ScaleDown <= ratio && ratio <= 1.0+t.ScaleUp
}

// TolerancesFor returns hpa's tolerances: spec.behavior's scaleDown and scaleUp tolerance
// where set, else the Calculator's (the flag's). HPAConfigurableTolerance is GA and
// locked on in 1.37, so the fields are always honoured.
func (c *Calculator) TolerancesFor(hpa *autoscalingv2.HorizontalPodAutoscaler) Tolerances {
	t := Tolerances{ScaleDown: c.tolerance, ScaleUp: c.tolerance}
	b := hpa.Spec.Behavior
	if b == nil {
		return t
	}
	if b.ScaleDown != nil && b.ScaleDown.Tolerance != nil {
		t.ScaleDown = b.ScaleDown.Tolerance.AsApproximateFloat64()
	}
	if b.ScaleUp != nil && b.ScaleUp.Tolerance != nil {
		t.ScaleUp = b.ScaleUp.Tolerance.AsApproximateFloat64()
	}
	return t
}

// GetResourceReplicas proposes a replica count for a target utilization (percent of
// request) of resource by the pods selector matches in namespace (of their container
// named container when it is not empty). It returns the proposal, the current
// utilization, the current average usage (milli-units) and the metrics' timestamp.
func (c *Calculator) GetResourceReplicas(ctx context.Context, currentReplicas int32, targetUtilization int32, resource corev1.ResourceName, tolerances Tolerances, namespace string, selector labels.Selector, container string) (replicas int32, utilization int32, rawUtilization int64, timestamp time.Time, err error) {
	metrics, timestamp, err := c.metrics.GetResourceMetric(ctx, resource, namespace, selector, container)
	if err != nil {
		return 0, 0, 0, time.Time{}, fmt.Errorf("unable to get metrics for resource %s: %w", resource, err)
	}
	pods, err := c.listPods(namespace, selector)
	if err != nil {
		return 0, 0, 0, time.Time{}, err
	}
	g := c.groupPods(pods, metrics, resource)
	if len(metrics) == 0 {
		return 0, 0, 0, time.Time{}, errNoTargetedMetrics
	}
	requests, err := calculateRequests(pods, container, resource)
	if err != nil {
		return 0, 0, 0, time.Time{}, err
	}
	ratio, utilization, rawUtilization, err := resourceUtilizationRatio(metrics, requests, targetUtilization)
	if err != nil {
		return 0, 0, 0, time.Time{}, err
	}
	// On a scale-down a missing pod counts as using its request, or the target when the
	// target is above 100 %.
	fallback := int64(max(100, targetUtilization))
	replicas, err = propose(currentReplicas, ratio, g, metrics, tolerances,
		func(pod string) int64 { return requests[pod] * fallback / 100 },
		func(m PodMetricsInfo) (float64, error) {
			r, _, _, err := resourceUtilizationRatio(m, requests, targetUtilization)
			return r, err
		})
	if err != nil {
		return 0, utilization, rawUtilization, time.Time{}, err
	}
	return replicas, utilization, rawUtilization, timestamp, nil
}

// GetRawResourceReplicas proposes a replica count for a target average usage (milli-
// units) of resource by the pods selector matches in namespace (of their container named
// container when it is not empty). It returns the proposal, the current average usage and
// the metrics' timestamp.
func (c *Calculator) GetRawResourceReplicas(ctx context.Context, currentReplicas int32, targetUsage int64, resource corev1.ResourceName, tolerances Tolerances, namespace string, selector labels.Selector, container string) (replicas int32, usage int64, timestamp time.Time, err error) {
	metrics, timestamp, err := c.metrics.GetResourceMetric(ctx, resource, namespace, selector, container)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metrics for resource %s: %w", resource, err)
	}
	replicas, usage, err = c.plainMetricReplicas(metrics, currentReplicas, targetUsage, tolerances, namespace, selector, resource)
	return replicas, usage, timestamp, err
}

// GetMetricReplicas proposes a replica count for a target average (milli-value) of the
// custom pods metric metricName over the pods selector matches in namespace. It returns
// the proposal, the current average and the metrics' timestamp.
func (c *Calculator) GetMetricReplicas(currentReplicas int32, targetUsage int64, metricName string, tolerances Tolerances, namespace string, selector labels.Selector, metricSelector labels.Selector) (replicas int32, usage int64, timestamp time.Time, err error) {
	metrics, timestamp, err := c.metrics.GetRawMetric(metricName, namespace, selector, metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metric %s: %w", metricName, err)
	}
	replicas, usage, err = c.plainMetricReplicas(metrics, currentReplicas, targetUsage, tolerances, namespace, selector, "")
	return replicas, usage, timestamp, err
}

// errNoTargetedMetrics is upstream's error when no ready pod has a sample.
var errNoTargetedMetrics = errors.New("did not receive metrics for targeted pods (pods might be unready)")

// plainMetricReplicas proposes a replica count for a target average (not a utilization)
// of per-pod samples; resource is empty for a custom metric (no CPU readiness rules).
func (c *Calculator) plainMetricReplicas(metrics PodMetricsInfo, currentReplicas int32, targetUsage int64, tolerances Tolerances, namespace string, selector labels.Selector, resource corev1.ResourceName) (int32, int64, error) {
	pods, err := c.listPods(namespace, selector)
	if err != nil {
		return 0, 0, err
	}
	g := c.groupPods(pods, metrics, resource)
	if len(metrics) == 0 {
		return 0, 0, errNoTargetedMetrics
	}
	ratio, usage := metricUsageRatio(metrics, targetUsage)
	// On a scale-down a missing pod counts as using exactly the target.
	replicas, err := propose(currentReplicas, ratio, g, metrics, tolerances,
		func(string) int64 { return targetUsage },
		func(m PodMetricsInfo) (float64, error) {
			r, _ := metricUsageRatio(m, targetUsage)
			return r, nil
		})
	if err != nil {
		return 0, 0, err
	}
	return replicas, usage, nil
}

// propose turns the usage ratio of the ready pods' samples into a replica count. Without
// unready pods on a scale-up and without missing pods it is the ratio times the ready
// pods (the current count within the tolerance). Otherwise the samples are completed
// conservatively: missing pods use downValue on a scale-down and nothing on a scale-up,
// unready pods nothing on a scale-up; the ratio is taken again (reratio) and the current
// count is kept when the new ratio is within the tolerance, points the other way, or
// would move the count against its direction.
func propose(current int32, ratio float64, g podGroups, metrics PodMetricsInfo, tolerances Tolerances, downValue func(pod string) int64, reratio func(PodMetricsInfo) (float64, error)) (int32, error) {
	scaleUpWithUnready := len(g.unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(g.missing) == 0 {
		if tolerances.within(ratio) {
			return current, nil
		}
		return int32(math.Ceil(ratio * float64(g.ready))), nil
	}
	switch {
	case len(g.missing) > 0 && ratio < 1.0:
		for pod := range g.missing {
			metrics[pod] = PodMetric{Value: downValue(pod)}
		}
	case len(g.missing) > 0 && ratio > 1.0:
		for pod := range g.missing {
			metrics[pod] = PodMetric{Value: 0}
		}
	}
	if scaleUpWithUnready {
		for pod := range g.unready {
			metrics[pod] = PodMetric{Value: 0}
		}
	}
	newRatio, err := reratio(metrics)
	if err != nil {
		return 0, err
	}
	if tolerances.within(newRatio) || (ratio < 1.0 && newRatio > 1.0) || (ratio > 1.0 && newRatio < 1.0) {
		return current, nil
	}
	replicas := int32(math.Ceil(newRatio * float64(len(metrics))))
	if (newRatio < 1.0 && replicas > current) || (newRatio > 1.0 && replicas < current) {
		return current, nil
	}
	return replicas, nil
}

// GetObjectMetricReplicas proposes a replica count for a target value (milli-value) of
// the custom metric metricName of the object objectRef names: the ratio of value to
// target times the ready pods selector matches, or from zero replicas the ratio rounded
// up. It returns the proposal and the current value; the timestamp is always zero, as
// upstream's (it drops the metric's).
func (c *Calculator) GetObjectMetricReplicas(currentReplicas int32, targetUsage int64, metricName string, tolerances Tolerances, namespace string, objectRef *autoscalingv2.CrossVersionObjectReference, selector labels.Selector, metricSelector labels.Selector) (replicas int32, usage int64, timestamp time.Time, err error) {
	usage, _, err = c.metrics.GetObjectMetric(metricName, namespace, objectRef, metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metric %s on %s %s/%s: %w", metricName, objectRef.Kind, namespace, objectRef.Name, err)
	}
	ratio := float64(usage) / float64(targetUsage)
	replicas, timestamp, err = c.usageRatioReplicas(currentReplicas, ratio, tolerances, namespace, selector)
	return replicas, usage, timestamp, err
}

// usageRatioReplicas is ratio times the ready pods selector matches (the current count
// within the tolerance, at most MaxInt32), or from zero replicas the ratio rounded up
// (no pods to count: scaling from and to zero). Its timestamp is always zero.
func (c *Calculator) usageRatioReplicas(currentReplicas int32, ratio float64, tolerances Tolerances, namespace string, selector labels.Selector) (int32, time.Time, error) {
	if currentReplicas == 0 {
		return int32(math.Ceil(ratio)), time.Time{}, nil
	}
	if tolerances.within(ratio) {
		return currentReplicas, time.Time{}, nil
	}
	ready, err := c.readyPods(namespace, selector)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("unable to calculate ready pods: %s", err)
	}
	proposal := ratio * float64(ready)
	if proposal > math.MaxInt32 {
		return math.MaxInt32, time.Time{}, nil
	}
	return int32(math.Ceil(proposal)), time.Time{}, nil
}

// GetObjectPerPodMetricReplicas proposes a replica count for a target average per pod
// (milli-value) of the custom metric metricName of the object objectRef names: the value
// over the target, rounded up, unless the value per current replica is within the
// tolerance. It returns the proposal, the value per current replica (rounded up) and the
// metric's timestamp.
func (c *Calculator) GetObjectPerPodMetricReplicas(statusReplicas int32, targetAverageUsage int64, metricName string, tolerances Tolerances, namespace string, objectRef *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (replicas int32, usage int64, timestamp time.Time, err error) {
	usage, timestamp, err = c.metrics.GetObjectMetric(metricName, namespace, objectRef, metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get metric %s on %s %s/%s: %w", metricName, objectRef.Kind, namespace, objectRef.Name, err)
	}
	replicas = statusReplicas
	ratio := float64(usage) / (float64(targetAverageUsage) * float64(replicas))
	if !tolerances.within(ratio) {
		replicas = int32(math.Ceil(float64(usage) / float64(targetAverageUsage)))
	}
	usage = int64(math.Ceil(float64(usage) / float64(statusReplicas)))
	return replicas, usage, timestamp, nil
}

// GetExternalMetricReplicas proposes a replica count for a target total (milli-value) of
// the external metric metricName's values that metricSelector matches, as
// GetObjectMetricReplicas does for an object's value (ready pods of podSelector). It
// returns the proposal and the sum of the values (at most MaxInt64); the timestamp is
// always zero, as upstream's.
func (c *Calculator) GetExternalMetricReplicas(currentReplicas int32, targetUsage int64, metricName string, tolerances Tolerances, namespace string, metricSelector *metav1.LabelSelector, podSelector labels.Selector) (replicas int32, usage int64, timestamp time.Time, err error) {
	sel, err := metav1.LabelSelectorAsSelector(metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	values, _, err := c.metrics.GetExternalMetric(metricName, namespace, sel)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get external metric %s/%s/%+v: %s", namespace, metricName, metricSelector, err)
	}
	for _, v := range values {
		if v > 0 && usage > math.MaxInt64-v {
			usage = math.MaxInt64
			break
		}
		usage += v
	}
	ratio := float64(usage) / float64(targetUsage)
	replicas, timestamp, err = c.usageRatioReplicas(currentReplicas, ratio, tolerances, namespace, podSelector)
	return replicas, usage, timestamp, err
}

// GetExternalPerPodMetricReplicas proposes a replica count for a target average per pod
// (milli-value) of the sum of the external metric metricName's values that metricSelector
// matches, as GetObjectPerPodMetricReplicas does for an object's value. It returns the
// proposal (at most MaxInt32), the sum per current replica rounded up (MaxInt64 when the
// sum overflowed) and the metric's timestamp.
func (c *Calculator) GetExternalPerPodMetricReplicas(statusReplicas int32, targetUsagePerPod int64, metricName string, tolerances Tolerances, namespace string, metricSelector *metav1.LabelSelector) (replicas int32, usage int64, timestamp time.Time, err error) {
	sel, err := metav1.LabelSelectorAsSelector(metricSelector)
	if err != nil {
		return 0, 0, time.Time{}, err
	}
	values, timestamp, err := c.metrics.GetExternalMetric(metricName, namespace, sel)
	if err != nil {
		return 0, 0, time.Time{}, fmt.Errorf("unable to get external metric %s/%s/%+v: %s", namespace, metricName, metricSelector, err)
	}
	for _, v := range values {
		usage += v
		if usage < 0 { // overflow
			usage = math.MaxInt64
			break
		}
	}
	replicas = statusReplicas
	ratio := float64(usage) / (float64(targetUsagePerPod) * float64(replicas))
	if !tolerances.within(ratio) {
		proposal := math.Ceil(float64(usage) / float64(targetUsagePerPod))
		if proposal > float64(math.MaxInt32) {
			replicas = math.MaxInt32
		} else {
			replicas = int32(proposal)
		}
	}
	if float64(usage) >= float64(math.MaxInt64) {
		usage = math.MaxInt64
	} else {
		usage = int64(math.Ceil(float64(usage) / float64(statusReplicas)))
	}
	return replicas, usage, timestamp, nil
}

// listPods lists the pods selector matches in namespace; none is an error.
func (c *Calculator) listPods(namespace string, selector labels.Selector) ([]*corev1.Pod, error) {
	pods, err := c.pods.Pods(namespace).List(selector)
	if err != nil {
		return nil, fmt.Errorf("unable to get pods while calculating replica count: %w", err)
	}
	if len(pods) == 0 {
		return nil, errors.New("no pods returned by selector while calculating replica count")
	}
	return pods, nil
}

// readyPods counts the Running and Ready pods selector matches in namespace.
func (c *Calculator) readyPods(namespace string, selector labels.Selector) (int64, error) {
	pods, err := c.listPods(namespace, selector)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodRunning && podutil.IsReady(pod) {
			n++
		}
	}
	return n, nil
}

package replicacalc

import (
	"context"
	"errors"
	"fmt"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ErrSpec marks an error that comes from the HPA's spec rather than from a metrics API
// or the cache (errors.Is): upstream's reconciliation and metric computation series count
// such errors under error="spec", the others under "internal". The controller wraps its
// own spec errors (an invalid scaleTargetRef apiVersion) with it too.
var ErrSpec = errors.New("")

// ActionLabel is the action label of the HPA controller's reconciliation and metric
// computation series (upstream's monitor package).
type ActionLabel string

// ErrorLabel is the error label of the same series.
type ErrorLabel string

// Upstream's label values.
const (
	ActionLabelScaleUp   ActionLabel = "scale_up"
	ActionLabelScaleDown ActionLabel = "scale_down"
	ActionLabelNone      ActionLabel = "none"

	ErrorLabelSpec     ErrorLabel = "spec"
	ErrorLabelInternal ErrorLabel = "internal"
	ErrorLabelNone     ErrorLabel = "none"
)

// Reasons of the ScalingActive condition (and of the Warning event) when a metric fails.
const (
	ReasonFailedGetObjectMetric            = "FailedGetObjectMetric"
	ReasonFailedGetPodsMetric              = "FailedGetPodsMetric"
	ReasonFailedGetResourceMetric          = "FailedGetResourceMetric"
	ReasonFailedGetContainerResourceMetric = "FailedGetContainerResourceMetric"
	ReasonFailedGetExternalMetric          = "FailedGetExternalMetric"
	ReasonInvalidMetricSourceType          = "InvalidMetricSourceType"
	// ReasonValidMetricFound is ScalingActive True's reason when a count was computed.
	ReasonValidMetricFound = "ValidMetricFound"
)

// ComputeReplicasForMetrics computes a replica count for each of specs (the HPA's
// spec.metrics) over the pods selector matches (the target's scale selector, parsed and
// checked by the controller) and returns the largest, the description of the metric
// that gave it (for the rescale reason "<metric> above target"), every metric's status
// (in specs' order; a failed metric's is empty), the timestamp of the chosen metric and
// the ScalingActive condition to set (no LastTransitionTime: the controller sets it as
// for any condition).
//
// When every metric fails, or some fail and the others propose fewer replicas than
// scale.spec.replicas, it returns replicas -1, the first failure's condition (False, its
// reason) and the error "invalid metrics (<n> invalid out of <m>), first error is: ...".
// When some fail and the others propose at least scale.spec.replicas it returns the
// count, condition ValidMetricFound and that error too: the controller scales and then
// returns the error, as upstream does. Each failing metric records a Warning event on hpa
// (reason as its condition's, the error as message) with the Calculator's recorder. hpa
// is not modified.
func (c *Calculator) ComputeReplicasForMetrics(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, scale *autoscalingv1.Scale, selector labels.Selector, specs []autoscalingv2.MetricSpec) (replicas int32, metric string, statuses []autoscalingv2.MetricStatus, timestamp time.Time, condition *autoscalingv2.HorizontalPodAutoscalerCondition, err error) {
	specReplicas, statusReplicas := scale.Spec.Replicas, scale.Status.Replicas
	statuses = make([]autoscalingv2.MetricStatus, len(specs))

	invalid := 0
	var firstErr error
	var firstCondition autoscalingv2.HorizontalPodAutoscalerCondition
	for i, spec := range specs {
		proposal, name, ts, cond, err := c.computeReplicasForMetric(ctx, hpa, spec, specReplicas, statusReplicas, selector, &statuses[i])
		if err != nil {
			if invalid == 0 {
				firstCondition, firstErr = cond, err
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			timestamp, replicas, metric = ts, proposal, name
		}
	}
	if firstErr != nil {
		firstErr = fmt.Errorf("invalid metrics (%v invalid out of %v), first error is: %w", invalid, len(specs), firstErr)
	}
	// With no metric at all this returns an empty condition and no error, as upstream
	// (the API server defaults spec.metrics to 80 % CPU, so it does not happen).
	if invalid >= len(specs) || (invalid > 0 && replicas < specReplicas) {
		return -1, "", statuses, time.Time{}, &firstCondition, firstErr
	}
	return replicas, metric, statuses, timestamp, &autoscalingv2.HorizontalPodAutoscalerCondition{
		Type:    autoscalingv2.ScalingActive,
		Status:  corev1.ConditionTrue,
		Reason:  ReasonValidMetricFound,
		Message: fmt.Sprintf("the HPA was able to successfully calculate a replica count from %s", metric),
	}, firstErr
}

// computeReplicasForMetric computes one metric's proposal, its description and
// timestamp, and fills status; on failure it returns the ScalingActive condition to set.
func (c *Calculator) computeReplicasForMetric(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec,
	specReplicas, statusReplicas int32, selector labels.Selector, status *autoscalingv2.MetricStatus) (proposal int32, name string,
	timestamp time.Time, condition autoscalingv2.HorizontalPodAutoscalerCondition, err error) {
	start := c.clock.Now()
	defer func() {
		if c.observe == nil {
			return
		}
		action := ActionLabelNone
		switch {
		case proposal > hpa.Status.CurrentReplicas:
			action = ActionLabelScaleUp
		case proposal < hpa.Status.CurrentReplicas:
			action = ActionLabelScaleDown
		}
		errLabel := ErrorLabelNone
		if err != nil {
			errLabel, action = ErrorLabelInternal, ActionLabelNone
		}
		if errors.Is(err, ErrSpec) {
			errLabel = ErrorLabelSpec
		}
		c.observe(action, errLabel, c.clock.Since(start), spec.Type)
	}()

	if missing := sourceMissing(spec); missing != "" {
		// The API server's validation refuses this; upstream would dereference nil.
		err = fmt.Errorf("metric source of type %q has no %s%w", spec.Type, missing, ErrSpec)
		return 0, "", time.Time{}, c.unableToCompute(hpa, failureReason(spec.Type), err), err
	}

	switch spec.Type {
	case autoscalingv2.ObjectMetricSourceType:
		metricSelector, err := metav1.LabelSelectorAsSelector(spec.Object.Metric.Selector)
		if err != nil {
			cond := c.unableToCompute(hpa, ReasonFailedGetObjectMetric, err)
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get object metric value: %w", err)
		}
		proposal, timestamp, name, cond, err := c.objectMetric(specReplicas, statusReplicas, spec, hpa, selector, status, metricSelector)
		if err != nil {
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get object metric value: %w", err)
		}
		return proposal, name, timestamp, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case autoscalingv2.PodsMetricSourceType:
		metricSelector, err := metav1.LabelSelectorAsSelector(spec.Pods.Metric.Selector)
		if err != nil {
			cond := c.unableToCompute(hpa, ReasonFailedGetPodsMetric, err)
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get pods metric value: %w", err)
		}
		proposal, timestamp, name, cond, err := c.podsMetric(specReplicas, spec, hpa, selector, status, metricSelector)
		if err != nil {
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get pods metric value: %w", err)
		}
		return proposal, name, timestamp, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case autoscalingv2.ResourceMetricSourceType:
		proposal, timestamp, name, cond, err := c.resourceMetric(ctx, specReplicas, spec, hpa, selector, status)
		if err != nil {
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get %s resource metric value: %w", spec.Resource.Name, err)
		}
		return proposal, name, timestamp, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		proposal, timestamp, name, cond, err := c.containerResourceMetric(ctx, specReplicas, spec, hpa, selector, status)
		if err != nil {
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get %s container metric value: %w", spec.ContainerResource.Container, err)
		}
		return proposal, name, timestamp, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case autoscalingv2.ExternalMetricSourceType:
		proposal, timestamp, name, cond, err := c.externalMetric(specReplicas, statusReplicas, spec, hpa, selector, status)
		if err != nil {
			return 0, "", time.Time{}, cond, fmt.Errorf("failed to get %s external metric value: %w", spec.External.Metric.Name, err)
		}
		return proposal, name, timestamp, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	default:
		err = fmt.Errorf("unknown metric source type %q%w", string(spec.Type), ErrSpec)
		return 0, "", time.Time{}, c.unableToCompute(hpa, ReasonInvalidMetricSourceType, err), err
	}
}

// sourceMissing names the source field spec's type needs when it is nil ("" when set or
// for an unknown type).
func sourceMissing(spec autoscalingv2.MetricSpec) string {
	switch {
	case spec.Type == autoscalingv2.ObjectMetricSourceType && spec.Object == nil:
		return "object"
	case spec.Type == autoscalingv2.PodsMetricSourceType && (spec.Pods == nil || spec.Pods.Target.AverageValue == nil):
		return "pods average value target"
	case spec.Type == autoscalingv2.ResourceMetricSourceType && spec.Resource == nil:
		return "resource"
	case spec.Type == autoscalingv2.ContainerResourceMetricSourceType && spec.ContainerResource == nil:
		return "containerResource"
	case spec.Type == autoscalingv2.ExternalMetricSourceType && spec.External == nil:
		return "external"
	}
	return ""
}

// failureReason is the condition reason of a failing metric of type t.
func failureReason(t autoscalingv2.MetricSourceType) string {
	switch t {
	case autoscalingv2.ObjectMetricSourceType:
		return ReasonFailedGetObjectMetric
	case autoscalingv2.PodsMetricSourceType:
		return ReasonFailedGetPodsMetric
	case autoscalingv2.ResourceMetricSourceType:
		return ReasonFailedGetResourceMetric
	case autoscalingv2.ContainerResourceMetricSourceType:
		return ReasonFailedGetContainerResourceMetric
	case autoscalingv2.ExternalMetricSourceType:
		return ReasonFailedGetExternalMetric
	}
	return ReasonInvalidMetricSourceType
}

// unableToCompute records the Warning event of a failing metric and returns its
// ScalingActive condition.
func (c *Calculator) unableToCompute(hpa *autoscalingv2.HorizontalPodAutoscaler, reason string, err error) autoscalingv2.HorizontalPodAutoscalerCondition {
	if c.recorder != nil {
		c.recorder.Event(hpa, corev1.EventTypeWarning, reason, err.Error())
	}
	return autoscalingv2.HorizontalPodAutoscalerCondition{
		Type:    autoscalingv2.ScalingActive,
		Status:  corev1.ConditionFalse,
		Reason:  reason,
		Message: fmt.Sprintf("the HPA was unable to compute the replica count: %v", err),
	}
}

// objectMetric computes an Object metric: a value target over the ready pods, or an
// average value target over scale.status.replicas.
func (c *Calculator) objectMetric(specReplicas, statusReplicas int32, spec autoscalingv2.MetricSpec, hpa *autoscalingv2.HorizontalPodAutoscaler, selector labels.Selector, status *autoscalingv2.MetricStatus, metricSelector labels.Selector) (int32, time.Time, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	src := spec.Object
	st := autoscalingv2.MetricStatus{
		Type: autoscalingv2.ObjectMetricSourceType,
		Object: &autoscalingv2.ObjectMetricStatus{
			DescribedObject: src.DescribedObject,
			Metric:          autoscalingv2.MetricIdentifier{Name: src.Metric.Name, Selector: src.Metric.Selector},
		},
	}
	tolerances := c.TolerancesFor(hpa)
	switch {
	case src.Target.Type == autoscalingv2.ValueMetricType && src.Target.Value != nil:
		proposal, usage, ts, err := c.GetObjectMetricReplicas(specReplicas, src.Target.Value.MilliValue(), src.Metric.Name, tolerances, hpa.Namespace, &src.DescribedObject, selector, metricSelector)
		if err != nil {
			return 0, ts, "", c.unableToCompute(hpa, ReasonFailedGetObjectMetric, err), err
		}
		st.Object.Current.Value = resource.NewMilliQuantity(usage, resource.DecimalSI)
		*status = st
		return proposal, ts, fmt.Sprintf("%s metric %s", src.DescribedObject.Kind, src.Metric.Name), autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	case src.Target.Type == autoscalingv2.AverageValueMetricType && src.Target.AverageValue != nil:
		proposal, usage, ts, err := c.GetObjectPerPodMetricReplicas(statusReplicas, src.Target.AverageValue.MilliValue(), src.Metric.Name, tolerances, hpa.Namespace, &src.DescribedObject, metricSelector)
		if err != nil {
			return 0, time.Time{}, "", c.unableToCompute(hpa, ReasonFailedGetObjectMetric, err), fmt.Errorf("failed to get %s object metric: %w", src.Metric.Name, err)
		}
		st.Object.Current.AverageValue = resource.NewMilliQuantity(usage, resource.DecimalSI)
		*status = st
		// Upstream describes an object metric's average value target as an external
		// metric; the description is the rescale reason's, so it is kept.
		return proposal, ts, fmt.Sprintf("external metric %s(%+v)", src.Metric.Name, src.Metric.Selector), autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	}
	err := errors.New("invalid object metric source: neither a value target nor an average value target was set")
	return 0, time.Time{}, "", c.unableToCompute(hpa, ReasonFailedGetObjectMetric, err), err
}

// podsMetric computes a Pods metric (an average value target).
func (c *Calculator) podsMetric(currentReplicas int32, spec autoscalingv2.MetricSpec, hpa *autoscalingv2.HorizontalPodAutoscaler, selector labels.Selector, status *autoscalingv2.MetricStatus, metricSelector labels.Selector) (int32, time.Time, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	src := spec.Pods
	proposal, usage, ts, err := c.GetMetricReplicas(currentReplicas, src.Target.AverageValue.MilliValue(), src.Metric.Name, c.TolerancesFor(hpa), hpa.Namespace, selector, metricSelector)
	if err != nil {
		return 0, ts, "", c.unableToCompute(hpa, ReasonFailedGetPodsMetric, err), err
	}
	*status = autoscalingv2.MetricStatus{
		Type: autoscalingv2.PodsMetricSourceType,
		Pods: &autoscalingv2.PodsMetricStatus{
			Metric:  autoscalingv2.MetricIdentifier{Name: src.Metric.Name, Selector: src.Metric.Selector},
			Current: autoscalingv2.MetricValueStatus{AverageValue: resource.NewMilliQuantity(usage, resource.DecimalSI)},
		},
	}
	return proposal, ts, fmt.Sprintf("pods metric %s", src.Metric.Name), autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
}

// resourceMetric computes a Resource metric.
func (c *Calculator) resourceMetric(ctx context.Context, currentReplicas int32, spec autoscalingv2.MetricSpec, hpa *autoscalingv2.HorizontalPodAutoscaler, selector labels.Selector, status *autoscalingv2.MetricStatus) (int32, time.Time, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	src := spec.Resource
	proposal, current, ts, name, err := c.resourceTarget(ctx, currentReplicas, src.Target, src.Name, hpa, "", selector, autoscalingv2.ResourceMetricSourceType)
	if err != nil {
		return proposal, ts, name, c.unableToCompute(hpa, ReasonFailedGetResourceMetric, err), err
	}
	*status = autoscalingv2.MetricStatus{
		Type:     autoscalingv2.ResourceMetricSourceType,
		Resource: &autoscalingv2.ResourceMetricStatus{Name: src.Name, Current: *current},
	}
	return proposal, ts, name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
}

// containerResourceMetric computes a ContainerResource metric.
func (c *Calculator) containerResourceMetric(ctx context.Context, currentReplicas int32, spec autoscalingv2.MetricSpec, hpa *autoscalingv2.HorizontalPodAutoscaler, selector labels.Selector, status *autoscalingv2.MetricStatus) (int32, time.Time, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	src := spec.ContainerResource
	proposal, current, ts, name, err := c.resourceTarget(ctx, currentReplicas, src.Target, src.Name, hpa, src.Container, selector, autoscalingv2.ContainerResourceMetricSourceType)
	if err != nil {
		return proposal, ts, name, c.unableToCompute(hpa, ReasonFailedGetContainerResourceMetric, err), err
	}
	*status = autoscalingv2.MetricStatus{
		Type:              autoscalingv2.ContainerResourceMetricSourceType,
		ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: src.Name, Container: src.Container, Current: *current},
	}
	return proposal, ts, name, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
}

// resourceTarget computes a (container) resource metric's proposal and current value:
// an average value target when set, else an average utilization target.
func (c *Calculator) resourceTarget(ctx context.Context, currentReplicas int32, target autoscalingv2.MetricTarget, name corev1.ResourceName, hpa *autoscalingv2.HorizontalPodAutoscaler, container string, selector labels.Selector, sourceType autoscalingv2.MetricSourceType) (int32, *autoscalingv2.MetricValueStatus, time.Time, string, error) {
	tolerances := c.TolerancesFor(hpa)
	if target.AverageValue != nil {
		proposal, raw, ts, err := c.GetRawResourceReplicas(ctx, currentReplicas, target.AverageValue.MilliValue(), name, tolerances, hpa.Namespace, selector, container)
		if err != nil {
			return 0, nil, time.Time{}, "", fmt.Errorf("failed to get %s usage: %w", name, err)
		}
		q := usageQuantity(name, raw)
		return proposal, &autoscalingv2.MetricValueStatus{AverageValue: &q}, ts, fmt.Sprintf("%s resource", name.String()), nil
	}
	if target.AverageUtilization == nil {
		return 0, nil, time.Time{}, "", errors.New("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set")
	}
	proposal, utilization, raw, ts, err := c.GetResourceReplicas(ctx, currentReplicas, *target.AverageUtilization, name, tolerances, hpa.Namespace, selector, container)
	if err != nil {
		return 0, nil, time.Time{}, "", fmt.Errorf("failed to get %s utilization: %w", name, err)
	}
	desc := fmt.Sprintf("%s resource utilization (percentage of request)", name)
	if sourceType == autoscalingv2.ContainerResourceMetricSourceType {
		desc = fmt.Sprintf("%s container resource utilization (percentage of request)", name)
	}
	q := usageQuantity(name, raw)
	return proposal, &autoscalingv2.MetricValueStatus{AverageUtilization: &utilization, AverageValue: &q}, ts, desc, nil
}

// usageQuantity renders an average usage (milli-units) as metrics-server does: memory in
// binary units (Ki, Mi), anything else in decimal ones (m).
func usageQuantity(name corev1.ResourceName, milli int64) resource.Quantity {
	format := resource.DecimalSI
	if name == corev1.ResourceMemory {
		format = resource.BinarySI
	}
	return *resource.NewMilliQuantity(milli, format)
}

// externalMetric computes an External metric: an average value target over
// scale.status.replicas, or a value target over the ready pods.
func (c *Calculator) externalMetric(specReplicas, statusReplicas int32, spec autoscalingv2.MetricSpec, hpa *autoscalingv2.HorizontalPodAutoscaler, selector labels.Selector, status *autoscalingv2.MetricStatus) (int32, time.Time, string, autoscalingv2.HorizontalPodAutoscalerCondition, error) {
	src := spec.External
	tolerances := c.TolerancesFor(hpa)
	desc := fmt.Sprintf("external metric %s(%+v)", src.Metric.Name, src.Metric.Selector)
	st := func(current autoscalingv2.MetricValueStatus) autoscalingv2.MetricStatus {
		return autoscalingv2.MetricStatus{
			Type: autoscalingv2.ExternalMetricSourceType,
			External: &autoscalingv2.ExternalMetricStatus{
				Metric:  autoscalingv2.MetricIdentifier{Name: src.Metric.Name, Selector: src.Metric.Selector},
				Current: current,
			},
		}
	}
	if src.Target.AverageValue != nil {
		proposal, usage, ts, err := c.GetExternalPerPodMetricReplicas(statusReplicas, src.Target.AverageValue.MilliValue(), src.Metric.Name, tolerances, hpa.Namespace, src.Metric.Selector)
		if err != nil {
			return 0, time.Time{}, "", c.unableToCompute(hpa, ReasonFailedGetExternalMetric, err), fmt.Errorf("failed to get %s external metric: %w", src.Metric.Name, err)
		}
		*status = st(autoscalingv2.MetricValueStatus{AverageValue: resource.NewMilliQuantity(usage, resource.DecimalSI)})
		return proposal, ts, desc, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	}
	if src.Target.Value != nil {
		proposal, usage, ts, err := c.GetExternalMetricReplicas(specReplicas, src.Target.Value.MilliValue(), src.Metric.Name, tolerances, hpa.Namespace, src.Metric.Selector, selector)
		if err != nil {
			return 0, time.Time{}, "", c.unableToCompute(hpa, ReasonFailedGetExternalMetric, err), fmt.Errorf("failed to get external metric %s: %w", src.Metric.Name, err)
		}
		*status = st(autoscalingv2.MetricValueStatus{Value: resource.NewMilliQuantity(usage, resource.DecimalSI)})
		return proposal, ts, desc, autoscalingv2.HorizontalPodAutoscalerCondition{}, nil
	}
	err := errors.New("invalid external metric source: neither a value target nor an average value target was set")
	return 0, time.Time{}, "", c.unableToCompute(hpa, ReasonFailedGetExternalMetric, err), err
}

package horizontalpodautoscaling

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/horizontalpodautoscaling/replicacalc"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
)

// sync reconciles one HPA and, unless it is gone, queues it again after the sync period:
// every HPA is reconciled once per period, as upstream's worker re-adds every key.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	deleted, err := c.reconcileKey(ctx, log, key, namespace, name)
	if !deleted {
		c.queue.AddRateLimited(key)
	}
	return err
}

// reconcileKey reconciles the HPA of key; deleted is true when it is gone (its history
// is then dropped).
func (c *Controller) reconcileKey(ctx context.Context, log klog.Logger, key, namespace, name string) (deleted bool, err error) {
	if err := c.consistency.Ready(key); err != nil {
		var stale *consistency.StaleError
		if errors.As(err, &stale) {
			c.monitor.staleSkips.WithLabelValues(stale.Resource.Group, stale.Resource.Resource).Inc()
		}
		return false, err
	}
	hpa, err := c.hpaLister.HorizontalPodAutoscalers(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.consistency.Clear(key, "")
		c.histories.drop(key)
		log.Info("Horizontal Pod Autoscaler has been deleted")
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, c.reconcileAutoscaler(ctx, log, hpa, key)
}

// reconcileAutoscaler is one reconcile of an HPA, upstream's: read the target's scale,
// compute the metrics' recommendation, stabilise and limit it, rescale the target if the
// result differs from its replicas, and write the status (only when it changed).
func (c *Controller) reconcileAutoscaler(ctx context.Context, log klog.Logger, shared *autoscalingv2.HorizontalPodAutoscaler, key string) (retErr error) {
	now := c.clock.Now()
	metaNow := metav1.NewTime(now)
	action := replicacalc.ActionLabelNone
	defer func() {
		errLabel := replicacalc.ErrorLabelNone
		if retErr != nil {
			errLabel = replicacalc.ErrorLabelInternal
		}
		if errors.Is(retErr, replicacalc.ErrSpec) {
			errLabel = replicacalc.ErrorLabelSpec
		}
		c.monitor.observeReconciliation(action, errLabel, c.clock.Since(now))
	}()

	hpa := shared.DeepCopy()
	original := hpa.Status.DeepCopy()
	reference := fmt.Sprintf("%s/%s/%s", hpa.Spec.ScaleTargetRef.Kind, hpa.Namespace, hpa.Spec.ScaleTargetRef.Name)

	failedGetScale := func(err error) {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedGetScale", err.Error())
		setCondition(hpa, metaNow, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale",
			"the HPA controller was unable to get the target's current scale: %v", err)
		if err := c.updateStatusIfNeeded(ctx, log, key, original, hpa); err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "failed to update the HPA's status")
		}
	}
	targetGV, err := schema.ParseGroupVersion(hpa.Spec.ScaleTargetRef.APIVersion)
	if err != nil {
		failedGetScale(err)
		return fmt.Errorf("invalid API version in scale target reference: %v%w", err, replicacalc.ErrSpec)
	}
	mappings, err := c.scale.Mapper.RESTMappings(schema.GroupKind{Group: targetGV.Group, Kind: hpa.Spec.ScaleTargetRef.Kind})
	if err != nil {
		failedGetScale(err)
		return fmt.Errorf("unable to determine resource for scale target reference: %w", err)
	}
	scale, targetGR, err := c.scaleOf(ctx, hpa.Namespace, hpa.Spec.ScaleTargetRef.Name, mappings)
	if err != nil {
		failedGetScale(err)
		return fmt.Errorf("failed to query scale subresource for %s: %w", reference, err)
	}
	setCondition(hpa, metaNow, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale",
		"the HPA controller was able to get the target's current scale")
	current := scale.Spec.Replicas

	var behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
	if hpa.Spec.Behavior != nil {
		behavior = withBehaviorDefaults(hpa.Spec.Behavior, c.opts.DownscaleStabilization)
	}
	h := c.historyFor(ctx, log, hpa, key, behavior, current, now)

	minReplicas := int32(1)
	if hpa.Spec.MinReplicas != nil {
		minReplicas = *hpa.Spec.MinReplicas
	}
	var (
		statuses      []autoscalingv2.MetricStatus
		desired       int32
		rescaleReason string
		rescale       = true
		needsMetrics  = true
	)
	// HPAScaleToZero is on in 1.37: a target at zero is scaled from zero only when the
	// HPA scaled it there (ScaledToZero True) and can tell from an Object or External
	// metric, or minReplicas was raised since.
	objectOrExternal := hasObjectOrExternalMetrics(hpa)
	scaledToZero := conditionTrue(hpa, autoscalingv2.ScaledToZero)
	switch {
	case current == 0:
		if !((minReplicas != 0 && scaledToZero) || (scaledToZero && objectOrExternal)) {
			desired, rescale, needsMetrics = 0, false, false
			setCondition(hpa, metaNow, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled",
				"scaling is disabled since the replica count of the target is zero")
		}
	case current > hpa.Spec.MaxReplicas:
		rescaleReason, desired, needsMetrics = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.MaxReplicas, false
	case current < minReplicas:
		rescaleReason, desired, needsMetrics = "Current number of replicas below Spec.MinReplicas", minReplicas, false
	}

	if needsMetrics {
		metricDesired, metricName, metricStatuses, timestamp, err := c.computeReplicas(ctx, hpa, scale, metaNow)
		statuses = metricStatuses
		if err != nil && metricDesired == -1 {
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false, metaNow)
			if err := c.updateStatusIfNeeded(ctx, log, key, original, hpa); err != nil {
				utilruntime.HandleErrorWithContext(ctx, err, "failed to update the HPA's status")
			}
			c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedComputeMetricsReplicas", err.Error())
			return fmt.Errorf("failed to compute desired number of replicas based on listed metrics for %s: %w", reference, err)
		}
		if err != nil {
			// Some metrics work: scale on them, and report the others' error.
			retErr = err
		}
		log.V(4).Info("Proposing desired replicas", "desiredReplicas", metricDesired, "metric", metricName,
			"timestamp", timestamp, "scaleTarget", reference)
		rescaleMetric := ""
		if metricDesired > desired {
			desired, rescaleMetric = metricDesired, metricName
		}
		if desired > current {
			rescaleReason = fmt.Sprintf("%s above target", rescaleMetric)
		}
		if desired < current {
			rescaleReason = "All metrics below target"
		}
		if behavior == nil {
			desired = c.normalize(hpa, h, metaNow, current, desired, minReplicas)
		} else {
			desired = normalizeWithBehavior(hpa, h, behavior, metaNow, current, desired, minReplicas)
		}
		if current == 0 && minReplicas != 0 && scaledToZero && desired < minReplicas {
			desired = minReplicas
			if rescaleReason == "" {
				rescaleReason = "Current number of replicas below Spec.MinReplicas"
			}
		}
		rescale = desired != current
	}

	if rescale {
		if err := c.rescale(ctx, hpa, targetGR, scale, desired); err != nil {
			c.recorder.Eventf(hpa, corev1.EventTypeWarning, "FailedRescale", "New size: %d; reason: %s; error: %v", desired, rescaleReason, err.Error())
			setCondition(hpa, metaNow, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedUpdateScale",
				"the HPA controller was unable to update the target scale: %v", err)
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false, metaNow)
			if err := c.updateStatusIfNeeded(ctx, log, key, original, hpa); err != nil {
				utilruntime.HandleErrorWithContext(ctx, err, "failed to update the HPA's status")
			}
			return fmt.Errorf("failed to rescale %s: %w", reference, err)
		}
		setCondition(hpa, metaNow, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale",
			"the HPA controller was able to update the target scale to %d", desired)
		c.recorder.Eventf(hpa, corev1.EventTypeNormal, rescaleEventReason, "New size: %d; reason: %s", desired, rescaleReason)
		h.storeScaleEvent(behavior, current, desired, now)
		log.Info("Successfully rescaled", "currentReplicas", current, "desiredReplicas", desired, "reason", rescaleReason)
		if current > 0 && desired == 0 && minReplicas == 0 && objectOrExternal {
			setCondition(hpa, metaNow, autoscalingv2.ScaledToZero, corev1.ConditionTrue, "ScaledToZero", "the HPA controller scaled the workload to zero")
		} else {
			setCondition(hpa, metaNow, autoscalingv2.ScaledToZero, corev1.ConditionFalse, "NotScaledToZero", "the HPA controller did not scale the workload to zero")
		}
		action = replicacalc.ActionLabelScaleDown
		if desired > current {
			action = replicacalc.ActionLabelScaleUp
		}
	} else {
		log.V(4).Info("Decided not to scale", "scaleTarget", reference, "desiredReplicas", desired, "lastScaleTime", hpa.Status.LastScaleTime)
		desired = current
	}

	c.setStatus(hpa, current, desired, statuses, rescale, metaNow)
	c.monitor.desired.WithLabelValues(hpa.Namespace, hpa.Name).Set(float64(desired))
	if err := c.updateStatusIfNeeded(ctx, log, key, original, hpa); err != nil {
		return err
	}
	return retErr
}

// scaleOf reads the target's scale through each mapping in turn until one answers; the
// first mapping's error when none does.
func (c *Controller) scaleOf(ctx context.Context, namespace, name string, mappings []*apimeta.RESTMapping) (*autoscalingv1.Scale, schema.GroupResource, error) {
	var first error
	for i, m := range mappings {
		gr := m.Resource.GroupResource()
		s, err := c.scale.Get(ctx, namespace, gr, name)
		if err == nil {
			return s, gr, nil
		}
		if i == 0 {
			first = err
		}
	}
	if first == nil {
		first = errors.New("unrecognized resource")
	}
	return nil, schema.GroupResource{}, first
}

// rescale writes desired into the target's scale, reading the scale again after a
// failed write (a conflict is retried with client-go's default backoff).
func (c *Controller) rescale(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, gr schema.GroupResource, s *autoscalingv1.Scale, desired int32) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s.Spec.Replicas = desired
		_, err := c.scale.Update(ctx, hpa.Namespace, gr, s)
		if err == nil {
			return nil
		}
		latest, getErr := c.scale.Get(ctx, hpa.Namespace, gr, hpa.Spec.ScaleTargetRef.Name)
		if getErr == nil {
			s = latest
		} else {
			utilruntime.HandleErrorWithContext(ctx, getErr, "error getting latest scale during conflict retry", "scaleTarget", hpa.Spec.ScaleTargetRef.Name)
		}
		return err
	})
}

// computeReplicas validates the target's selector and asks the calculator for the
// metrics' recommendation; -1 when no metric (or the selector) allows one. It sets the
// ScalingActive condition.
func (c *Controller) computeReplicas(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, s *autoscalingv1.Scale,
	now metav1.Time) (int32, string, []autoscalingv2.MetricStatus, time.Time, error) {
	selector, err := c.validateSelector(hpa, s.Status.Selector, now)
	if err != nil {
		return -1, "", nil, time.Time{}, err
	}
	replicas, metric, statuses, timestamp, cond, err := c.calc.ComputeReplicasForMetrics(ctx, hpa, s, selector, hpa.Spec.Metrics)
	if cond != nil && cond.Type != "" {
		setCondition(hpa, now, cond.Type, cond.Status, cond.Reason, "%s", cond.Message)
	}
	if replicas < 0 {
		if err == nil {
			err = errors.New("no metric could be computed")
		}
		return -1, "", statuses, time.Time{}, err
	}
	return replicas, metric, statuses, timestamp, err
}

// validateSelector parses the target's selector and refuses an empty one, one that does
// not parse, and one whose pods another HPA of the namespace also selects.
func (c *Controller) validateSelector(hpa *autoscalingv2.HorizontalPodAutoscaler, selector string, now metav1.Time) (labels.Selector, error) {
	if selector == "" {
		msg := "selector is required"
		c.recorder.Event(hpa, corev1.EventTypeWarning, "SelectorRequired", msg)
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "the HPA target's scale is missing a selector")
		return nil, errors.New(msg)
	}
	parsed, err := labels.Parse(selector)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.recorder.Event(hpa, corev1.EventTypeWarning, "InvalidSelector", msg)
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "%s", msg)
		return nil, errors.New(msg)
	}
	if !c.selectors.putIfPresent(hpa.Namespace, hpa.Name, parsed) {
		return nil, fmt.Errorf("HPA %s/%s was deleted during reconciliation", hpa.Namespace, hpa.Name)
	}
	pods, err := c.podLister.Pods(hpa.Namespace).List(parsed)
	if err != nil {
		return nil, err
	}
	if names := c.selectors.matching(hpa.Namespace, pods, 2); len(names) > 1 {
		keys := make([]string, len(names))
		for i, n := range names {
			keys[i] = hpa.Namespace + "/" + n
		}
		msg := fmt.Sprintf("pods by selector %v are controlled by more than one HPA (e.g. [%s])", selector, strings.Join(keys, " "))
		c.recorder.Event(hpa, corev1.EventTypeWarning, "AmbiguousSelector", msg)
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector", "%s", msg)
		return nil, errors.New(msg)
	}
	return parsed, nil
}

// historyFor returns key's history; an HPA without one (new here: created, or moved here,
// or the process restarted) gets one rebuilt from its status and events (rebuild.go).
func (c *Controller) historyFor(ctx context.Context, log klog.Logger, hpa *autoscalingv2.HorizontalPodAutoscaler, key string,
	behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, current int32, now time.Time) *history {
	if h := c.histories.get(key); h != nil {
		return h
	}
	var rescales []rescale
	source := "none"
	if needsEvents(hpa, behavior, c.opts.DownscaleStabilization, now) {
		list, err := c.client.CoreV1().Events(hpa.Namespace).List(ctx, metav1.ListOptions{FieldSelector: rescaleEventSelector(hpa)})
		if err != nil {
			// Rebuild from the status alone: its last rescale still holds the window.
			log.Error(err, "Could not list the HPA's rescale events to rebuild its history; rebuilding from its status")
			source = "failed"
		} else {
			rescales = rescalesOf(hpa, list.Items)
			source = "events"
		}
	}
	h, res := rebuild(hpa, behavior, c.opts.DownscaleStabilization, current, rescales, now)
	if res.fromStatus && source != "failed" {
		source = "status"
	}
	c.monitor.rebuilds.WithLabelValues(source).Inc()
	c.monitor.rebuildIncomplete.Add(float64(res.incomplete))
	if source != "none" {
		log.V(2).Info("Rebuilt the HPA's history", "source", source, "rescales", res.rescales, "fromStatus", res.fromStatus,
			"incomplete", res.incomplete, "recommendations", len(h.recommendations), "scaleUpEvents", len(h.up), "scaleDownEvents", len(h.down))
	}
	return c.histories.put(key, h)
}

// normalize stabilises and limits desired for an HPA without behavior, setting the
// AbleToScale and ScalingLimited conditions.
func (c *Controller) normalize(hpa *autoscalingv2.HorizontalPodAutoscaler, h *history, now metav1.Time, current, desired, minReplicas int32) int32 {
	stabilized := h.stabilize(desired, now.Time, c.opts.DownscaleStabilization)
	if stabilized != desired {
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ScaleDownStabilized",
			"recent recommendations were higher than current one, applying the highest recent recommendation")
	} else {
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size")
	}
	l := limitWithoutBehavior(current, stabilized, minReplicas, hpa.Spec.MaxReplicas)
	setLimited(hpa, now, l, stabilized)
	return l.replicas
}

// normalizeWithBehavior stabilises desired by the behavior's windows and limits it by its
// policies, setting the AbleToScale and ScalingLimited conditions.
func normalizeWithBehavior(hpa *autoscalingv2.HorizontalPodAutoscaler, h *history, b *autoscalingv2.HorizontalPodAutoscalerBehavior,
	now metav1.Time, current, desired, minReplicas int32) int32 {
	up := time.Duration(*b.ScaleUp.StabilizationWindowSeconds) * time.Second
	down := time.Duration(*b.ScaleDown.StabilizationWindowSeconds) * time.Second
	stabilized, reason, message := h.stabilizeWithBehavior(current, desired, now.Time, up, down)
	if stabilized != desired {
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, reason, "%s", message)
	} else {
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "ReadyForNewScale", "recommended size matches current size")
	}
	l := h.limitWithBehavior(b, now.Time, current, stabilized, minReplicas, hpa.Spec.MaxReplicas)
	setLimited(hpa, now, l, stabilized)
	return l.replicas
}

func setLimited(hpa *autoscalingv2.HorizontalPodAutoscaler, now metav1.Time, l limited, stabilized int32) {
	status := corev1.ConditionTrue
	if l.replicas == stabilized {
		status = corev1.ConditionFalse
	}
	setCondition(hpa, now, autoscalingv2.ScalingLimited, status, l.reason, "%s", l.message)
}

// setStatus rebuilds hpa's status from the sync's results, keeping its conditions and,
// unless it rescaled now, its lastScaleTime.
func (c *Controller) setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32, statuses []autoscalingv2.MetricStatus, rescaled bool, now metav1.Time) {
	generation := hpa.Generation
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: &generation,
		CurrentReplicas:    current,
		DesiredReplicas:    desired,
		LastScaleTime:      hpa.Status.LastScaleTime,
		CurrentMetrics:     statuses,
		Conditions:         hpa.Status.Conditions,
	}
	if rescaled {
		hpa.Status.LastScaleTime = &now
	}
}

// updateStatusIfNeeded writes hpa's status when it differs from original.
func (c *Controller) updateStatusIfNeeded(ctx context.Context, log klog.Logger, key string, original *autoscalingv2.HorizontalPodAutoscalerStatus,
	hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	if apiequality.Semantic.DeepEqual(original, &hpa.Status) {
		return nil
	}
	updated, err := c.client.AutoscalingV2().HorizontalPodAutoscalers(hpa.Namespace).UpdateStatus(ctx, hpa, metav1.UpdateOptions{})
	if err != nil {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedUpdateStatus", err.Error())
		return fmt.Errorf("failed to update status for %s: %w", hpa.Name, err)
	}
	c.consistency.Wrote(key, updated.UID, hpaResource, updated.ResourceVersion)
	log.V(2).Info("Successfully updated status")
	return nil
}

// hasObjectOrExternalMetrics reports whether hpa has an Object or External metric, the
// only kinds that can ask to scale a target up from zero.
func hasObjectOrExternalMetrics(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
	for _, m := range hpa.Spec.Metrics {
		if m.Type == autoscalingv2.ObjectMetricSourceType || m.Type == autoscalingv2.ExternalMetricSourceType {
			return true
		}
	}
	return false
}

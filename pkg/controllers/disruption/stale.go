package disruption

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// syncStalePod sets the DisruptionTarget condition of the pod key ("namespace/name") to
// False once it has been True for the stale timeout without the pod terminating (an
// eviction or preemption that marked it and then did not delete it); before that, the pod
// is queued again for when the timeout runs out.
func (c *Controller) syncStalePod(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil
	}
	start := c.clock.Now()
	defer func() {
		log.V(4).Info("Finished syncing Pod to clear DisruptionTarget condition", "duration", c.clock.Since(start))
	}()
	pod, err := c.podLister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("Skipping clearing DisruptionTarget condition because pod was deleted")
		return nil
	}
	if err != nil {
		return err
	}
	stale, after := c.staleDisruptionCondition(pod)
	if !stale {
		return nil
	}
	if after > 0 {
		c.stale.AddAfter(key, after)
		return nil
	}
	updated := pod.DeepCopy()
	if !setConditionFalse(&updated.Status, corev1.DisruptionTarget, updated.Generation, metav1.NewTime(c.clock.Now())) {
		return nil
	}
	if _, err := c.client.CoreV1().Pods(namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		return err
	}
	log.V(2).Info("Reset stale DisruptionTarget condition to False")
	return nil
}

// staleDisruptionCondition reports whether pod, not terminating and not finished, has a
// True DisruptionTarget condition that was not set by the kubelet (whose conditions may
// precede the termination by any time), and how long until it counts as stale.
func (c *Controller) staleDisruptionCondition(pod *corev1.Pod) (bool, time.Duration) {
	if pod.DeletionTimestamp != nil {
		return false, 0
	}
	cond := condition(pod.Status.Conditions, corev1.DisruptionTarget)
	if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason == corev1.PodReasonTerminationByKubelet || podutil.IsTerminal(pod) {
		return false, 0
	}
	return true, max(c.staleTimeout-c.clock.Since(cond.LastTransitionTime.Time), 0)
}

// condition returns the first condition of type t, or nil.
func condition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// setConditionFalse replaces the condition of type t in st with a bare False one
// (no reason or message, observedGeneration the pod's generation: PodObservedGenerationTracking
// is GA in 1.37), transitioned at now when its status changes, and reports whether
// anything changed. It is the pod condition update upstream's controller makes.
func setConditionFalse(st *corev1.PodStatus, t corev1.PodConditionType, generation int64, now metav1.Time) bool {
	want := corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, ObservedGeneration: generation, LastTransitionTime: now}
	old := condition(st.Conditions, t)
	if old == nil {
		st.Conditions = append(st.Conditions, want)
		return true
	}
	if old.Status == want.Status {
		want.LastTransitionTime = old.LastTransitionTime
	}
	same := old.Status == want.Status && old.Reason == want.Reason && old.Message == want.Message &&
		old.LastProbeTime.Equal(&want.LastProbeTime) && old.LastTransitionTime.Equal(&want.LastTransitionTime)
	*old = want
	return !same
}

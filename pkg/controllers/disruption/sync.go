package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// sync brings the status of the budget key ("namespace/name") up to date. When computing
// it fails (a pod's controller not found, a scale not readable, a bad selector), it
// writes the fail-safe status instead (no disruption allowed, SyncFailed) and the key is
// not retried: as upstream, the next change of the budget or of one of its pods syncs it
// again. A conflict is retried.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	start := c.clock.Now()
	defer func() { log.V(4).Info("Finished syncing PodDisruptionBudget", "duration", c.clock.Since(start)) }()

	pdb, err := c.pdbLister.PodDisruptionBudgets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("PodDisruptionBudget has been deleted")
		return nil
	}
	if err != nil {
		return err
	}
	err = c.trySync(ctx, pdb)
	if apierrors.IsConflict(err) {
		return err
	}
	if err != nil {
		log.Error(err, "Failed to sync PDB")
		return c.failSafe(ctx, pdb, err)
	}
	return nil
}

// trySync computes pdb's status from its pods and their controllers and writes it when it
// changed; it queues pdb on the recheck queue for the earliest expiry of a disruptedPods
// entry.
func (c *Controller) trySync(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	log := klog.FromContext(ctx)
	selected, err := c.podsOf(pdb)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "NoPods", "Failed to get pods: %v", err)
		return err
	}
	if len(selected) == 0 {
		c.recorder.Eventf(pdb, corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expected, desired, unmanaged, err := c.expectedPods(ctx, pdb, selected)
	if err != nil {
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", "Failed to calculate the number of expected pods: %v", err)
		return err
	}
	if len(unmanaged) > 0 {
		log.V(4).Info("Found unmanaged pods associated with this PDB", "pods", unmanaged)
		c.recorder.Eventf(pdb, corev1.EventTypeWarning, "UnmanagedPods", "Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" "+
			"field of the PDB to an integer value.", pdb.Spec.Selector)
	}
	now := c.clock.Now()
	disrupted, recheckAt := c.pendingDisruptions(log, selected, pdb, now)
	healthy := countHealthy(selected, disrupted, now)
	err = c.writeStatus(ctx, pdb, healthy, desired, expected, disrupted)
	if err == nil && recheckAt != nil {
		c.recheck.AddAfter(pdb.Namespace+"/"+pdb.Name, recheckAt.Sub(now))
	}
	return err
}

// podsOf lists the pods pdb's selector matches in its namespace.
func (c *Controller) podsOf(pdb *policyv1.PodDisruptionBudget) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return nil, err
	}
	return c.podLister.Pods(pdb.Namespace).List(sel)
}

// expectedPods returns how many pods pdb expects and how many of them must be healthy:
// with maxUnavailable (number or percentage, rounded up) and with a percentage
// minAvailable (rounded up) the expected pods are the sum of the controllers' scales;
// with a number minAvailable they are the pods selected. It also names the selected pods
// without a controller when the controllers' scales were needed.
func (c *Controller) expectedPods(ctx context.Context, pdb *policyv1.PodDisruptionBudget, selected []*corev1.Pod) (expected, desired int32, unmanaged []string, err error) {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		expected, unmanaged, err = c.controllersScale(ctx, selected)
		if err != nil {
			return 0, 0, nil, err
		}
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, nil, err
		}
		return expected, max(expected-int32(maxUnavailable), 0), unmanaged, nil
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		return int32(len(selected)), pdb.Spec.MinAvailable.IntVal, nil, nil
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.String:
		expected, unmanaged, err = c.controllersScale(ctx, selected)
		if err != nil {
			return 0, 0, nil, err
		}
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, nil, err
		}
		return expected, int32(minAvailable), unmanaged, nil
	}
	return 0, 0, nil, nil
}

// controllersScale sums the scales of the controllers of pods, each controller once, and
// names the pods that have no controller. A pod whose controller no finder finds is an
// error.
func (c *Controller) controllersScale(ctx context.Context, selected []*corev1.Pod) (int32, []string, error) {
	scales := map[types.UID]int32{}
	var unmanaged []string
	for _, pod := range selected {
		ref := metav1.GetControllerOf(pod)
		if ref == nil {
			unmanaged = append(unmanaged, pod.Name)
			continue
		}
		if _, known := scales[ref.UID]; known {
			continue
		}
		found := false
		for _, find := range c.finders() {
			s, err := find(ctx, ref, pod.Namespace)
			if err != nil {
				return 0, nil, err
			}
			if s != nil {
				scales[s.uid], found = s.replicas, true
				break
			}
		}
		if !found {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", pod.Name)
		}
	}
	var sum int32
	for _, n := range scales {
		sum += n
	}
	return sum, unmanaged, nil
}

// countHealthy counts the Ready pods that are neither being deleted nor listed in
// disrupted within DeletionTimeout.
func countHealthy(selected []*corev1.Pod, disrupted map[string]metav1.Time, now time.Time) int32 {
	var n int32
	for _, pod := range selected {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if at, ok := disrupted[pod.Name]; ok && at.Add(DeletionTimeout).After(now) {
			continue
		}
		if podutil.IsReady(pod) {
			n++
		}
	}
	return n
}

// pendingDisruptions returns the disruptedPods entries to keep: those of selected pods not
// yet being deleted whose DeletionTimeout has not run out, and the earliest time one of
// them runs out. An entry whose time ran out gets a NotDeleted warning on its pod;
// entries of pods no longer selected or being deleted are dropped.
func (c *Controller) pendingDisruptions(log klog.Logger, selected []*corev1.Pod, pdb *policyv1.PodDisruptionBudget, now time.Time) (map[string]metav1.Time, *time.Time) {
	kept := map[string]metav1.Time{}
	var recheckAt *time.Time
	if pdb.Status.DisruptedPods == nil {
		return kept, nil
	}
	for _, pod := range selected {
		if pod.DeletionTimestamp != nil {
			continue
		}
		at, ok := pdb.Status.DisruptedPods[pod.Name]
		if !ok {
			continue
		}
		deadline := at.Add(DeletionTimeout)
		if deadline.Before(now) {
			log.V(1).Info("pod was expected to be deleted but it wasn't, updating PDB", "pod", klog.KObj(pod), "deletionTime", at)
			// Upstream's message names the budget's namespace twice; kept for equality.
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "NotDeleted", "Pod was expected by PDB %s/%s to be deleted but it wasn't",
				pdb.Namespace, pdb.Namespace)
			continue
		}
		if recheckAt == nil || deadline.Before(*recheckAt) {
			recheckAt = &deadline
		}
		kept[pod.Name] = at
	}
	return kept, recheckAt
}

// writeStatus writes pdb's status when any of its values, its observedGeneration or its
// DisruptionAllowed condition differ from what they should be. No disruption is allowed
// while no pod is expected, so that a budget whose first pods appear before its first
// sync is safe.
func (c *Controller) writeStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, healthy, desired, expected int32,
	disrupted map[string]metav1.Time) error {
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	st := pdb.Status
	if st.CurrentHealthy == healthy && st.DesiredHealthy == desired && st.ExpectedPods == expected &&
		st.DisruptionsAllowed == allowed && apiequality.Semantic.DeepEqual(st.DisruptedPods, disrupted) &&
		st.ObservedGeneration == pdb.Generation && pdbhelper.ConditionsAreUpToDate(pdb) {
		return nil
	}
	updated := pdb.DeepCopy()
	updated.Status = policyv1.PodDisruptionBudgetStatus{
		CurrentHealthy:     healthy,
		DesiredHealthy:     desired,
		ExpectedPods:       expected,
		DisruptionsAllowed: allowed,
		DisruptedPods:      disrupted,
		ObservedGeneration: pdb.Generation,
		Conditions:         updated.Status.Conditions,
	}
	pdbhelper.UpdateDisruptionAllowedCondition(updated)
	return c.updateStatus(ctx, updated)
}

// failSafe sets disruptionsAllowed to 0 and the DisruptionAllowed condition to False
// SyncFailed with cause's message, so that the eviction subresource refuses evictions
// while the budget's status cannot be computed (failing open would be unsafe). The other
// values are left as they were.
func (c *Controller) failSafe(ctx context.Context, pdb *policyv1.PodDisruptionBudget, cause error) error {
	updated := pdb.DeepCopy()
	updated.Status.DisruptionsAllowed = 0
	if updated.Status.Conditions == nil {
		updated.Status.Conditions = []metav1.Condition{}
	}
	apimeta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{
		Type:               policyv1.DisruptionAllowedCondition,
		Status:             metav1.ConditionFalse,
		Reason:             policyv1.SyncFailedReason,
		Message:            cause.Error(),
		ObservedGeneration: updated.Status.ObservedGeneration,
	})
	return c.updateStatus(ctx, updated)
}

// updateStatus writes pdb's status once; a failure (a conflict with a newer budget) is
// the sync's, retried with the queue's backoff.
func (c *Controller) updateStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	_, err := c.client.PolicyV1().PodDisruptionBudgets(pdb.Namespace).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	return err
}

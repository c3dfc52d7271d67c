package deployment

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/templatehash"
)

// syncStatusOnly writes the status of a Deployment that is being deleted, changing
// nothing else.
func (c *Controller) syncStatusOnly(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rss, false)
	if err != nil {
		return err
	}
	return c.syncDeploymentStatus(ctx, append(old, newRS), newRS, d)
}

// sync handles a paused Deployment and a resize: it scales the ReplicaSets without
// starting a rollout, cleans up old revisions of a paused Deployment, and writes the status.
func (c *Controller) sync(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rss, false)
	if err != nil {
		return err
	}
	if err := c.scale(ctx, d, newRS, old); err != nil {
		return err
	}
	if d.Spec.Paused && rollbackTo(d) == nil {
		if err := c.cleanupDeployment(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncDeploymentStatus(ctx, append(old, newRS), newRS, d)
}

// checkPausedConditions turns the Progressing condition into DeploymentPaused when the
// Deployment was paused and DeploymentResumed when it was resumed, so that the paused time
// does not count against the progress deadline. A timed-out rollout keeps its condition.
func (c *Controller) checkPausedConditions(ctx context.Context, d *appsv1.Deployment) error {
	if !hasProgressDeadline(d) {
		return nil
	}
	cond := getCondition(d.Status, appsv1.DeploymentProgressing)
	if cond != nil && cond.Reason == ReasonProgressDeadline {
		return nil
	}
	pausedCond := cond != nil && cond.Reason == ReasonPaused
	switch {
	case d.Spec.Paused && !pausedCond:
		setCondition(&d.Status, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonPaused, "Deployment is paused"))
	case !d.Spec.Paused && pausedCond:
		setCondition(&d.Status, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionUnknown, ReasonResumed, "Deployment is resumed"))
	default:
		return nil
	}
	return c.updateStatus(ctx, d)
}

// replicaSetsAndSyncRevision splits rss into the new ReplicaSet and the old ones, keeps
// the revision annotations of the new one and of the Deployment up to date, and creates
// the new ReplicaSet if create is set and there is none.
func (c *Controller) replicaSetsAndSyncRevision(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	existing, old := splitReplicaSets(d, rss)
	newRS, err := c.newReplicaSet(ctx, d, existing, old, create)
	if err != nil {
		return nil, nil, err
	}
	return newRS, old, nil
}

// newReplicaSet returns the Deployment's current ReplicaSet with its revision (one above
// the old ones') and annotations brought up to date, or creates it. The created
// ReplicaSet is named "<deployment>-<hash>" and selects the pod-template-hash label; a
// name taken by a ReplicaSet with another template is a hash collision, resolved by
// increasing status.collisionCount, which changes the hash of the next attempt.
func (c *Controller) newReplicaSet(ctx context.Context, d *appsv1.Deployment, existing *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, error) {
	log := klog.FromContext(ctx)
	newRevision := strconv.FormatInt(maxRevision(log, old)+1, 10)

	if existing != nil {
		rs := existing.DeepCopy()
		if setNewReplicaSetAnnotations(log, d, rs, newRevision, true) || rs.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
			rs.Spec.MinReadySeconds = d.Spec.MinReadySeconds
			return c.client.AppsV1().ReplicaSets(rs.Namespace).Update(ctx, rs, metav1.UpdateOptions{})
		}
		changed := setDeploymentRevision(d, rs.Annotations[RevisionAnnotation])
		if hasProgressDeadline(d) && getCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setCondition(&d.Status, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonFoundNewReplicaSet,
				fmt.Sprintf("Found new replica set %q", rs.Name)))
			changed = true
		}
		if changed {
			if err := c.updateStatus(ctx, d); err != nil {
				return nil, err
			}
		}
		return rs, nil
	}
	if !create {
		return nil, nil
	}

	template := *d.Spec.Template.DeepCopy()
	hash := templatehash.Compute(&template, d.Status.CollisionCount)
	template.Labels = withLabel(d.Spec.Template.Labels, appsv1.DefaultDeploymentUniqueLabelKey, hash)
	selector := d.Spec.Selector.DeepCopy()
	if selector == nil {
		selector = &metav1.LabelSelector{}
	}
	selector.MatchLabels = withLabel(selector.MatchLabels, appsv1.DefaultDeploymentUniqueLabelKey, hash)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:            replicaSetName(d.Name, hash),
			Namespace:       d.Namespace,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, controllerKind)},
			Labels:          template.Labels,
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        ptr.To[int32](0),
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        selector,
			Template:        template,
		},
	}
	replicas, err := newReplicaSetReplicas(d, append(old, rs), rs)
	if err != nil {
		return nil, err
	}
	*rs.Spec.Replicas = replicas
	setNewReplicaSetAnnotations(log, d, rs, newRevision, false)

	created, err := c.client.AppsV1().ReplicaSets(d.Namespace).Create(ctx, rs, metav1.CreateOptions{})
	alreadyExisted := false
	switch {
	case apierrors.IsAlreadyExists(err):
		alreadyExisted = true
		found, getErr := c.rsLister.ReplicaSets(rs.Namespace).Get(rs.Name)
		if getErr != nil {
			return nil, getErr
		}
		// Ours and with our template: an earlier sync created it and the cache had not
		// seen it yet.
		if ref := metav1.GetControllerOf(found); ref != nil && ref.UID == d.UID && equalIgnoringHash(&d.Spec.Template, &found.Spec.Template) {
			created, err = found, nil
			break
		}
		previous := ptr.Deref(d.Status.CollisionCount, 0)
		d.Status.CollisionCount = ptr.To(previous + 1)
		if uErr := c.updateStatus(ctx, d); uErr == nil {
			log.V(2).Info("hash collision; increased collisionCount", "replicaSet", rs.Name, "oldCollisionCount", previous, "newCollisionCount", previous+1)
		}
		return nil, err
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return nil, err
	case err != nil:
		msg := fmt.Sprintf("Failed to create new replica set %q: %v", rs.Name, err)
		if hasProgressDeadline(d) {
			setCondition(&d.Status, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionFalse, ReasonReplicaSetCreateError, msg))
			// The create error is what is returned and retried; this write is best effort.
			_ = c.updateStatus(ctx, d)
		}
		c.recorder.Eventf(d, corev1.EventTypeWarning, ReasonReplicaSetCreateError, "%s", msg)
		return nil, err
	}
	if !alreadyExisted && replicas > 0 {
		c.recorder.Eventf(d, corev1.EventTypeNormal, EventScalingReplicaSet, "Scaled up replica set %s from 0 to %d", created.Name, replicas)
	}
	changed := setDeploymentRevision(d, newRevision)
	if !alreadyExisted && hasProgressDeadline(d) {
		setCondition(&d.Status, c.newCondition(appsv1.DeploymentProgressing, corev1.ConditionTrue, ReasonNewReplicaSetCreated,
			fmt.Sprintf("Created new replica set %q", created.Name)))
		changed = true
	}
	if changed {
		err = c.updateStatus(ctx, d)
	}
	return created, err
}

// updateStatus writes d's status and annotations (the revision: the status subresource of
// Deployments takes annotations too). It keeps the resourceVersion the write returned, so
// that a second status write in the same sync is not refused as a conflict with the first
// (upstream's controller sends the stale one and retries the whole sync).
func (c *Controller) updateStatus(ctx context.Context, d *appsv1.Deployment) error {
	updated, err := c.client.AppsV1().Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
	if err == nil && updated != nil {
		d.ResourceVersion = updated.ResourceVersion
	}
	return err
}

// withLabel returns a copy of labels with key=value added.
func withLabel(labels map[string]string, key, value string) map[string]string {
	out := make(map[string]string, len(labels)+1)
	for k, v := range labels {
		out[k] = v
	}
	out[key] = value
	return out
}

// scale handles a resize of the Deployment. With one active ReplicaSet (or none) that one
// takes the new size; with a saturated new ReplicaSet the old ones go to 0; during a
// rolling update the difference to spec.replicas+maxSurge is spread over the active
// ReplicaSets in proportion to their size, so that a rollout in progress keeps its ratio.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	if target := activeOrLatest(newRS, old); target != nil {
		if *target.Spec.Replicas == *d.Spec.Replicas {
			return nil
		}
		_, _, err := c.scaleReplicaSet(ctx, target, *d.Spec.Replicas, d, false)
		return err
	}
	if saturated(d, newRS) {
		for _, rs := range active(old) {
			if _, _, err := c.scaleReplicaSet(ctx, rs, 0, d, false); err != nil {
				return err
			}
		}
		return nil
	}
	if !isRollingUpdate(d) {
		return nil
	}
	sizes := proportionalSizes(klog.FromContext(ctx), d, active(append(old, newRS)))
	for _, s := range sizes {
		// Forced: even an unchanged size needs the new replica annotations, which mark
		// the resize as handled.
		if _, _, err := c.scaleReplicaSet(ctx, s.rs, s.size, d, true); err != nil {
			return err
		}
	}
	return nil
}

// sized is a ReplicaSet and the size a proportional resize gives it.
type sized struct {
	rs   *appsv1.ReplicaSet
	size int32
}

// proportionalSizes spreads the difference between spec.replicas+maxSurge (0 when the
// Deployment is scaled to 0) and the sum of the active ReplicaSets' sizes over them: each
// gets its proportion, rounded, and the first in order (largest; on growth the newer, on
// shrinking the older wins ties) the rounding leftover, never going below 0.
func proportionalSizes(log logr.Logger, d *appsv1.Deployment, act []*appsv1.ReplicaSet) []sized {
	var allowed int32
	if *d.Spec.Replicas > 0 {
		allowed = *d.Spec.Replicas + maxSurge(d)
	}
	toAdd := allowed - sum(act, specReplicas)
	switch {
	case toAdd > 0:
		sortLargerFirst(act, false)
	case toAdd < 0:
		sortLargerFirst(act, true)
	}
	out := make([]sized, len(act))
	var added int32
	for i, rs := range act {
		p := replicaSetProportion(log, rs, d, toAdd, added)
		out[i] = sized{rs: rs, size: *rs.Spec.Replicas + p}
		added += p
	}
	if len(out) > 0 && toAdd != 0 {
		out[0].size = max(out[0].size+toAdd-added, 0)
	}
	return out
}

// EventScalingReplicaSet is the reason of the events recorded on the Deployment whenever
// it resizes one of its ReplicaSets.
const EventScalingReplicaSet = "ScalingReplicaSet"

// scaleReplicaSet sets rs's size and replica annotations. Without force nothing is
// written when the size is already right. It says whether the size changed, and returns
// the updated ReplicaSet.
func (c *Controller) scaleReplicaSet(ctx context.Context, rs *appsv1.ReplicaSet, size int32, d *appsv1.Deployment, force bool) (bool, *appsv1.ReplicaSet, error) {
	if !force && *rs.Spec.Replicas == size {
		return false, rs, nil
	}
	maxReplicas := *d.Spec.Replicas + maxSurge(d)
	resize := *rs.Spec.Replicas != size
	if !resize && !replicasAnnotationsStale(rs, *d.Spec.Replicas, maxReplicas) {
		return false, rs, nil
	}
	from := *rs.Spec.Replicas
	cp := rs.DeepCopy()
	*cp.Spec.Replicas = size
	setReplicasAnnotations(cp, *d.Spec.Replicas, maxReplicas)
	updated, err := c.client.AppsV1().ReplicaSets(cp.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
	if err != nil || !resize {
		return false, updated, err
	}
	direction := "up"
	if size < from {
		direction = "down"
	}
	c.recorder.Eventf(d, corev1.EventTypeNormal, EventScalingReplicaSet, "Scaled %s replica set %s from %d to %d", direction, updated.Name, from, size)
	return true, updated, nil
}

// cleanupDeployment deletes the oldest old ReplicaSets beyond revisionHistoryLimit, only
// those scaled to 0 whose pods are gone and whose status is current.
func (c *Controller) cleanupDeployment(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment) error {
	if d.Spec.RevisionHistoryLimit == nil || *d.Spec.RevisionHistoryLimit == math.MaxInt32 {
		return nil
	}
	var alive []*appsv1.ReplicaSet
	for _, rs := range old {
		if rs != nil && rs.DeletionTimestamp == nil {
			alive = append(alive, rs)
		}
	}
	excess := int32(len(alive)) - *d.Spec.RevisionHistoryLimit
	if excess <= 0 {
		return nil
	}
	sortByRevision(alive)
	log := klog.FromContext(ctx)
	for _, rs := range alive[:excess] {
		if rs.Status.Replicas != 0 || *rs.Spec.Replicas != 0 || rs.Generation > rs.Status.ObservedGeneration {
			continue
		}
		log.V(4).Info("deleting an old ReplicaSet beyond revisionHistoryLimit", "replicaSet", klog.KObj(rs))
		err := c.client.AppsV1().ReplicaSets(rs.Namespace).Delete(ctx, rs.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// syncDeploymentStatus writes the counts and the Available condition if they changed.
func (c *Controller) syncDeploymentStatus(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) error {
	s := c.calculateStatus(all, newRS, d)
	if apiequality.Semantic.DeepEqual(d.Status, s) {
		return nil
	}
	d.Status = s
	return c.updateStatus(ctx, d)
}

// calculateStatus derives the status from the ReplicaSets: counts of the pods that exist
// (status.replicas of the ReplicaSets), unavailable ones counted against the desired
// sizes, the conditions kept except Available, which is set from minAvailable.
func (c *Controller) calculateStatus(all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) appsv1.DeploymentStatus {
	available := sum(all, availableReplicas)
	s := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            sum(all, statusReplicas),
		UpdatedReplicas:     sum([]*appsv1.ReplicaSet{newRS}, statusReplicas),
		ReadyReplicas:       sum(all, readyReplicas),
		AvailableReplicas:   available,
		UnavailableReplicas: max(sum(all, specReplicas)-available, 0),
		TerminatingReplicas: terminatingReplicas(all),
		CollisionCount:      d.Status.CollisionCount,
		Conditions:          append([]appsv1.DeploymentCondition(nil), d.Status.Conditions...),
	}
	if available >= *d.Spec.Replicas-maxUnavailable(d) {
		setCondition(&s, c.newCondition(appsv1.DeploymentAvailable, corev1.ConditionTrue, ReasonMinimumAvailable, "Deployment has minimum availability."))
	} else {
		setCondition(&s, c.newCondition(appsv1.DeploymentAvailable, corev1.ConditionFalse, ReasonMinimumUnavailable, "Deployment does not have minimum availability."))
	}
	return s
}

// isScalingEvent says whether spec.replicas differs from the desired-replicas annotation
// of an active ReplicaSet: the Deployment was resized, which is handled by scale, not by a
// rollout step.
func (c *Controller) isScalingEvent(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet) (bool, error) {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rss, false)
	if err != nil {
		return false, err
	}
	log := klog.FromContext(ctx)
	for _, rs := range active(append(old, newRS)) {
		if desired, ok := replicasAnnotation(log, rs, DesiredReplicasAnnotation); ok && desired != *d.Spec.Replicas {
			return true, nil
		}
	}
	return false, nil
}

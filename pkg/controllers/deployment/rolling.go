package deployment

import (
	"context"
	"fmt"
	"math"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// resolveFenceposts turns maxSurge and maxUnavailable (numbers or percentages of desired)
// into replica counts: a surge percentage rounds up, an unavailable one down, and when
// both come out 0 one pod may be unavailable, or no rollout could ever start.
func resolveFenceposts(surge, unavailable *intstr.IntOrString, desired int32) (int32, int32, error) {
	zero := intstr.FromInt32(0)
	s, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(surge, zero), int(desired), true)
	if err != nil {
		return 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	u, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(unavailable, zero), int(desired), false)
	if err != nil {
		return 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if s == 0 && u == 0 {
		u = 1
	}
	return int32(s), int32(u), nil
}

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType
}

// maxSurge is how many pods above spec.replicas a rolling update may run (0 for Recreate).
// Invalid values, which the API server rejects, count as 0.
func maxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || d.Spec.Strategy.RollingUpdate == nil {
		return 0
	}
	s, _, _ := resolveFenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, *d.Spec.Replicas)
	return s
}

// maxUnavailable is how many of spec.replicas may be unavailable during a rolling update,
// at most spec.replicas (0 for Recreate and for 0 replicas).
func maxUnavailable(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || d.Spec.Strategy.RollingUpdate == nil || *d.Spec.Replicas == 0 {
		return 0
	}
	_, u, _ := resolveFenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, *d.Spec.Replicas)
	return min(u, *d.Spec.Replicas)
}

// newReplicaSetReplicas is the size the new ReplicaSet may grow to now: for a rolling
// update as far as maxSurge allows over all ReplicaSets, never above spec.replicas; for
// Recreate spec.replicas.
func newReplicaSetReplicas(d *appsv1.Deployment, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet) (int32, error) {
	switch d.Spec.Strategy.Type {
	case appsv1.RollingUpdateDeploymentStrategyType:
		var surgeValue *intstr.IntOrString
		if d.Spec.Strategy.RollingUpdate != nil {
			surgeValue = d.Spec.Strategy.RollingUpdate.MaxSurge
		}
		surge, err := intstr.GetScaledValueFromIntOrPercent(surgeValue, int(*d.Spec.Replicas), true)
		if err != nil {
			return 0, fmt.Errorf("maxSurge: %w", err)
		}
		ceiling := *d.Spec.Replicas + int32(surge)
		current := sum(all, specReplicas)
		if current >= ceiling {
			return *newRS.Spec.Replicas, nil
		}
		grow := min(ceiling-current, *d.Spec.Replicas-*newRS.Spec.Replicas)
		return *newRS.Spec.Replicas + grow, nil
	case appsv1.RecreateDeploymentStrategyType:
		return *d.Spec.Replicas, nil
	default:
		return 0, fmt.Errorf("deployment strategy %q is not supported", d.Spec.Strategy.Type)
	}
}

// rolloutRolling advances a rolling update by one step: grow the new ReplicaSet within
// maxSurge, else shrink old ones within maxUnavailable, else (once complete) clean up old
// revisions; then write the status.
func (c *Controller) rolloutRolling(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rss, true)
	if err != nil {
		return err
	}
	all := append(old, newRS)
	grown, err := c.reconcileNewReplicaSet(ctx, all, newRS, d)
	if err != nil {
		return err
	}
	if grown {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	shrunk, err := c.reconcileOldReplicaSets(ctx, all, active(old), newRS, d)
	if err != nil {
		return err
	}
	if shrunk {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	if complete(d, &d.Status) {
		if err := c.cleanupDeployment(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncRolloutStatus(ctx, all, newRS, d)
}

// reconcileNewReplicaSet sizes the new ReplicaSet: down to spec.replicas if above it, else
// up as far as maxSurge allows. It says whether it scaled.
func (c *Controller) reconcileNewReplicaSet(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	want := *d.Spec.Replicas
	switch {
	case *newRS.Spec.Replicas == want:
		return false, nil
	case *newRS.Spec.Replicas > want:
		scaled, _, err := c.scaleReplicaSet(ctx, newRS, want, d, false)
		return scaled, err
	}
	size, err := newReplicaSetReplicas(d, all, newRS)
	if err != nil {
		return false, err
	}
	scaled, _, err := c.scaleReplicaSet(ctx, newRS, size, d, false)
	return scaled, err
}

// reconcileOldReplicaSets shrinks the old ReplicaSets as far as maxUnavailable allows:
// first the replicas that are not available anyway (they do not lower availability),
// then available ones, oldest ReplicaSet first. It says whether it scaled.
//
// Errors of the two scale-down steps are logged but not returned, as upstream does: the
// status is written regardless and the next sync retries.
func (c *Controller) reconcileOldReplicaSets(ctx context.Context, all, old []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	log := klog.FromContext(ctx)
	if sum(old, specReplicas) == 0 {
		return false, nil
	}
	minAvailable := *d.Spec.Replicas - maxUnavailable(d)
	newUnavailable := *newRS.Spec.Replicas - newRS.Status.AvailableReplicas
	// The new ReplicaSet's unavailable pods may become available by themselves; the old
	// ones may be cut only by what exceeds that and minAvailable.
	budget := sum(all, specReplicas) - minAvailable - newUnavailable
	if budget <= 0 {
		return false, nil
	}
	old, unhealthy, err := c.cleanupUnhealthyReplicas(ctx, old, d, budget)
	if err != nil {
		log.V(2).Info("scaling down unhealthy old replicas failed", "err", err)
		return false, nil
	}
	healthy, err := c.scaleDownOldReplicaSetsForRollingUpdate(ctx, append(old, newRS), old, d)
	if err != nil {
		log.V(2).Info("scaling down old replica sets failed", "err", err)
		return false, nil
	}
	log.V(4).Info("scaled down old replica sets", "unhealthy", unhealthy, "available", healthy)
	return unhealthy+healthy > 0, nil
}

// cleanupUnhealthyReplicas scales old ReplicaSets (oldest first) down by their
// unavailable replicas, up to limit in all. It returns old with the updated objects.
func (c *Controller) cleanupUnhealthyReplicas(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment, limit int32) ([]*appsv1.ReplicaSet, int32, error) {
	sortOlderFirst(old)
	var done int32
	for i, rs := range old {
		if done >= limit {
			break
		}
		unavailable := *rs.Spec.Replicas - rs.Status.AvailableReplicas
		if *rs.Spec.Replicas == 0 || unavailable == 0 {
			continue
		}
		if unavailable < 0 {
			// The status is older than the spec (e.g. right after a proportional scale-down):
			// its availability can't be trusted, and acting on it could scale below
			// minAvailable. Stop this scale-down, as upstream; the status update requeues.
			return nil, done, fmt.Errorf("when cleaning up unhealthy replicas, got invalid request to scale down %s/%s %d -> %d",
				rs.Namespace, rs.Name, *rs.Spec.Replicas, *rs.Spec.Replicas-min(limit-done, unavailable))
		}
		cut := min(limit-done, unavailable)
		_, updated, err := c.scaleReplicaSet(ctx, rs, *rs.Spec.Replicas-cut, d, false)
		if err != nil {
			return nil, done, err
		}
		done += cut
		old[i] = updated
	}
	return old, done, nil
}

// scaleDownOldReplicaSetsForRollingUpdate scales old ReplicaSets (oldest first) down by as
// many available replicas as exceed minAvailable over all ReplicaSets.
func (c *Controller) scaleDownOldReplicaSetsForRollingUpdate(ctx context.Context, all, old []*appsv1.ReplicaSet, d *appsv1.Deployment) (int32, error) {
	minAvailable := *d.Spec.Replicas - maxUnavailable(d)
	available := sum(all, availableReplicas)
	if available <= minAvailable {
		return 0, nil
	}
	sortOlderFirst(old)
	limit := available - minAvailable
	var done int32
	for _, rs := range old {
		if done >= limit {
			break
		}
		if *rs.Spec.Replicas == 0 {
			continue
		}
		cut := min(*rs.Spec.Replicas, limit-done)
		if _, _, err := c.scaleReplicaSet(ctx, rs, *rs.Spec.Replicas-cut, d, false); err != nil {
			return done, err
		}
		done += cut
	}
	return done, nil
}

// replicaSetProportion is how many replicas rs gains (or loses, when toAdd < 0) in a
// proportional resize of toAdd replicas of which added are already handed out: rs's share
// of the new maximum, capped by what is left.
func replicaSetProportion(log logr.Logger, rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if rs == nil || *rs.Spec.Replicas == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	share := replicaSetShare(log, rs, d)
	left := toAdd - added
	if toAdd > 0 {
		return min(share, left)
	}
	return max(share, left)
}

// replicaSetShare is the change that keeps rs's fraction of the Deployment's maximum size
// (spec.replicas+maxSurge) as it was when rs was last sized (its max-replicas annotation,
// else the Deployment's status.replicas), rounded half away from zero.
func replicaSetShare(log logr.Logger, rs *appsv1.ReplicaSet, d *appsv1.Deployment) int32 {
	if *d.Spec.Replicas == 0 {
		return -*rs.Spec.Replicas
	}
	newMax := *d.Spec.Replicas + maxSurge(d)
	oldMax, ok := replicasAnnotation(log, rs, MaxReplicasAnnotation)
	if !ok || oldMax == 0 {
		oldMax = d.Status.Replicas
		if oldMax == 0 {
			return 0
		}
	}
	size := float64(*rs.Spec.Replicas*newMax) / float64(oldMax)
	return int32(math.Round(size)) - *rs.Spec.Replicas
}

package deployment

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// rolloutRecreate replaces all pods at once: scale every old ReplicaSet to 0, wait until
// their pods are gone (not merely scaled down: pods still terminating would run beside the
// new ones), then create the new ReplicaSet at full size.
func (c *Controller) rolloutRecreate(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet, pods map[types.UID][]*corev1.Pod) error {
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rss, false)
	if err != nil {
		return err
	}
	all := append(old, newRS)

	scaledDown, err := c.scaleDownOldReplicaSetsForRecreate(ctx, active(old), d)
	if err != nil {
		return err
	}
	if scaledDown || oldPodsRunning(newRS, old, pods) {
		return c.syncRolloutStatus(ctx, all, newRS, d)
	}
	if newRS == nil {
		if newRS, old, err = c.replicaSetsAndSyncRevision(ctx, d, rss, true); err != nil {
			return err
		}
		all = append(old, newRS)
	}
	if _, _, err := c.scaleReplicaSet(ctx, newRS, *d.Spec.Replicas, d, false); err != nil {
		return err
	}
	if complete(d, &d.Status) {
		if err := c.cleanupDeployment(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncRolloutStatus(ctx, all, newRS, d)
}

// scaleDownOldReplicaSetsForRecreate scales the given ReplicaSets to 0 and says whether it
// changed any.
func (c *Controller) scaleDownOldReplicaSetsForRecreate(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	scaled := false
	for i, rs := range old {
		if *rs.Spec.Replicas == 0 {
			continue
		}
		did, updated, err := c.scaleReplicaSet(ctx, rs, 0, d, false)
		if err != nil {
			return false, err
		}
		if did {
			old[i] = updated
			scaled = true
		}
	}
	return scaled, nil
}

// oldPodsRunning says whether an old ReplicaSet still reports pods, or a pod of one that
// has not finished (Succeeded or Failed) still exists.
func oldPodsRunning(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet, pods map[types.UID][]*corev1.Pod) bool {
	if sum(old, statusReplicas) > 0 {
		return true
	}
	for uid, list := range pods {
		if newRS != nil && uid == newRS.UID {
			continue
		}
		for _, p := range list {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return true
			}
		}
	}
	return false
}

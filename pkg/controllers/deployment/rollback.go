package deployment

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Reasons of the events of a rollback requested through the deprecated
// deprecated.deployment.rollback.to annotation (what the removed spec.rollbackTo of
// extensions/v1beta1 became). `kubectl rollout undo` does not use it: it copies the old
// ReplicaSet's template into the Deployment itself.
const (
	EventRollbackRevisionNotFound  = "DeploymentRollbackRevisionNotFound"
	EventRollbackTemplateUnchanged = "DeploymentRollbackTemplateUnchanged"
	EventRollbackDone              = "DeploymentRollback"
)

// rollbackTo returns the revision the deprecated annotation asks for (0: the previous
// one), or nil when there is no valid request.
func rollbackTo(d *appsv1.Deployment) *int64 {
	v := d.Annotations[appsv1.DeprecatedRollbackTo]
	if v == "" {
		return nil
	}
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil
	}
	return &rev
}

// rollback copies the template of the requested revision's ReplicaSet into the Deployment
// and removes the request. A revision that does not exist, or whose template is already
// the current one, only gets a warning event.
func (c *Controller) rollback(ctx context.Context, d *appsv1.Deployment, rss []*appsv1.ReplicaSet) error {
	log := klog.FromContext(ctx)
	newRS, old, err := c.replicaSetsAndSyncRevision(ctx, d, rss, true)
	if err != nil {
		return err
	}
	all := append(old, newRS)
	target := *rollbackTo(d)
	if target == 0 {
		if target = previousRevision(log, all); target == 0 {
			c.recorder.Eventf(d, corev1.EventTypeWarning, EventRollbackRevisionNotFound, "%s", "Unable to find last revision.")
			return c.clearRollbackTo(ctx, d)
		}
	}
	for _, rs := range all {
		v, err := revision(rs.Annotations)
		if err != nil {
			log.V(4).Info("skipping a ReplicaSet with an unparsable revision", "replicaSet", klog.KObj(rs), "err", err)
			continue
		}
		if v != target {
			continue
		}
		if equalIgnoringHash(&d.Spec.Template, &rs.Spec.Template) {
			c.recorder.Eventf(d, corev1.EventTypeWarning, EventRollbackTemplateUnchanged, "%s",
				fmt.Sprintf("The rollback revision contains the same template as current deployment %q", d.Name))
			return c.clearRollbackTo(ctx, d)
		}
		d.Spec.Template.ObjectMeta = *rs.Spec.Template.ObjectMeta.DeepCopy()
		d.Spec.Template.Spec = *rs.Spec.Template.Spec.DeepCopy()
		delete(d.Spec.Template.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
		setAnnotationsFromReplicaSet(d, rs)
		if err := c.clearRollbackTo(ctx, d); err != nil {
			return err
		}
		c.recorder.Eventf(d, corev1.EventTypeNormal, EventRollbackDone, "%s", fmt.Sprintf("Rolled back deployment %q to revision %d", d.Name, target))
		return nil
	}
	c.recorder.Eventf(d, corev1.EventTypeWarning, EventRollbackRevisionNotFound, "%s", "Unable to find the revision to rollback to.")
	return c.clearRollbackTo(ctx, d)
}

// clearRollbackTo removes the request annotation and writes the Deployment.
func (c *Controller) clearRollbackTo(ctx context.Context, d *appsv1.Deployment) error {
	delete(d.Annotations, appsv1.DeprecatedRollbackTo)
	_, err := c.client.AppsV1().Deployments(d.Namespace).Update(ctx, d, metav1.UpdateOptions{})
	return err
}

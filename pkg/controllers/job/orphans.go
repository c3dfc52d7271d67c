package job

import (
	"context"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// orphanKey names pods whose tracking finalizer no Job sync will remove: one pod by name,
// or every pod of a namespace matching a finished or deleted Job's selector.
type orphanKey struct {
	namespace string
	name      string // a pod's name, or "" when selector is set
	selector  string
}

func (c *Controller) enqueueOrphan(pod *corev1.Pod) {
	c.orphans.Add(orphanKey{namespace: pod.Namespace, name: pod.Name})
}

// enqueueSelector queues the pods of a finished or deleted Job for finalizer cleanup.
func (c *Controller) enqueueSelector(log klog.Logger, job *batchv1.Job) {
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("job %s/%s has invalid label selector: %w", job.Namespace, job.Name, err))
		return
	}
	log.V(5).Info("enqueueing pods of a finished or deleted job for finalizer cleanup", "namespace", job.Namespace, "name", job.Name)
	c.orphans.Add(orphanKey{namespace: job.Namespace, selector: sel.String()})
}

func (c *Controller) processNextOrphan(ctx context.Context) bool {
	key, shutdown := c.orphans.Get()
	if shutdown {
		return false
	}
	defer c.orphans.Done(key)
	if err := c.syncOrphan(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing orphan pod", "namespace", key.namespace, "name", key.name)
		c.orphans.AddRateLimited(key)
		return true
	}
	c.orphans.Forget(key)
	return true
}

func (c *Controller) syncOrphan(ctx context.Context, key orphanKey) error {
	if key.selector == "" {
		pod, err := c.podLister.Pods(key.namespace).Get(key.name)
		if apierrors.IsNotFound(err) {
			return nil // gone, or its namespace is no longer this shard's
		}
		if err != nil {
			return err
		}
		return c.cleanOrphan(ctx, pod)
	}
	sel, err := labels.Parse(key.selector)
	if err != nil {
		return fmt.Errorf("invalid label selector: %w", err)
	}
	ps, err := c.podLister.Pods(key.namespace).List(sel)
	if err != nil {
		return err
	}
	for _, pod := range ps {
		if err := c.cleanOrphan(ctx, pod); err != nil {
			klog.FromContext(ctx).Error(err, "syncing orphan pod failed", "pod", klog.KObj(pod))
			c.orphans.AddRateLimited(orphanKey{namespace: pod.Namespace, name: pod.Name})
		}
	}
	return nil
}

// cleanOrphan removes the tracking finalizer from a pod no unfinished Job of this
// controller owns. Pods of Jobs another controller manages are left alone.
func (c *Controller) cleanOrphan(ctx context.Context, pod *corev1.Pod) error {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		if ref.Kind != kind.Kind || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
			return nil // not a batch/v1 Job's
		}
		job := c.controllerOf(pod.Namespace, ref)
		if job != nil && !c.handles(job) {
			klog.FromContext(ctx).V(2).Info("Skip cleanup of the job finalizer for a pod owned by a job that is managed by an external controller",
				"namespace", pod.Namespace, "name", pod.Name, "podUID", pod.UID, "jobUID", job.UID, "controllerName", job.Spec.ManagedBy)
			return nil
		}
		if job != nil && !isFinished(job) {
			return nil // adopted meanwhile
		}
	}
	patch := removeFinalizerPatch(pod)
	if patch == nil {
		return nil
	}
	if err := c.writeAllowed(pod.Namespace + "/" + pod.Name); err != nil {
		return err
	}
	if err := c.patchPod(ctx, pod.Namespace, pod.Name, patch); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// removeFinalizerPatch is the strategic merge patch that removes the tracking finalizer,
// or nil when the pod has none.
func removeFinalizerPatch(pod *corev1.Pod) []byte {
	if !hasTrackingFinalizer(pod) {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"$deleteFromPrimitiveList/finalizers": []string{batchv1.JobTrackingFinalizer},
	}})
	return b
}

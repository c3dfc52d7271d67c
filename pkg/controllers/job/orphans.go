package job

import (
	"context"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

func (c *Controller) enqueueOrphan(pod *corev1.Pod) {
	c.orphans.Add(pod.Namespace + "/" + pod.Name)
}

// enqueueSelector queues the pods of a finished or deleted Job that still carry the
// tracking finalizer, for its removal (upstream's cleanupPodFinalizers).
func (c *Controller) enqueueSelector(log klog.Logger, job *batchv1.Job) {
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("job %s/%s has invalid label selector: %w", job.Namespace, job.Name, err))
		return
	}
	ps, err := c.podLister.Pods(job.Namespace).List(sel)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("listing the pods of job %s/%s: %w", job.Namespace, job.Name, err))
		return
	}
	log.V(5).Info("enqueueing pods of a finished or deleted job for finalizer cleanup", "namespace", job.Namespace, "name", job.Name)
	for _, pod := range ps {
		if hasTrackingFinalizer(pod) {
			c.enqueueOrphan(pod)
		}
	}
}

// syncOrphan removes the tracking finalizer of the pod of key ("namespace/name") if no
// unfinished Job of this controller owns it.
func (c *Controller) syncOrphan(ctx context.Context, key string) error {
	ns, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // the queue admits only namespaced keys
	}
	pod, err := c.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil // gone
	}
	if err != nil {
		return err
	}
	return c.cleanOrphan(ctx, pod)
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

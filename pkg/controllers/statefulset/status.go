package statefulset

import (
	"context"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// isCreated: the API server has the pod (a pod the controller only plans has no phase).
func isCreated(pod *corev1.Pod) bool { return pod.Status.Phase != "" }

func isPending(pod *corev1.Pod) bool { return pod.Status.Phase == corev1.PodPending }

func isTerminating(pod *corev1.Pod) bool { return pod.DeletionTimestamp != nil }

// isRunningAndReady: Running with a True Ready condition.
func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && podutil.IsReady(pod)
}

// isAvailable: ready for at least minReadySeconds at now.
func isAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return podutil.IsAvailable(pod, minReadySeconds, now)
}

// isUnavailable: not available, or being deleted.
func isUnavailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return !isAvailable(pod, minReadySeconds, now) || isTerminating(pod)
}

// countReplicas sets the status's replica counts from the pods: created ones, ready
// (Running and Ready) ones and those of them available, and the created, not terminating
// ones at the current and at the update revision.
func countReplicas(status *appsv1.StatefulSetStatus, minReadySeconds int32, current, update *appsv1.ControllerRevision, now time.Time, podLists ...[]*corev1.Pod) {
	status.Replicas, status.ReadyReplicas, status.AvailableReplicas = 0, 0, 0
	status.CurrentReplicas, status.UpdatedReplicas = 0, 0
	for _, list := range podLists {
		for _, pod := range list {
			if pod == nil {
				continue
			}
			if isCreated(pod) {
				status.Replicas++
			}
			if isRunningAndReady(pod) {
				status.ReadyReplicas++
				if isAvailable(pod, minReadySeconds, now) {
					status.AvailableReplicas++
				}
			}
			if isCreated(pod) && !isTerminating(pod) {
				rev := podRevision(pod)
				if rev == current.Name {
					status.CurrentReplicas++
				}
				if rev == update.Name {
					status.UpdatedReplicas++
				}
			}
		}
	}
}

// completeUpdate ends a rollout once every wanted pod exists, is ready and runs the update
// revision: the update revision becomes the current one.
func completeUpdate(set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) {
	want := *set.Spec.Replicas
	if status.UpdatedReplicas == want && status.ReadyReplicas == want && status.Replicas == want {
		status.CurrentReplicas = status.UpdatedReplicas
		status.CurrentRevision = status.UpdateRevision
	}
}

// statusChanged reports whether status differs from the set's in what upstream compares
// (a newer observedGeneration, the counts, the revisions, the conditions; not
// collisionCount alone).
func statusChanged(set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) bool {
	return status.ObservedGeneration > set.Status.ObservedGeneration ||
		status.Replicas != set.Status.Replicas ||
		status.CurrentReplicas != set.Status.CurrentReplicas ||
		status.ReadyReplicas != set.Status.ReadyReplicas ||
		status.UpdatedReplicas != set.Status.UpdatedReplicas ||
		status.CurrentRevision != set.Status.CurrentRevision ||
		status.AvailableReplicas != set.Status.AvailableReplicas ||
		status.UpdateRevision != set.Status.UpdateRevision ||
		!reflect.DeepEqual(set.Status.Conditions, status.Conditions)
}

// writeStatus completes a finished rollout and writes the status when it changed,
// retrying conflicts against the cache's copy of the set.
func (c *Controller) writeStatus(ctx context.Context, set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) error {
	completeUpdate(set, status)
	if !statusChanged(set, status) {
		return nil
	}
	set = set.DeepCopy()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		set.Status = *status
		updated, err := c.client.AppsV1().StatefulSets(set.Namespace).UpdateStatus(ctx, set, metav1.UpdateOptions{})
		if err == nil {
			c.consistency.Wrote(keyOf(updated), updated.UID, statefulSetsResource, updated.ResourceVersion)
			return nil
		}
		if cached, gerr := c.setLister.StatefulSets(set.Namespace).Get(set.Name); gerr == nil {
			set = cached.DeepCopy()
		}
		return err
	})
}

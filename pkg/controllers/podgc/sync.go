package podgc

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
)

// sync collects one pod of the shard if one of upstream's passes would: above the
// threshold of terminated pods, terminating on a node that is not ready and tainted
// out-of-service, bound to a node verified gone, or terminating and never scheduled.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	log := klog.FromContext(ctx).WithValues("controller", Name, "namespace", namespace, "name", name)
	ctx = klog.NewContext(ctx, log)
	pod, err := c.podLister.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetExcess(key)
		return nil
	}
	if err != nil {
		return err
	}
	if c.opts.Threshold > 0 && isTerminated(pod) && c.inExcess(pod) {
		log.Info("Garbage collecting terminated pod above the threshold", "threshold", c.opts.Threshold)
		c.forgetExcess(key)
		return c.forceDelete(ctx, pod, nil, reasonTerminated)
	}
	if pod.DeletionTimestamp != nil && pod.Spec.NodeName != "" {
		if node, err := c.nodeLister.Get(pod.Spec.NodeName); err == nil && outOfService(node) {
			log.V(4).Info("Garbage collecting pod that is terminating", "phase", pod.Status.Phase)
			return c.forceDelete(ctx, pod, nil, reasonOutOfService)
		}
	}
	if pod.Spec.NodeName != "" {
		if _, err := c.nodeLister.Get(pod.Spec.NodeName); apierrors.IsNotFound(err) {
			return c.orphan(ctx, key, pod)
		}
	}
	if pod.DeletionTimestamp != nil && pod.Spec.NodeName == "" {
		log.V(2).Info("Found unscheduled terminating Pod not assigned to any Node, deleting")
		return c.forceDelete(ctx, pod, nil, reasonUnscheduled)
	}
	return nil
}

// orphan deals with a pod whose node the cache lacks: it waits out the node name's
// quarantine (the key queued again for its end), then checks with a live read that the
// node is gone, and only then marks the pod failed and deletes it.
func (c *Controller) orphan(ctx context.Context, key string, pod *corev1.Pod) error {
	node := pod.Spec.NodeName
	now := c.clock.Now()
	c.mu.Lock()
	since, ok := c.missing[node]
	if !ok {
		since = now
		c.missing[node] = now
	}
	verified, gone := c.absent[node]
	c.mu.Unlock()
	if wait := since.Add(c.opts.Quarantine).Sub(now); wait > 0 {
		c.queue.AddAfter(key, wait)
		return nil
	}
	if !gone || now.Sub(verified) >= gcCheckPeriod {
		_, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err == nil:
			// The cache lags: the node exists. Quarantined again if the cache still
			// lacks it at the next pass.
			c.mu.Lock()
			delete(c.missing, node)
			c.mu.Unlock()
			return nil
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading node %s: %w", node, err)
		}
		c.mu.Lock()
		c.absent[node] = now
		c.mu.Unlock()
	}
	log := klog.FromContext(ctx)
	log.V(2).Info("Found orphaned Pod assigned to the Node, deleting", "node", klog.KRef("", node))
	cond := &corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", ObservedGeneration: pod.Generation}
	if err := c.forceDelete(ctx, pod, cond, reasonOrphaned); err != nil {
		return err
	}
	log.Info("Forced deletion of orphaned Pod succeeded")
	return nil
}

// forceDelete marks pod Failed (with condition, if any) unless it already finished, and
// deletes it with a grace period of 0, counting the attempt and its failure under reason
// as upstream does. A pod already gone is not retried.
func (c *Controller) forceDelete(ctx context.Context, pod *corev1.Pod, condition *corev1.PodCondition, reason string) error {
	klog.FromContext(ctx).Info("PodGC is force deleting Pod")
	c.gcMetrics.Deleting.WithLabelValues(pod.Namespace, reason).Inc()
	err := c.markFailedAndDelete(ctx, pod, condition)
	if err == nil {
		return nil
	}
	c.gcMetrics.Errors.WithLabelValues(pod.Namespace, reason).Inc()
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("force deleting pod: %w", err)
}

func (c *Controller) markFailedAndDelete(ctx context.Context, pod *corev1.Pod, condition *corev1.PodCondition) error {
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		status := pod.Status.DeepCopy()
		status.Phase = corev1.PodFailed
		// PodObservedGenerationTracking is GA (locked on) in 1.37.
		status.ObservedGeneration = pod.Generation
		if condition != nil {
			setCondition(status, *condition, c.clock.Now())
		}
		patch, changed, err := statusPatch(pod.UID, pod.Status, *status)
		if err != nil {
			return err
		}
		if changed {
			if _, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType,
				patch, metav1.PatchOptions{}, "status"); err != nil {
				return err
			}
		}
	}
	return c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
}

// setCondition sets cond in status: a new condition or a changed status gets now as its
// transition time; an unchanged status keeps the existing one.
func setCondition(status *corev1.PodStatus, cond corev1.PodCondition, now time.Time) {
	cond.LastTransitionTime = metav1.NewTime(now)
	for i := range status.Conditions {
		if status.Conditions[i].Type != cond.Type {
			continue
		}
		if status.Conditions[i].Status == cond.Status {
			cond.LastTransitionTime = status.Conditions[i].LastTransitionTime
		}
		status.Conditions[i] = cond
		return
	}
	status.Conditions = append(status.Conditions, cond)
}

// statusPatch is the strategic merge patch from old to cur, with the pod's UID as a
// precondition, and whether it changes anything beyond that UID (the kubelet's and
// upstream's status patch).
func statusPatch(uid types.UID, old, cur corev1.PodStatus) ([]byte, bool, error) {
	oldJSON, err := json.Marshal(corev1.Pod{Status: old})
	if err != nil {
		return nil, false, err
	}
	curJSON, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: cur})
	if err != nil {
		return nil, false, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, curJSON, corev1.Pod{})
	if err != nil {
		return nil, false, err
	}
	return patch, string(patch) != fmt.Sprintf(`{"metadata":{"uid":%q}}`, uid), nil
}

// outOfService reports whether node is not ready and tainted
// node.kubernetes.io/out-of-service.
func outOfService(node *corev1.Node) bool {
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if ready {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeOutOfService {
			return true
		}
	}
	return false
}

var _ controllers.SyncFunc = (*Controller)(nil).sync

package podutil

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReadyCondition returns the pod's first Ready condition, or nil when the kubelet has not
// reported one yet.
func ReadyCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// IsReady reports whether the pod's Ready condition is True.
func IsReady(pod *corev1.Pod) bool {
	c := ReadyCondition(pod)
	return c != nil && c.Status == corev1.ConditionTrue
}

// ReadySince returns when a ready pod became ready (its Ready condition's last transition),
// and the zero time for a pod that is not ready or whose transition time is unknown.
func ReadySince(pod *corev1.Pod) metav1.Time {
	if c := ReadyCondition(pod); c != nil && c.Status == corev1.ConditionTrue {
		return c.LastTransitionTime
	}
	return metav1.Time{}
}

// IsAvailable reports whether the pod counts as available at now: ready, and ready for at
// least minReadySeconds (with minReadySeconds 0 every ready pod is available; a ready pod
// without a transition time is never available while minReadySeconds > 0).
func IsAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	if !IsReady(pod) {
		return false
	}
	if minReadySeconds <= 0 {
		return true
	}
	since := ReadySince(pod)
	return !since.IsZero() && !since.Add(time.Duration(minReadySeconds)*time.Second).After(now)
}

// IsTerminal reports whether the pod's phase is Succeeded or Failed: its containers have
// stopped for good.
func IsTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// IsActive reports whether the pod counts towards a controller's replicas: not terminal
// and not being deleted.
func IsActive(pod *corev1.Pod) bool {
	return !IsTerminal(pod) && pod.DeletionTimestamp == nil
}

// IsTerminating reports whether the pod is being deleted but still runs (not terminal):
// what status.terminatingReplicas counts.
func IsTerminating(pod *corev1.Pod) bool {
	return !IsTerminal(pod) && pod.DeletionTimestamp != nil
}

// FilterActive returns the active pods of pods, in order.
func FilterActive(pods []*corev1.Pod) []*corev1.Pod {
	return filter(pods, IsActive)
}

// FilterTerminating returns the terminating pods of pods, in order.
func FilterTerminating(pods []*corev1.Pod) []*corev1.Pod {
	return filter(pods, IsTerminating)
}

func filter(pods []*corev1.Pod, keep func(*corev1.Pod) bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// untilAvailable returns how long after at the ready pod becomes available, and false
// when it is not ready, minReadySeconds is 0, its ready time is unknown, or it already is.
func untilAvailable(pod *corev1.Pod, minReadySeconds int32, at time.Time) (time.Duration, bool) {
	if minReadySeconds <= 0 {
		return 0, false
	}
	since := ReadySince(pod)
	if since.IsZero() {
		return 0, false
	}
	d := since.Add(time.Duration(minReadySeconds) * time.Second).Sub(at)
	return d, d > 0
}

// NextAvailabilityCheck returns when the owner should be synced again because one of its
// ready pods turns available: the earliest such moment after evaluatedAt (the time the
// owner's status was computed at), measured from now. It returns false when no pod was
// still waiting at evaluatedAt, and 0 when the earliest one has become available between
// evaluatedAt and now, so a pod is never skipped by the status that was just written.
func NextAvailabilityCheck(pods []*corev1.Pod, minReadySeconds int32, evaluatedAt, now time.Time) (time.Duration, bool) {
	var first *corev1.Pod
	var best time.Duration
	for _, p := range pods {
		if d, ok := untilAvailable(p, minReadySeconds, evaluatedAt); ok && (first == nil || d < best) {
			first, best = p, d
		}
	}
	if first == nil {
		return 0, false
	}
	if d, ok := untilAvailable(first, minReadySeconds, now); ok {
		return d, true
	}
	return 0, true
}

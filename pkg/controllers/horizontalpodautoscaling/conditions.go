package horizontalpodautoscaling

import (
	"fmt"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// setCondition sets the condition of type t on hpa's status, added if absent; its
// lastTransitionTime changes only when its status does, as upstream's.
func setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, now metav1.Time, t autoscalingv2.HorizontalPodAutoscalerConditionType,
	status corev1.ConditionStatus, reason, format string, args ...any) {
	conds := hpa.Status.Conditions
	i := -1
	for j := range conds {
		if conds[j].Type == t {
			i = j
			break
		}
	}
	if i < 0 {
		conds = append(conds, autoscalingv2.HorizontalPodAutoscalerCondition{Type: t})
		i = len(conds) - 1
	}
	c := &conds[i]
	if c.Status != status {
		c.LastTransitionTime = now
	}
	c.Status, c.Reason, c.Message = status, reason, fmt.Sprintf(format, args...)
	hpa.Status.Conditions = conds
}

// conditionTrue reports whether hpa's condition of type t is True.
func conditionTrue(hpa *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType) bool {
	for _, c := range hpa.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

package job

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// matchSuccessPolicy returns the SuccessCriteriaMet message of the first rule of policy
// the succeeded indexes satisfy: all of succeededIndexes (or succeededCount of them), or
// succeededCount indexes of any.
func matchSuccessPolicy(log klog.Logger, policy *batchv1.SuccessPolicy, completions int32, succeeded indexSet) (string, bool) {
	if policy == nil || len(succeeded) == 0 {
		return "", false
	}
	for i, rule := range policy.Rules {
		matched := false
		if rule.SucceededIndexes != nil {
			required := parseIndexes(log, *rule.SucceededIndexes, int(completions))
			if len(required) == 0 {
				continue
			}
			n := overlap(required, succeeded)
			matched = n == required.total() || (rule.SucceededCount != nil && n >= int(*rule.SucceededCount))
		} else if rule.SucceededCount != nil {
			matched = succeeded.total() >= int(*rule.SucceededCount)
		}
		if matched {
			return fmt.Sprintf("Matched rules at index %d", i), true
		}
	}
	return "", false
}

// overlap counts the indexes in both a and b.
func overlap(a, b indexSet) int {
	n, i, j := 0, 0, 0
	for i < len(a) && j < len(b) {
		if o := min(a[i].last, b[j].last) - max(a[i].first, b[j].first) + 1; o > 0 {
			n += o
		}
		switch {
		case b[j].last < a[i].last:
			j++
		case b[j].last > a[i].last:
			i++
		default:
			i, j = i+1, j+1
		}
	}
	return n
}

// successCriteriaMet returns the Job's SuccessCriteriaMet condition when it is true.
func successCriteriaMet(job *batchv1.Job) *batchv1.JobCondition {
	if c := findCondition(job.Status.Conditions, batchv1.JobSuccessCriteriaMet); c != nil && c.Status == corev1.ConditionTrue {
		return c
	}
	return nil
}

func isSuccessCriteriaMet(c *batchv1.JobCondition) bool {
	return c != nil && c.Type == batchv1.JobSuccessCriteriaMet && c.Status == corev1.ConditionTrue
}

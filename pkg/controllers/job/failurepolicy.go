package job

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// policyMatch is what the Job's podFailurePolicy says about one failed pod.
type policyMatch struct {
	// failJob is the FailJob rule's message (nil unless a FailJob rule matched).
	failJob *string
	// counts says whether the failure counts against backoffLimit (false for Ignore).
	counts bool
	// action is the matching rule's action, nil when no rule matched.
	action *batchv1.PodFailurePolicyAction
}

// matchFailurePolicy applies the first matching rule of policy to a failed pod: rules on
// exit codes look at the terminated containers (then init containers) with a non-zero
// exit code, rules on pod conditions at the pod's conditions (e.g. DisruptionTarget).
func matchFailurePolicy(policy *batchv1.PodFailurePolicy, pod *corev1.Pod) policyMatch {
	if policy == nil {
		return policyMatch{counts: true}
	}
	for i, rule := range policy.Rules {
		var failJobMsg string
		switch {
		case rule.OnExitCodes != nil:
			cs := matchExitCodes(&pod.Status, rule.OnExitCodes)
			if cs == nil {
				continue
			}
			failJobMsg = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d",
				cs.Name, pod.Namespace, pod.Name, cs.State.Terminated.ExitCode, rule.Action, i)
		case rule.OnPodConditions != nil:
			cond := matchPodConditions(&pod.Status, rule.OnPodConditions)
			if cond == nil {
				continue
			}
			failJobMsg = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d",
				pod.Namespace, pod.Name, cond.Type, rule.Action, i)
		default:
			continue
		}
		action := rule.Action
		switch action {
		case batchv1.PodFailurePolicyActionIgnore:
			return policyMatch{counts: false, action: &action}
		case batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyActionCount:
			return policyMatch{counts: true, action: &action}
		case batchv1.PodFailurePolicyActionFailJob:
			return policyMatch{failJob: &failJobMsg, counts: true, action: &action}
		}
		// An action this version does not know: the rule is skipped, as upstream does.
	}
	return policyMatch{counts: true}
}

func matchExitCodes(st *corev1.PodStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	if cs := matchContainer(st.ContainerStatuses, req); cs != nil {
		return cs
	}
	return matchContainer(st.InitContainerStatuses, req)
}

func matchContainer(statuses []corev1.ContainerStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for i := range statuses {
		cs := &statuses[i]
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 || (req.ContainerName != nil && *req.ContainerName != cs.Name) {
			continue
		}
		in := slices.Contains(req.Values, t.ExitCode)
		if (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && in) ||
			(req.Operator == batchv1.PodFailurePolicyOnExitCodesOpNotIn && !in) {
			return cs
		}
	}
	return nil
}

func matchPodConditions(st *corev1.PodStatus, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		for _, p := range patterns {
			if c.Type == p.Type && c.Status == p.Status {
				return c
			}
		}
	}
	return nil
}

// failJobMessage returns the message of the first FailJob rule a failed pod matches.
func failJobMessage(job *batchv1.Job, pods []*corev1.Pod) *string {
	if job.Spec.PodFailurePolicy == nil {
		return nil
	}
	for _, p := range pods {
		if isPodFailed(p, job) {
			if m := matchFailurePolicy(job.Spec.PodFailurePolicy, p); m.failJob != nil {
				return m.failJob
			}
		}
	}
	return nil
}

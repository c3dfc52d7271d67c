package batch

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// The tests of podReplacementPolicy, podFailurePolicy, successPolicy and the order of the
// terminal conditions end their pods one by one (kwok label kshard.io/kwok=run keeps a pod
// running until the test changes its label), and play the kubelet where kwok does not:
// kwok deletes a pod being deleted at once, without making it Failed first, so a pod that
// must stay terminating is held by holdFinalizer, or by the Job's tracking finalizer,
// and markFailed does what the kubelet does when it has killed a deleted pod's containers.

// holdFinalizer keeps a pod of a test's Job terminating until the test releases it.
const holdFinalizer = "kshard.io/e2e-hold"

// held puts holdFinalizer on the Job's pods.
func held(j *batchv1.Job) {
	j.Spec.Template.Finalizers = append(j.Spec.Template.Finalizers, holdFinalizer)
}

// perIndex sets backoffLimitPerIndex (which leaves backoffLimit unset).
func perIndex(n int32) jobOpt {
	return func(j *batchv1.Job) {
		j.Spec.BackoffLimit = nil
		j.Spec.BackoffLimitPerIndex = ptr.To(n)
	}
}

func backoffLimitOf(n int32) jobOpt { return func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(n) } }

// podFailurePolicy sets the Job's podFailurePolicy.
func podFailurePolicy(rules ...batchv1.PodFailurePolicyRule) jobOpt {
	return func(j *batchv1.Job) { j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: rules} }
}

func onExitCodes(action batchv1.PodFailurePolicyAction, codes ...int32) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{Action: action, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
		Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes}}
}

// byIndex makes kwok end each index's pods as plan says: an exit code fails them with it,
// an index not in plan succeeds (hack/kwok-stages/pod-outcome-by-index.yaml).
func byIndex(plan map[int]int) jobOpt {
	return func(j *batchv1.Job) {
		j.Spec.Template.Labels[kwokLabel] = "by-index"
		for ix, code := range plan {
			j.Spec.Template.Annotations[fmt.Sprintf("%s-%d", exitCodeAnnotation, ix)] = fmt.Sprint(code)
		}
	}
}

// waitPods polls the Job's pods (sorted by creation, then name) until cond holds.
func (e *env) waitPods(job string, timeout time.Duration, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
	e.t.Helper()
	var last []corev1.Pod
	framework.Eventually(e.t, timeout, "job "+job+": "+what, func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
		if err != nil {
			return false, err
		}
		last = l.Items
		sort.Slice(last, func(i, j int) bool {
			if !last[i].CreationTimestamp.Equal(&last[j].CreationTimestamp) {
				return last[i].CreationTimestamp.Before(&last[j].CreationTimestamp)
			}
			return last[i].Name < last[j].Name
		})
		if !cond(last) {
			return false, fmt.Errorf("pods %v", podStates(last))
		}
		return true, nil
	})
	return last
}

// podStates describes pods for failure messages.
func podStates(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, fmt.Sprintf("%s(%s deleting=%v finalizers=%v)", p.Name, p.Status.Phase, p.DeletionTimestamp != nil, p.Finalizers))
	}
	return out
}

func isRunning(p corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
}

// runningPods waits until the Job has n running pods (none being deleted) and returns them.
func (e *env) runningPods(job string, n int) []corev1.Pod {
	e.t.Helper()
	var out []corev1.Pod
	e.waitPods(job, 60*time.Second, fmt.Sprintf("%d running pods", n), func(ps []corev1.Pod) bool {
		out = nil
		for _, p := range ps {
			if isRunning(p) {
				out = append(out, p)
			}
		}
		return len(out) == n
	})
	return out
}

func (e *env) patchPod(name string, patch string) {
	e.t.Helper()
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(e.ctx(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("patch pod %s with %s: %v", name, patch, err)
	}
}

// succeedPod makes kwok succeed a running pod.
func (e *env) succeedPod(name string) {
	e.t.Helper()
	e.patchPod(name, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, kwokLabel))
}

// failPod makes kwok fail a running pod with exit code code.
func (e *env) failPod(name string, code int) {
	e.t.Helper()
	e.patchPod(name, fmt.Sprintf(`{"metadata":{"labels":{%q:"fail"},"annotations":{%q:"%d"}}}`, kwokLabel, exitCodeAnnotation, code))
}

// releaseHold removes holdFinalizer from a pod.
func (e *env) releaseHold(name string) {
	e.t.Helper()
	e.patchPod(name, fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, holdFinalizer))
}

func (e *env) deletePod(name string) {
	e.t.Helper()
	if err := e.cs.CoreV1().Pods(e.ns).Delete(e.ctx(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatalf("delete pod %s: %v", name, err)
	}
}

// evict evicts a pod through the Eviction API, which gives it the DisruptionTarget
// condition and deletes it.
func (e *env) evict(name string) {
	e.t.Helper()
	err := e.cs.PolicyV1().Evictions(e.ns).Evict(e.ctx(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}})
	if err != nil {
		e.t.Fatalf("evict pod %s: %v", name, err)
	}
}

// markFailed does the kubelet's part for a pod whose containers it killed: the containers
// terminated with exit code code, the pod Failed; its conditions stay.
func (e *env) markFailed(name string, code int32) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		setTerminated(p, corev1.PodFailed, code)
		_, err = e.cs.CoreV1().Pods(e.ns).UpdateStatus(e.ctx(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("mark pod %s failed: %v", name, err)
	}
}

// setTerminated ends every container of p with exit code and puts p into phase.
func setTerminated(p *corev1.Pod, phase corev1.PodPhase, code int32) {
	now := metav1.Now()
	p.Status.Phase = phase
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, StartedAt: now, FinishedAt: now}}})
	}
}

// podByName returns the pod named name among pods.
func podByName(t *testing.T, pods []corev1.Pod, name string) *corev1.Pod {
	t.Helper()
	i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == name })
	if i < 0 {
		return nil
	}
	return &pods[i]
}

// conditionMessage returns the message of the Job's condition of type c.
func conditionMessage(j *batchv1.Job, c batchv1.JobConditionType) string {
	for _, cond := range j.Status.Conditions {
		if cond.Type == c {
			return cond.Message
		}
	}
	return ""
}

// waitReasons waits until the job controller's events on job count want (by "Type
// Reason"; reasons not in want are not looked at): events reach the API after the writes
// they tell of.
func (e *env) waitReasons(job string, want map[string]int) {
	e.t.Helper()
	framework.Eventually(e.t, 15*time.Second, "events of job "+job, func(context.Context) (bool, error) {
		got := e.reasons(job)
		for r, n := range want {
			if got[r] != n {
				return false, fmt.Errorf("events %v, want %v", got, want)
			}
		}
		return true, nil
	})
}

// releaseHolds lets every pod of job go.
func (e *env) releaseHolds(job string) {
	e.t.Helper()
	for _, p := range e.pods(job) {
		e.releaseHold(p.Name)
	}
}

// waitFinished waits, as kubectl wait does, for the Job's condition ("complete" or
// "failed"), checks that its conditions are want, in order, and returns it.
func (e *env) waitFinished(job, condition string, want ...string) *batchv1.Job {
	e.t.Helper()
	e.mustKubectl("wait", "--for=condition="+condition, "job/"+job, "--timeout=60s")
	j := e.job(job)
	if got := conditions(j); !slices.Equal(got, want) {
		e.t.Errorf("job %s: conditions %v, want %v", job, got, want)
	}
	return j
}

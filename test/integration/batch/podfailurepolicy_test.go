package batch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// podFailurePolicy on exit codes: failures matching an Ignore rule do not count against
// backoffLimit, those matching a Count rule do. With backoffLimit 1, three pods failing
// at once (two ignored, one counted) leave the Job running with failed 1; the next
// counted failure fails it with exactly 2 failures counted.
func TestJobPodFailurePolicyIgnoreAndCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("exitcodes", 4, 4, running, backoffLimitOf(1), podFailurePolicy(
		onExitCodes(batchv1.PodFailurePolicyActionIgnore, 42),
		onExitCodes(batchv1.PodFailurePolicyActionCount, 5),
	)))
	pods := e.runningPods("exitcodes", 4)
	e.failPod(pods[0].Name, 42)
	e.failPod(pods[1].Name, 42)
	e.failPod(pods[2].Name, 5)
	first := []string{pods[0].Name, pods[1].Name, pods[2].Name}
	// Handled: failed, out of the Job's tracking (finalizer removed), nothing uncounted.
	e.waitPods("exitcodes", 30*time.Second, "the three failures handled", func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if slices.Contains(first, p.Name) && p.Status.Phase == corev1.PodFailed && !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
				n++
			}
		}
		return n == 3
	})
	j := e.waitJob("exitcodes", 10*time.Second, "nothing uncounted", func(j *batchv1.Job) bool {
		u := j.Status.UncountedTerminatedPods
		return u == nil || len(u.Failed)+len(u.Succeeded) == 0
	})
	if j.Status.Failed != 1 || len(j.Status.Conditions) != 0 {
		t.Fatalf("after two ignored failures and one counted: failed %d, conditions %v; want 1 and none", j.Status.Failed, conditions(j))
	}
	e.failPod(pods[3].Name, 5)
	j = e.waitFinished("exitcodes", "failed", "FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded")
	if j.Status.Failed != 2 {
		t.Errorf("failed %d, want 2 (the two exit code 5 failures; the ignored ones do not count)", j.Status.Failed)
	}
}

// podFailurePolicy on pod conditions: a pod evicted through the Eviction API (the API
// server gives it the DisruptionTarget condition) fails without counting against
// backoffLimit 0 when an Ignore rule matches DisruptionTarget; it is replaced, and the Job
// completes with no failure counted.
func TestJobPodFailurePolicyDisruptionTargetIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("disrupted", 2, 2, running, backoffLimitOf(0), podFailurePolicy(batchv1.PodFailurePolicyRule{
		Action:          batchv1.PodFailurePolicyActionIgnore,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
	})))
	j := e.job("disrupted")
	if p := j.Spec.PodReplacementPolicy; p == nil || *p != batchv1.Failed {
		t.Errorf("podReplacementPolicy %v, want Failed (the default with a podFailurePolicy)", p)
	}
	pods := e.runningPods("disrupted", 2)
	victim := pods[0].Name
	e.evict(victim)
	e.waitPods("disrupted", 30*time.Second, "the evicted pod terminating with DisruptionTarget", func(ps []corev1.Pod) bool {
		v := podByName(t, ps, victim)
		return v != nil && v.DeletionTimestamp != nil && slices.ContainsFunc(v.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
		})
	})
	e.markFailed(victim, 137)
	// Ignored: the pod leaves the Job's tracking (and, its deletion done, the API) uncounted.
	e.waitPods("disrupted", 30*time.Second, "the evicted pod gone", func(ps []corev1.Pod) bool { return podByName(t, ps, victim) == nil })
	j = e.job("disrupted")
	if j.Status.Failed != 0 || slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool { return c.Type == batchv1.JobFailureTarget }) {
		t.Fatalf("after the ignored disruption: failed %d, conditions %v", j.Status.Failed, conditions(j))
	}
	ps := e.waitPods("disrupted", 40*time.Second, "the replacement running", func(ps []corev1.Pod) bool {
		return len(ps) == 2 && isRunning(ps[0]) && isRunning(ps[1])
	})
	for _, p := range ps {
		e.succeedPod(p.Name)
	}
	j = e.waitFinished("disrupted", "complete", "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	if j.Status.Failed != 0 || j.Status.Succeeded != 2 {
		t.Errorf("failed %d succeeded %d, want 0 and 2", j.Status.Failed, j.Status.Succeeded)
	}
}

// FailIndex: a failure matching a FailIndex rule fails its index at once, without the
// retries backoffLimitPerIndex allows; another index's counted failures use them (its
// retry carries the index's failure count). The Job fails with FailedIndexes once every
// index is done.
func TestJobPodFailurePolicyFailIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("failindex", 3, 3, indexed, byIndex(map[int]int{1: 42, 2: 3}), perIndex(1),
		podFailurePolicy(onExitCodes(batchv1.PodFailurePolicyActionFailIndex, 42))))
	j := e.waitFinished("failindex", "failed", "FailureTarget=True/FailedIndexes", "Failed=True/FailedIndexes")
	if ptr.Deref(j.Status.FailedIndexes, "") != "1,2" || j.Status.CompletedIndexes != "0" || j.Status.Failed != 3 || j.Status.Succeeded != 1 {
		t.Errorf("failedIndexes %v completedIndexes %q failed %d succeeded %d; want 1,2, 0, 3, 1",
			ptr.Deref(j.Status.FailedIndexes, "<nil>"), j.Status.CompletedIndexes, j.Status.Failed, j.Status.Succeeded)
	}
	byIx := map[string][]string{} // index → failure-count annotations of its pods, oldest first
	pods := e.waitPods("failindex", 10*time.Second, "listed", func([]corev1.Pod) bool { return true })
	for _, p := range pods {
		ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		byIx[ix] = append(byIx[ix], p.Annotations[batchv1.JobIndexFailureCountAnnotation])
		env := p.Spec.Containers[0].Env
		if len(env) != 1 || env[0].ValueFrom.FieldRef.FieldPath != fmt.Sprintf("metadata.labels['%s']", batchv1.JobCompletionIndexAnnotation) {
			t.Errorf("pod %s: env %+v", p.Name, env)
		}
	}
	want := map[string][]string{"0": {"0"}, "1": {"0"}, "2": {"0", "1"}}
	for ix, counts := range want {
		if !slices.Equal(byIx[ix], counts) {
			t.Errorf("index %s: pods with failure counts %v, want %v (all: %v)", ix, byIx[ix], counts, byIx)
		}
	}
	if msg := conditionMessage(j, batchv1.JobFailed); !strings.Contains(msg, "failed indexes") {
		t.Errorf("Failed message %q", msg)
	}
}

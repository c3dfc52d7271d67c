package batch

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// A NonIndexed Job runs its completions, parallelism at a time, and ends with
// SuccessCriteriaMet then Complete; kubectl wait sees it; every pod is counted once and
// lets go of its tracking finalizer.
func TestJobCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("work", 2, 5))
	e.mustKubectl("wait", "--for=condition=complete", "job/work", "--timeout=90s")
	j := e.job("work")
	if got := conditions(j); !slices.Equal(got, []string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}) {
		t.Errorf("conditions %v", got)
	}
	st := j.Status
	if st.Succeeded != 5 || st.Failed != 0 || st.Active != 0 || ptr.Deref(st.Ready, -1) != 0 || ptr.Deref(st.Terminating, -1) != 0 {
		t.Errorf("status %+v", st)
	}
	if st.StartTime == nil || st.CompletionTime == nil || st.CompletionTime.Before(st.StartTime) {
		t.Errorf("startTime %v completionTime %v", st.StartTime, st.CompletionTime)
	}
	if u := st.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		t.Errorf("uncounted %+v", u)
	}
	pods := e.pods("work")
	if len(pods) != 5 {
		t.Errorf("%d pods, want 5", len(pods))
	}
	for _, p := range pods {
		if slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
			t.Errorf("pod %s keeps the tracking finalizer", p.Name)
		}
		if !strings.HasPrefix(p.Name, "work-") || p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s phase %s", p.Name, p.Status.Phase)
		}
	}
	e.waitReasons("work", map[string]int{"Normal SuccessfulCreate": 5, "Normal Completed": 1})
}

// An Indexed Job runs each index once: the index in the pod's annotation, label,
// JOB_COMPLETION_INDEX and hostname, completedIndexes in the status.
func TestJobIndexed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("idx", 2, 4, indexed))
	e.mustKubectl("wait", "--for=condition=complete", "job/idx", "--timeout=90s")
	j := e.job("idx")
	if j.Status.CompletedIndexes != "0-3" || j.Status.Succeeded != 4 {
		t.Errorf("completedIndexes %q succeeded %d", j.Status.CompletedIndexes, j.Status.Succeeded)
	}
	var seen []string
	for _, p := range e.pods("idx") {
		ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		seen = append(seen, ix)
		if p.Labels[batchv1.JobCompletionIndexAnnotation] != ix || p.Spec.Hostname != "idx-"+ix || !strings.HasPrefix(p.Name, "idx-"+ix+"-") {
			t.Errorf("pod %s: label %q hostname %q", p.Name, p.Labels[batchv1.JobCompletionIndexAnnotation], p.Spec.Hostname)
		}
		env := p.Spec.Containers[0].Env
		if len(env) != 1 || env[0].Name != "JOB_COMPLETION_INDEX" || env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef == nil {
			t.Errorf("pod %s env %+v", p.Name, env)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"0", "1", "2", "3"}) {
		t.Errorf("indexes of pods %v", seen)
	}
}

// Failing pods are retried with backoff until backoffLimit; the Job gets FailureTarget,
// then Failed once its pods are gone, and the BackoffLimitExceeded event.
func TestJobBackoffLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := time.Now()
	e.create(newJob("fails", 1, 1, failing(3), func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](1) }))
	e.mustKubectl("wait", "--for=condition=failed", "job/fails", "--timeout=90s")
	j := e.job("fails")
	if got := conditions(j); !slices.Equal(got, []string{"FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded"}) {
		t.Errorf("conditions %v", got)
	}
	if j.Status.Failed != 2 || j.Status.Succeeded != 0 || j.Status.CompletionTime != nil {
		t.Errorf("status %+v", j.Status)
	}
	// The second pod waited the 10s backoff after the first failure.
	if d := time.Since(start); d < 10*time.Second {
		t.Errorf("failed after %v, before the 10s pod failure backoff could pass", d)
	}
	e.waitReasons("fails", map[string]int{"Warning BackoffLimitExceeded": 1, "Normal SuccessfulCreate": 2})
}

// A FailJob rule of podFailurePolicy fails the Job at the first matching exit code; an
// Ignore rule's failures do not count.
func TestJobPodFailurePolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("failjob", 2, 4, failing(42), func(j *batchv1.Job) {
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
			Action:      batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
		}}}
	}))
	e.mustKubectl("wait", "--for=condition=failed", "job/failjob", "--timeout=60s")
	j := e.job("failjob")
	if got := conditions(j); !slices.Equal(got, []string{"FailureTarget=True/PodFailurePolicy", "Failed=True/PodFailurePolicy"}) {
		t.Errorf("conditions %v", got)
	}
	if msg := j.Status.Conditions[1].Message; !strings.Contains(msg, "failed with exit code 42 matching FailJob rule at index 0") {
		t.Errorf("message %q", msg)
	}
}

// Suspending deletes the running pods and clears startTime; resuming starts pods again
// with a new startTime.
func TestJobSuspendResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("sus", 2, 4, running))
	first := e.waitJob("sus", 60*time.Second, "2 ready", func(j *batchv1.Job) bool { return ptr.Deref(j.Status.Ready, 0) == 2 }).Status.StartTime
	e.mustKubectl("patch", "job/sus", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	j := e.waitJob("sus", 60*time.Second, "suspended", func(j *batchv1.Job) bool {
		return hasCondition(j, batchv1.JobSuspended) && j.Status.Active == 0 && ptr.Deref(j.Status.Terminating, 1) == 0
	})
	if j.Status.StartTime != nil {
		t.Errorf("startTime %v while suspended", j.Status.StartTime)
	}
	time.Sleep(1100 * time.Millisecond) // startTime has a resolution of one second
	e.mustKubectl("patch", "job/sus", "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	j = e.waitJob("sus", 60*time.Second, "resumed and 2 ready", func(j *batchv1.Job) bool {
		return ptr.Deref(j.Status.Ready, 0) == 2 && !hasCondition(j, batchv1.JobSuspended)
	})
	if got := conditions(j); !slices.Equal(got, []string{"Suspended=False/JobResumed"}) {
		t.Errorf("conditions %v", got)
	}
	if j.Status.StartTime == nil || !j.Status.StartTime.After(first.Time) {
		t.Errorf("startTime %v, first %v", j.Status.StartTime, first)
	}
	e.waitReasons("sus", map[string]int{"Normal Suspended": 1, "Normal Resumed": 1, "Normal SuccessfulDelete": 2, "Normal SuccessfulCreate": 4})
}

// A Job running past activeDeadlineSeconds fails with DeadlineExceeded.
func TestJobActiveDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("late", 1, 1, running, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](3) }))
	e.mustKubectl("wait", "--for=condition=failed", "job/late", "--timeout=60s")
	j := e.job("late")
	if got := conditions(j); !slices.Equal(got, []string{"FailureTarget=True/DeadlineExceeded", "Failed=True/DeadlineExceeded"}) {
		t.Errorf("conditions %v", got)
	}
	if j.Status.Failed != 1 || j.Status.Active != 0 {
		t.Errorf("status %+v", j.Status)
	}
	e.waitReasons("late", map[string]int{"Warning DeadlineExceeded": 1})
}

// A Job managed by another controller is left alone.
func TestJobManagedByOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("other", 1, 1, func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/other") }))
	e.create(newJob("ours", 1, 1))
	e.mustKubectl("wait", "--for=condition=complete", "job/ours", "--timeout=60s")
	time.Sleep(2 * time.Second)
	j := e.job("other")
	if len(e.pods("other")) != 0 || j.Status.StartTime != nil || len(j.Status.Conditions) != 0 {
		t.Errorf("job managed by another controller was worked: status %+v", j.Status)
	}
}

// Indexed Job with backoffLimitPerIndex: each index retries on its own; the Job fails with
// FailedIndexes when every index is done and one failed.
func TestJobBackoffLimitPerIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("perindex", 2, 2, indexed, failing(1), func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex = ptr.To[int32](0)
		j.Spec.BackoffLimit = nil
	}))
	e.mustKubectl("wait", "--for=condition=failed", "job/perindex", "--timeout=60s")
	j := e.job("perindex")
	if got := conditions(j); !slices.Equal(got, []string{"FailureTarget=True/FailedIndexes", "Failed=True/FailedIndexes"}) {
		t.Errorf("conditions %v", got)
	}
	if ptr.Deref(j.Status.FailedIndexes, "") != "0,1" || j.Status.Failed != 2 {
		t.Errorf("failedIndexes %v failed %d", j.Status.FailedIndexes, j.Status.Failed)
	}
}

package batch

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
)

// successPolicy: the first rule the succeeded indexes satisfy ends the Job with
// SuccessCriteriaMet (reason SuccessPolicy) and its running pods are deleted; Complete
// comes only once they are gone (1.37's order), with completedIndexes those that
// succeeded.
func TestJobSuccessPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("leader", 5, 5, indexed, running, held, func(j *batchv1.Job) {
		j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
			{SucceededIndexes: ptr.To("3-4"), SucceededCount: ptr.To[int32](2)},
			{SucceededIndexes: ptr.To("0,2")},
		}}
	}))
	pods := e.runningPods("leader", 5)
	for _, p := range pods {
		if ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]; ix == "0" || ix == "2" {
			e.succeedPod(p.Name)
		}
	}
	j := e.waitJob("leader", 30*time.Second, "SuccessCriteriaMet with the other pods terminating", func(j *batchv1.Job) bool {
		return hasCondition(j, batchv1.JobSuccessCriteriaMet) && ptr.Deref(j.Status.Terminating, 0) == 3
	})
	if got := conditions(j); !slices.Equal(got, []string{"SuccessCriteriaMet=True/SuccessPolicy"}) || j.Status.CompletionTime != nil {
		t.Errorf("conditions %v completionTime %v while pods terminate, want SuccessCriteriaMet only", got, j.Status.CompletionTime)
	}
	if msg := conditionMessage(j, batchv1.JobSuccessCriteriaMet); msg != "Matched rules at index 1" {
		t.Errorf("message %q", msg)
	}
	e.releaseHolds("leader")
	j = e.waitFinished("leader", "complete", "SuccessCriteriaMet=True/SuccessPolicy", "Complete=True/SuccessPolicy")
	if j.Status.CompletedIndexes != "0,2" || j.Status.Succeeded != 2 || j.Status.Active != 0 || j.Status.CompletionTime == nil {
		t.Errorf("status %+v", j.Status)
	}
}

// A failing Job gets FailureTarget at once, and Failed only once its pods are gone: here
// they are held terminating by a finalizer of the test's until it lets them go.
func TestJobFailedWaitsForTerminatingPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("deadline", 2, 2, running, held, func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](2) }))
	j := e.waitJob("deadline", 30*time.Second, "FailureTarget with the pods terminating", func(j *batchv1.Job) bool {
		return hasCondition(j, batchv1.JobFailureTarget) && ptr.Deref(j.Status.Terminating, 0) == 2
	})
	if got := conditions(j); !slices.Equal(got, []string{"FailureTarget=True/DeadlineExceeded"}) {
		t.Errorf("conditions %v while the pods terminate, want FailureTarget only", got)
	}
	if got := e.reasons("deadline"); got["Warning DeadlineExceeded"] != 0 {
		t.Errorf("events %v: the failure event before the Job failed", got)
	}
	e.releaseHolds("deadline")
	j = e.waitFinished("deadline", "failed", "FailureTarget=True/DeadlineExceeded", "Failed=True/DeadlineExceeded")
	if j.Status.Failed != 2 || ptr.Deref(j.Status.Terminating, -1) != 0 || j.Status.CompletionTime != nil {
		t.Errorf("status %+v", j.Status)
	}
	e.waitReasons("deadline", map[string]int{"Warning DeadlineExceeded": 1})
}

// maxFailedIndexes: once more indexes have failed than it allows, the Job fails with
// MaxFailedIndexesExceeded (not FailedIndexes, which waits for every index).
func TestJobMaxFailedIndexes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("maxfailed", 4, 4, indexed, byIndex(map[int]int{1: 1, 2: 1}), perIndex(0),
		func(j *batchv1.Job) { j.Spec.MaxFailedIndexes = ptr.To[int32](1) }))
	j := e.waitFinished("maxfailed", "failed", "FailureTarget=True/MaxFailedIndexesExceeded", "Failed=True/MaxFailedIndexesExceeded")
	if ptr.Deref(j.Status.FailedIndexes, "") != "1,2" {
		t.Errorf("failedIndexes %v", ptr.Deref(j.Status.FailedIndexes, "<nil>"))
	}
}

// A Job created suspended runs nothing and has no startTime; resumed, it starts
// (startTime set then) and completes.
func TestJobCreatedSuspended(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("later", 2, 2, func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(true) }))
	j := e.waitJob("later", 30*time.Second, "Suspended", func(j *batchv1.Job) bool { return hasCondition(j, batchv1.JobSuspended) })
	if got := conditions(j); !slices.Equal(got, []string{"Suspended=True/JobSuspended"}) || j.Status.StartTime != nil || j.Status.Active != 0 {
		t.Errorf("conditions %v startTime %v active %d", got, j.Status.StartTime, j.Status.Active)
	}
	if ps := e.pods("later"); len(ps) != 0 {
		t.Errorf("pods %v of a suspended Job", podStates(ps))
	}
	resumed := time.Now().Truncate(time.Second)
	e.mustKubectl("patch", "job/later", "--type=merge", "-p", `{"spec":{"suspend":false}}`)
	j = e.waitFinished("later", "complete", "Suspended=False/JobResumed", "SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached")
	if st := j.Status.StartTime; st == nil || st.Time.Before(resumed) {
		t.Errorf("startTime %v, resumed at %s", st, resumed)
	}
	e.waitReasons("later", map[string]int{"Normal Suspended": 1, "Normal Resumed": 1, "Normal SuccessfulCreate": 2})
}

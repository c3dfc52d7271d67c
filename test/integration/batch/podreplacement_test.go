package batch

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// podReplacementPolicy Failed: a pod being deleted is not replaced, nor counted as
// failed, while it terminates (status.terminating counts it); once the kubelet has made it
// Failed it counts as failed and its replacement comes (after the pod failure backoff).
func TestJobPodReplacementFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("failed-only", 2, 2, running, func(j *batchv1.Job) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed) }))
	pods := e.runningPods("failed-only", 2)
	victim := pods[0].Name
	// kwok deletes it at once; the Job's tracking finalizer keeps it, terminating.
	e.deletePod(victim)
	j := e.waitJob("failed-only", 30*time.Second, "the deleted pod terminating", func(j *batchv1.Job) bool {
		return ptr.Deref(j.Status.Terminating, 0) == 1 && j.Status.Active == 1
	})
	// The sync that counted it terminating created no replacement and did not count it
	// as failed.
	if j.Status.Failed != 0 {
		t.Errorf("failed %d while the deleted pod terminates, want 0", j.Status.Failed)
	}
	if ps := e.pods("failed-only"); len(ps) != 2 {
		t.Errorf("pods %v: a replacement while the deleted pod terminates", podStates(ps))
	}
	failedAt := time.Now().Truncate(time.Second)
	e.markFailed(victim, 137)
	e.waitJob("failed-only", 30*time.Second, "the failed pod counted", func(j *batchv1.Job) bool {
		return j.Status.Failed == 1 && ptr.Deref(j.Status.Terminating, -1) == 0
	})
	ps := e.waitPods("failed-only", 40*time.Second, "a replacement", func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if p.Name != victim && isRunning(p) {
				n++
			}
		}
		return n == 2
	})
	for _, p := range ps {
		if p.Name != victim && p.Name != pods[1].Name && p.CreationTimestamp.Time.Before(failedAt) {
			t.Errorf("replacement %s created at %s, before the deleted pod failed (%s)", p.Name, p.CreationTimestamp, failedAt)
		}
	}
	e.waitReasons("failed-only", map[string]int{"Normal SuccessfulCreate": 3})
}

// podReplacementPolicy TerminatingOrFailed (the default without a podFailurePolicy): a
// pod being deleted counts as failed at once and is replaced while it still terminates;
// status.terminating counts it until it is gone.
func TestJobPodReplacementTerminatingOrFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.create(newJob("any", 2, 2, running, held))
	pods := e.runningPods("any", 2)
	victim := pods[0].Name
	e.deletePod(victim)
	e.waitJob("any", 40*time.Second, "replaced while the deleted pod terminates", func(j *batchv1.Job) bool {
		return j.Status.Failed == 1 && j.Status.Active == 2 && ptr.Deref(j.Status.Terminating, 0) == 1
	})
	ps := e.pods("any")
	v := podByName(t, ps, victim)
	if len(ps) != 3 || v == nil || v.DeletionTimestamp == nil || slices.Contains(v.Finalizers, batchv1.JobTrackingFinalizer) {
		t.Errorf("pods %v: want the deleted pod terminating, counted (no tracking finalizer), and two running", podStates(ps))
	}
	e.releaseHold(victim)
	j := e.waitJob("any", 30*time.Second, "the deleted pod gone", func(j *batchv1.Job) bool {
		return ptr.Deref(j.Status.Terminating, -1) == 0
	})
	if j.Status.Failed != 1 || j.Status.Active != 2 {
		t.Errorf("status %+v", j.Status)
	}
}

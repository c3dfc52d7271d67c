package job

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestSyncCounts: what one sync of a Job creates, deletes and writes.
func TestSyncCounts(t *testing.T) {
	tests := []struct {
		name string
		job  *batchv1.Job
		pods []*corev1.Pod
		// wantCreates and wantDeletes are the pod creates and deletes.
		wantCreates, wantDeletes int
		// want is the last status written (counters and conditions).
		wantActive, wantReady, wantTerminating, wantSucceeded, wantFailed int32
		wantConditions                                                    []string
	}{
		{name: "new job creates parallelism pods", job: newJob(3, 5), wantCreates: 3, wantActive: 3},
		{name: "completions left bound the pods", job: newJob(3, 5),
			pods: []*corev1.Pod{newPod("a", succeeded(), untracked), newPod("b", succeeded(), untracked), newPod("c", succeeded(), untracked)},
			// status says 3 succeeded (set below); 2 left.
			wantCreates: 2, wantActive: 2, wantSucceeded: 3},
		{name: "running pods are kept", job: newJob(2, 5), pods: []*corev1.Pod{newPod("a", ready), newPod("b")},
			wantActive: 2, wantReady: 1},
		{name: "surplus pods are deleted, not ready first", job: newJob(1, 5), pods: []*corev1.Pod{newPod("a", ready), newPod("b")},
			wantDeletes: 1, wantActive: 1, wantReady: 1, wantTerminating: 1},
		{name: "no completions: parallelism pods until one succeeds", job: newJob(2, 0, noCompletions), wantCreates: 2, wantActive: 2},
		{name: "no completions: one success completes once nothing runs", job: newJob(2, 0, noCompletions),
			pods:          []*corev1.Pod{newPod("a", succeeded())},
			wantSucceeded: 1, wantConditions: []string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}},
		{name: "terminating pods are replaced by default", job: newJob(2, 5), pods: []*corev1.Pod{newPod("a", deleting, untracked), newPod("b")},
			wantCreates: 1, wantActive: 2, wantTerminating: 1},
		{name: "podReplacementPolicy Failed waits for terminating pods", job: newJob(2, 5, func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		}), pods: []*corev1.Pod{newPod("a", deleting), newPod("b")}, wantActive: 1, wantTerminating: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			job := tc.job
			if tc.wantSucceeded == 3 && tc.name == "completions left bound the pods" {
				job.Status.Succeeded = 3
			}
			f := newFixture(t, objs(job, tc.pods...)...)
			f.MustSync("ns/job")
			if n := len(f.createdPods()); n != tc.wantCreates {
				t.Errorf("created %d pods, want %d (%v)", n, tc.wantCreates, f.actions())
			}
			deletes := 0
			for _, a := range f.actions() {
				if strings.HasPrefix(a, "delete pods") {
					deletes++
				}
			}
			if deletes != tc.wantDeletes {
				t.Errorf("deleted %d pods, want %d (%v)", deletes, tc.wantDeletes, f.actions())
			}
			st := f.apiJob("job").Status
			if st.Active != tc.wantActive || ptr.Deref(st.Ready, -1) != tc.wantReady || ptr.Deref(st.Terminating, -1) != tc.wantTerminating ||
				st.Succeeded != tc.wantSucceeded || st.Failed != tc.wantFailed {
				t.Errorf("status active=%d ready=%v terminating=%v succeeded=%d failed=%d, want %d %d %d %d %d",
					st.Active, ptr.Deref(st.Ready, -1), ptr.Deref(st.Terminating, -1), st.Succeeded, st.Failed,
					tc.wantActive, tc.wantReady, tc.wantTerminating, tc.wantSucceeded, tc.wantFailed)
			}
			if got := conditionTypes(st); !slices.Equal(got, tc.wantConditions) {
				t.Errorf("conditions %v, want %v", got, tc.wantConditions)
			}
			if st.StartTime == nil {
				t.Error("startTime not set")
			}
		})
	}
}

// TestPodsCreated: the pods of NonIndexed and Indexed Jobs, and the events.
func TestPodsCreated(t *testing.T) {
	t.Run("nonindexed", func(t *testing.T) {
		f := newFixture(t, newJob(2, 2))
		f.MustSync("ns/job")
		ps := f.createdPods()
		if len(ps) != 2 {
			t.Fatalf("created %d pods", len(ps))
		}
		p := ps[0]
		if p.GenerateName != "job-" || !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) {
			t.Errorf("generateName %q finalizers %v", p.GenerateName, p.Finalizers)
		}
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.Kind != "Job" || ref.APIVersion != "batch/v1" || ref.UID != "uid-job" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("controllerRef %+v", ref)
		}
		if p.Labels["batch.kubernetes.io/job-name"] != "job" {
			t.Errorf("labels %v", p.Labels)
		}
		if got := f.EventReasons(); got["Normal SuccessfulCreate"] != 2 {
			t.Errorf("events %v", got)
		}
	})
	t.Run("indexed", func(t *testing.T) {
		f := newFixture(t, objs(newJob(3, 4, indexed), newPod("a", index(1)))...)
		f.MustSync("ns/job")
		ps := f.createdPods()
		var got []string
		for _, p := range ps {
			ix := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			got = append(got, ix)
			if p.Labels[batchv1.JobCompletionIndexAnnotation] != ix {
				t.Errorf("label %v, annotation %s", p.Labels, ix)
			}
			if p.GenerateName != "job-"+ix+"-" || p.Spec.Hostname != "job-"+ix {
				t.Errorf("generateName %q hostname %q", p.GenerateName, p.Spec.Hostname)
			}
			env := p.Spec.Containers[0].Env
			if len(env) != 1 || env[0].Name != "JOB_COMPLETION_INDEX" ||
				env[0].ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/job-completion-index']" {
				t.Errorf("env %+v", env)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"0", "2"}) {
			t.Errorf("created indexes %v, want 0 and 2 (1 runs)", got)
		}
	})
	t.Run("indexed name shortened", func(t *testing.T) {
		if got := indexedGenerateName(strings.Repeat("x", 63), 12); len(got) != maxGeneratedNameLength || !strings.HasSuffix(got, "-12-") {
			t.Errorf("%q", got)
		}
	})
	t.Run("failed create", func(t *testing.T) {
		f := newFixture(t, newJob(4, 4))
		f.Client.PrependReactor("create", "pods", func(a coreAction) (bool, runtimeObject, error) {
			return true, nil, errQuota
		})
		if err := f.Sync("ns/job"); err == nil {
			t.Fatal("sync succeeded")
		}
		// Slow start: one create tried, the other three skipped.
		if got := f.EventReasons(); got["Warning FailedCreate"] != 1 {
			t.Errorf("events %v", got)
		}
		if !f.ctrl.expectations.Satisfied("ns/job") {
			t.Error("expectations left after failed creates")
		}
		if st := f.apiJob("job").Status; st.Active != 0 {
			t.Errorf("active %d", st.Active)
		}
	})
}

// TestExpectations: pods created but not yet in the cache are not created again.
func TestExpectations(t *testing.T) {
	f := newFixture(t, newJob(2, 2))
	f.MustSync("ns/job")
	f.refresh() // the Job's status, not the pods
	for _, p := range f.Indexer(&corev1.Pod{}).List() {
		_ = f.Indexer(&corev1.Pod{}).Delete(p)
	}
	f.Client.ClearActions()
	f.MustSync("ns/job")
	if n := len(f.createdPods()); n != 0 {
		t.Fatalf("created %d pods again before observing the first ones", n)
	}
	// Observing the creations lets it manage the Job again.
	f.refresh()
	for _, p := range f.apiPods() {
		f.ctrl.addPod(f.ctrl.logForTest(), p)
	}
	f.MustSync("ns/job")
	if n := len(f.createdPods()); n != 0 {
		t.Fatalf("created %d pods with 2 running", n)
	}
}

// TestTracking: finished pods go into uncountedTerminatedPods before their finalizers
// are removed, and into the counters after.
func TestTracking(t *testing.T) {
	f := newFixture(t, objs(newJob(2, 3, started(t0)), newPod("a", succeeded()), newPod("b", failed()))...)
	f.MustSync("ns/job")
	acts := f.actions()
	first := slices.Index(acts, "update jobs/status")
	patchA, patchB := slices.Index(acts, "patch pods a"), slices.Index(acts, "patch pods b")
	if first < 0 || patchA < first || patchB < first {
		t.Fatalf("want status written before the finalizers are removed: %v", acts)
	}
	sts := f.statuses()
	u := sts[0].UncountedTerminatedPods
	if !slices.Equal(u.Succeeded, []types.UID{"uid-a"}) || !slices.Equal(u.Failed, []types.UID{"uid-b"}) || sts[0].Succeeded != 0 {
		t.Errorf("first status: uncounted %+v succeeded %d", u, sts[0].Succeeded)
	}
	last := f.apiJob("job").Status
	if last.Succeeded != 1 || last.Failed != 1 || len(last.UncountedTerminatedPods.Succeeded)+len(last.UncountedTerminatedPods.Failed) != 0 {
		t.Errorf("last status %+v", last)
	}
	for _, p := range f.apiPods() {
		if p.Name <= "b" && hasTrackingFinalizer(p) {
			t.Errorf("pod %s keeps its finalizer", p.Name)
		}
	}
}

// TestCrashBetweenFinalizerRemovalAndStatus: the process dies after removing the
// finalizers and before writing the counters; the next owner (memory empty) counts each
// pod exactly once, and syncs after that do not count them again.
func TestCrashBetweenFinalizerRemovalAndStatus(t *testing.T) {
	f := newFixture(t, objs(newJob(3, 3, started(t0)), newPod("a", succeeded()), newPod("b", succeeded()), newPod("c", failed()))...)
	writes := 0
	f.Client.PrependReactor("update", "jobs", func(a coreAction) (bool, runtimeObject, error) {
		if a.GetSubresource() == "status" {
			writes++
			if writes == 2 {
				return true, nil, errCrash // the write after the finalizer removals
			}
		}
		return false, nil, nil
	})
	if err := f.Sync("ns/job"); err == nil {
		t.Fatal("want the second status write to fail")
	}
	st := f.apiJob("job").Status
	if st.Succeeded != 0 || len(st.UncountedTerminatedPods.Succeeded) != 2 || len(st.UncountedTerminatedPods.Failed) != 1 {
		t.Fatalf("after the crash: %+v", st)
	}
	for _, p := range f.apiPods() {
		if p.Name <= "c" && hasTrackingFinalizer(p) {
			t.Fatalf("pod %s still has its finalizer", p.Name)
		}
	}
	for i := 0; i < 3; i++ {
		f.restart()
		f.refresh()
		f.MustSync("ns/job")
	}
	st = f.apiJob("job").Status
	if st.Succeeded != 2 || st.Failed != 1 || len(st.UncountedTerminatedPods.Succeeded)+len(st.UncountedTerminatedPods.Failed) != 0 {
		t.Errorf("after restarts: succeeded %d failed %d uncounted %+v", st.Succeeded, st.Failed, st.UncountedTerminatedPods)
	}
}

// TestCrashBeforeFinalizerRemoval: the process dies after writing the uncounted pods and
// before removing any finalizer: the next owner counts each once.
func TestCrashBeforeFinalizerRemoval(t *testing.T) {
	f := newFixture(t, objs(newJob(2, 2, started(t0)), newPod("a", succeeded()), newPod("b", succeeded()))...)
	f.Client.PrependReactor("patch", "pods", func(a coreAction) (bool, runtimeObject, error) {
		return true, nil, errCrash
	})
	if err := f.Sync("ns/job"); err == nil {
		t.Fatal("want the finalizer removals to fail")
	}
	f.Client.ReactionChain = f.Client.ReactionChain[1:]
	for i := 0; i < 3; i++ {
		f.restart()
		f.refresh()
		f.MustSync("ns/job")
	}
	st := f.apiJob("job").Status
	if st.Succeeded != 2 || len(st.UncountedTerminatedPods.Succeeded) != 0 {
		t.Errorf("succeeded %d uncounted %+v", st.Succeeded, st.UncountedTerminatedPods)
	}
	if got := conditionTypes(st); !slices.Equal(got, []string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}) {
		t.Errorf("conditions %v", got)
	}
}

// TestComplete: SuccessCriteriaMet first, Complete (with completionTime and the event)
// once every pod is counted.
func TestComplete(t *testing.T) {
	f := newFixture(t, objs(newJob(2, 2, started(t0.Add(-time.Minute))), newPod("a", succeeded()), newPod("b", succeeded()))...)
	f.MustSync("ns/job")
	sts := f.statuses()
	if got := conditionTypes(sts[0]); !slices.Equal(got, []string{"SuccessCriteriaMet=True/CompletionsReached"}) {
		t.Errorf("first status conditions %v", got)
	}
	st := f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"SuccessCriteriaMet=True/CompletionsReached", "Complete=True/CompletionsReached"}) {
		t.Errorf("conditions %v", got)
	}
	if st.CompletionTime == nil || !st.CompletionTime.Time.Equal(t0) || st.Succeeded != 2 {
		t.Errorf("completionTime %v succeeded %d", st.CompletionTime, st.Succeeded)
	}
	if msg := st.Conditions[1].Message; msg != "Reached expected number of succeeded pods" {
		t.Errorf("message %q", msg)
	}
	if got := f.EventReasons(); got["Normal Completed"] != 1 {
		t.Errorf("events %v", got)
	}
	// Marked finished: not synced again until the update is seen.
	f.Client.ClearActions()
	f.MustSync("ns/job")
	if len(f.actions()) != 0 {
		t.Errorf("synced a finished job: %v", f.actions())
	}
}

// TestIndexedTracking: completedIndexes, and an index that succeeds twice counts once.
func TestIndexedTracking(t *testing.T) {
	j := newJob(3, 5, indexed, started(t0), withStatus(batchv1.JobStatus{CompletedIndexes: "0", Succeeded: 1}))
	f := newFixture(t, objs(j,
		newPod("a", index(1), succeeded()), newPod("b", index(3), succeeded()), newPod("c", index(4), succeeded()),
		newPod("d", index(0), succeeded()), // index 0 again
		newPod("e", index(2)))...)
	f.MustSync("ns/job")
	st := f.apiJob("job").Status
	if st.CompletedIndexes != "0,1,3,4" || st.Succeeded != 4 || st.Active != 1 {
		t.Errorf("completedIndexes %q succeeded %d active %d", st.CompletedIndexes, st.Succeeded, st.Active)
	}
	for _, p := range f.apiPods() {
		if p.Name != "e" && hasTrackingFinalizer(p) {
			t.Errorf("pod %s keeps its finalizer", p.Name)
		}
	}
}

// TestBackoffLimit: the Job fails with FailureTarget, deletes its active pods, and turns
// Failed once they are gone.
func TestBackoffLimit(t *testing.T) {
	j := newJob(2, 5, backoffLimit(1), started(t0.Add(-time.Minute)), withStatus(batchv1.JobStatus{Failed: 1}))
	j.Status.StartTime = ptr.To(metav1.NewTime(t0.Add(-time.Minute)))
	f := newFixture(t, objs(j, newPod("a", failed()), newPod("b", ready))...)
	f.MustSync("ns/job")
	st := f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"FailureTarget=True/BackoffLimitExceeded"}) {
		t.Fatalf("conditions %v (%v)", got, f.actions())
	}
	if !slices.Contains(f.actions(), "delete pods b") {
		t.Errorf("running pod not deleted: %v", f.actions())
	}
	// The deleted pod is gone (its finalizer was removed with the status write).
	f.refresh()
	for _, p := range f.apiPods() {
		if p.Name == "b" {
			if hasTrackingFinalizer(p) {
				t.Errorf("pod b keeps its finalizer")
			}
			_ = f.Client.Tracker().Delete(podsGVR, "ns", "b")
		}
	}
	f.refresh()
	f.restart()
	f.refresh()
	f.MustSync("ns/job")
	st = f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"FailureTarget=True/BackoffLimitExceeded", "Failed=True/BackoffLimitExceeded"}) {
		t.Fatalf("conditions %v", got)
	}
	if st.Failed != 3 || st.CompletionTime != nil || st.Conditions[1].Message != "Job has reached the specified backoff limit" {
		t.Errorf("failed %d completionTime %v message %q", st.Failed, st.CompletionTime, st.Conditions[1].Message)
	}
	if got := f.EventReasons(); got["Warning BackoffLimitExceeded"] != 1 {
		t.Errorf("events %v", got)
	}
}

// TestPodFailureBackoff: after failures the Job waits 10s·2^(n-1) from the last failure.
func TestPodFailureBackoff(t *testing.T) {
	tests := []struct {
		name     string
		failures int
		ago      time.Duration
		want     time.Duration // 0: creates now
	}{
		{name: "one failure 3s ago", failures: 1, ago: 3 * time.Second, want: 7 * time.Second},
		{name: "two failures 5s ago", failures: 2, ago: 5 * time.Second, want: 15 * time.Second},
		{name: "one failure 11s ago", failures: 1, ago: 11 * time.Second, want: 0},
		{name: "capped at 10 minutes", failures: 20, ago: time.Minute, want: 9 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ps []*corev1.Pod
			for i := 0; i < tc.failures; i++ {
				ps = append(ps, newPod(string(rune('a'+i)), finishedWith(corev1.PodFailed, 1, t0.Add(-tc.ago))))
			}
			f := newFixture(t, objs(newJob(1, 1, backoffLimit(100), started(t0)), ps...)...)
			f.MustSync("ns/job")
			created := len(f.createdPods())
			d, delayed := f.Queue.After("ns/job")
			if tc.want == 0 {
				if created != 1 {
					t.Errorf("created %d, want 1", created)
				}
				return
			}
			if created != 0 || !delayed || d != tc.want {
				t.Errorf("created %d, requeued after %v (%v), want %v", created, d, delayed, tc.want)
			}
		})
	}
}

// TestActiveDeadline: a Job past activeDeadlineSeconds fails; one before it is looked at
// again when it passes.
func TestActiveDeadline(t *testing.T) {
	j := newJob(1, 1, started(t0.Add(-time.Minute)), func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds = ptr.To[int64](100) })
	f := newFixture(t, objs(j, newPod("a"))...)
	f.MustSync("ns/job")
	if d, ok := f.Queue.After("ns/job"); !ok || d != 40*time.Second {
		t.Errorf("requeue %v %v, want 40s", d, ok)
	}
	f.clock.Step(40 * time.Second)
	f.refresh()
	f.MustSync("ns/job")
	st := f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"FailureTarget=True/DeadlineExceeded"}) {
		t.Errorf("conditions %v", got)
	}
	if st.Conditions[0].Message != "Job was active longer than specified deadline" {
		t.Errorf("message %q", st.Conditions[0].Message)
	}
}

// TestSuspend: suspending deletes the active pods, sets Suspended and clears startTime;
// resuming sets Suspended False and a new startTime.
func TestSuspend(t *testing.T) {
	f := newFixture(t, objs(newJob(2, 4, suspended(true), started(t0.Add(-time.Hour))), newPod("a", ready), newPod("b"))...)
	f.MustSync("ns/job")
	st := f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"Suspended=True/JobSuspended"}) {
		t.Errorf("conditions %v", got)
	}
	if st.StartTime != nil || st.Active != 0 || ptr.Deref(st.Terminating, 0) != 2 {
		t.Errorf("startTime %v active %d terminating %v", st.StartTime, st.Active, st.Terminating)
	}
	if got := f.EventReasons(); got["Normal Suspended"] != 1 || got["Normal SuccessfulDelete"] != 2 {
		t.Errorf("events %v", got)
	}
	// Resume.
	for _, p := range f.apiPods() {
		_ = f.Client.Tracker().Delete(podsGVR, "ns", p.Name)
	}
	job := f.apiJob("job").DeepCopy()
	job.Spec.Suspend = ptr.To(false)
	_ = f.Client.Tracker().Update(jobsGVR, job, "ns")
	f.clock.Step(time.Minute)
	f.restart()
	f.refresh()
	f.MustSync("ns/job")
	st = f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"Suspended=False/JobResumed"}) {
		t.Errorf("conditions %v", got)
	}
	if st.StartTime == nil || !st.StartTime.Time.Equal(t0.Add(time.Minute)) || st.Active != 2 {
		t.Errorf("startTime %v active %d", st.StartTime, st.Active)
	}
	if got := f.EventReasons(); got["Normal Resumed"] != 1 || got["Normal SuccessfulCreate"] != 2 {
		t.Errorf("events %v", got)
	}
}

// TestCreatedSuspended: a Job created suspended gets no startTime and no pods.
func TestCreatedSuspended(t *testing.T) {
	f := newFixture(t, newJob(2, 4, suspended(true)))
	f.MustSync("ns/job")
	st := f.apiJob("job").Status
	if st.StartTime != nil || len(f.createdPods()) != 0 {
		t.Errorf("startTime %v created %d", st.StartTime, len(f.createdPods()))
	}
}

package job

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

func exitCodes(action batchv1.PodFailurePolicyAction, op batchv1.PodFailurePolicyOnExitCodesOperator, codes ...int32) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{Action: action,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: codes}}
}

func onCondition(action batchv1.PodFailurePolicyAction, t corev1.PodConditionType) batchv1.PodFailurePolicyRule {
	return batchv1.PodFailurePolicyRule{Action: action,
		OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: t, Status: corev1.ConditionTrue}}}
}

func TestMatchFailurePolicy(t *testing.T) {
	pod := func(opts ...podOpt) *corev1.Pod { return newPod("p", opts...) }
	tests := []struct {
		name       string
		rules      []batchv1.PodFailurePolicyRule
		pod        *corev1.Pod
		wantAction string // "" when no rule matched
		wantCounts bool
		wantMsg    string
	}{
		{name: "no rule matches", rules: []batchv1.PodFailurePolicyRule{exitCodes("FailJob", "In", 42)},
			pod: pod(finishedWith(corev1.PodFailed, 1, t0)), wantCounts: true},
		{name: "FailJob on exit code", rules: []batchv1.PodFailurePolicyRule{exitCodes("FailJob", "In", 42)},
			pod: pod(finishedWith(corev1.PodFailed, 42, t0)), wantAction: "FailJob", wantCounts: true,
			wantMsg: "Container c for pod ns/p failed with exit code 42 matching FailJob rule at index 0"},
		{name: "NotIn", rules: []batchv1.PodFailurePolicyRule{exitCodes("Count", "NotIn", 1, 2)},
			pod: pod(finishedWith(corev1.PodFailed, 3, t0)), wantAction: "Count", wantCounts: true},
		{name: "exit code 0 never matches NotIn", rules: []batchv1.PodFailurePolicyRule{exitCodes("FailJob", "NotIn", 1)},
			pod: pod(finishedWith(corev1.PodFailed, 0, t0)), wantCounts: true},
		{name: "Ignore DisruptionTarget", rules: []batchv1.PodFailurePolicyRule{onCondition("Ignore", corev1.DisruptionTarget)},
			pod: pod(failed(), withCondition(corev1.DisruptionTarget)), wantAction: "Ignore", wantCounts: false},
		{name: "FailJob on condition", rules: []batchv1.PodFailurePolicyRule{
			exitCodes("Ignore", "In", 5), onCondition("FailJob", corev1.DisruptionTarget)},
			pod: pod(failed(), withCondition(corev1.DisruptionTarget)), wantAction: "FailJob", wantCounts: true,
			wantMsg: "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 1"},
		{name: "first matching rule wins", rules: []batchv1.PodFailurePolicyRule{
			exitCodes("FailIndex", "In", 1), exitCodes("FailJob", "In", 1)},
			pod: pod(failed()), wantAction: "FailIndex", wantCounts: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := matchFailurePolicy(&batchv1.PodFailurePolicy{Rules: tc.rules}, tc.pod)
			if got := string(ptr.Deref(m.action, "")); got != tc.wantAction || m.counts != tc.wantCounts || ptr.Deref(m.failJob, "") != tc.wantMsg {
				t.Errorf("action %q counts %v msg %q, want %q %v %q", got, m.counts, ptr.Deref(m.failJob, ""), tc.wantAction, tc.wantCounts, tc.wantMsg)
			}
		})
	}
}

// TestPodFailurePolicyInSync: FailJob fails the Job with reason PodFailurePolicy; Ignore
// does not count the failure.
func TestPodFailurePolicyInSync(t *testing.T) {
	t.Run("FailJob", func(t *testing.T) {
		j := newJob(2, 4, started(t0), func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{exitCodes("FailJob", "In", 42)}}
		})
		f := newFixture(t, objs(j, newPod("a", finishedWith(corev1.PodFailed, 42, t0)))...)
		f.MustSync("ns/job")
		st := f.apiJob("job").Status
		if got := conditionTypes(st); !slices.Equal(got, []string{"FailureTarget=True/PodFailurePolicy", "Failed=True/PodFailurePolicy"}) {
			t.Errorf("conditions %v", got)
		}
		if st.Failed != 1 || len(f.createdPods()) != 0 {
			t.Errorf("failed %d created %d", st.Failed, len(f.createdPods()))
		}
		if got := f.EventReasons(); got["Warning PodFailurePolicy"] != 1 {
			t.Errorf("events %v", got)
		}
	})
	t.Run("Ignore", func(t *testing.T) {
		j := newJob(1, 1, backoffLimit(0), started(t0), func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{onCondition("Ignore", corev1.DisruptionTarget)}}
		})
		f := newFixture(t, objs(j, newPod("a", failed(), withCondition(corev1.DisruptionTarget)))...)
		f.MustSync("ns/job")
		st := f.apiJob("job").Status
		if st.Failed != 0 || len(st.Conditions) != 0 || len(f.createdPods()) != 1 || hasTrackingFinalizer(f.apiPods()[0]) {
			t.Errorf("failed %d conditions %v created %d", st.Failed, conditionTypes(st), len(f.createdPods()))
		}
	})
}

// TestBackoffLimitPerIndex: an index that used its retries fails; the Job goes on with the
// others and fails with FailedIndexes at the end, or at once past maxFailedIndexes.
func TestBackoffLimitPerIndex(t *testing.T) {
	perIndex := func(limit int32, maxFailed *int32) jobOpt {
		return func(j *batchv1.Job) {
			indexed(j)
			j.Spec.BackoffLimitPerIndex = ptr.To(limit)
			j.Spec.MaxFailedIndexes = maxFailed
			j.Spec.BackoffLimit = ptr.To[int32](1 << 30)
		}
	}
	t.Run("retry inherits the failure count", func(t *testing.T) {
		f := newFixture(t, objs(newJob(2, 2, perIndex(1, nil), started(t0)),
			newPod("a", index(0), finishedWith(corev1.PodFailed, 1, t0.Add(-time.Hour))), newPod("b", index(1)))...)
		f.MustSync("ns/job")
		ps := f.createdPods()
		if len(ps) != 1 || ps[0].Annotations[batchv1.JobIndexFailureCountAnnotation] != "1" || ps[0].Annotations[batchv1.JobCompletionIndexAnnotation] != "0" {
			t.Fatalf("created %v", ps)
		}
		// The failed pod keeps its finalizer until the replacement is seen.
		st := f.apiJob("job").Status
		if st.FailedIndexes == nil || *st.FailedIndexes != "" {
			t.Errorf("failedIndexes %v", st.FailedIndexes)
		}
	})
	t.Run("index fails, the job ends with FailedIndexes", func(t *testing.T) {
		f := newFixture(t, objs(newJob(2, 2, perIndex(1, nil), started(t0)),
			newPod("a", index(0), failed(), annotated(batchv1.JobIndexFailureCountAnnotation, "1")),
			newPod("b", index(1), succeeded()))...)
		f.MustSync("ns/job")
		st := f.apiJob("job").Status
		if ptr.Deref(st.FailedIndexes, "-") != "0" || st.CompletedIndexes != "1" {
			t.Errorf("failedIndexes %v completedIndexes %q", st.FailedIndexes, st.CompletedIndexes)
		}
		if got := conditionTypes(st); !slices.Equal(got, []string{"FailureTarget=True/FailedIndexes", "Failed=True/FailedIndexes"}) {
			t.Errorf("conditions %v", got)
		}
	})
	t.Run("maxFailedIndexes", func(t *testing.T) {
		f := newFixture(t, objs(newJob(3, 3, perIndex(0, ptr.To[int32](0)), started(t0)),
			newPod("a", index(0), failed()), newPod("b", index(1)))...)
		f.MustSync("ns/job")
		st := f.apiJob("job").Status
		if got := conditionTypes(st); !slices.Equal(got, []string{"FailureTarget=True/MaxFailedIndexesExceeded"}) {
			t.Errorf("conditions %v", got)
		}
		if !slices.Contains(f.actions(), "delete pods b") {
			t.Errorf("actions %v", f.actions())
		}
	})
	t.Run("FailIndex rule", func(t *testing.T) {
		f := newFixture(t, objs(newJob(2, 2, perIndex(3, nil), started(t0), func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{exitCodes("FailIndex", "In", 7)}}
		}), newPod("a", index(0), finishedWith(corev1.PodFailed, 7, t0)), newPod("b", index(1)))...)
		f.MustSync("ns/job")
		st := f.apiJob("job").Status
		if ptr.Deref(st.FailedIndexes, "-") != "0" || len(f.createdPods()) != 0 {
			t.Errorf("failedIndexes %v created %d", st.FailedIndexes, len(f.createdPods()))
		}
	})
}

// TestSuccessPolicy: a matching rule ends the Job with SuccessCriteriaMet, its other pods
// deleted, then Complete.
func TestSuccessPolicy(t *testing.T) {
	j := newJob(3, 3, indexed, started(t0), func(j *batchv1.Job) {
		j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{
			{SucceededCount: ptr.To[int32](3)},
			{SucceededIndexes: ptr.To("0")},
		}}
	})
	f := newFixture(t, objs(j, newPod("a", index(0), succeeded()), newPod("b", index(1)), newPod("c", index(2)))...)
	f.MustSync("ns/job")
	st := f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"SuccessCriteriaMet=True/SuccessPolicy"}) || st.Conditions[0].Message != "Matched rules at index 1" {
		t.Fatalf("conditions %v", got)
	}
	if !slices.Contains(f.actions(), "delete pods b") || !slices.Contains(f.actions(), "delete pods c") {
		t.Errorf("actions %v", f.actions())
	}
	for _, p := range f.apiPods() {
		if p.Name != "a" {
			_ = f.Client.Tracker().Delete(podsGVR, "ns", p.Name)
		}
	}
	f.restart()
	f.refresh()
	f.MustSync("ns/job")
	st = f.apiJob("job").Status
	if got := conditionTypes(st); !slices.Equal(got, []string{"SuccessCriteriaMet=True/SuccessPolicy", "Complete=True/SuccessPolicy"}) {
		t.Errorf("conditions %v", got)
	}
}

func TestMatchSuccessPolicy(t *testing.T) {
	log := klog.Background()
	tests := []struct {
		name      string
		rules     []batchv1.SuccessPolicyRule
		succeeded string
		want      string
	}{
		{name: "all listed indexes", rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("1-3")}}, succeeded: "0-3", want: "Matched rules at index 0"},
		{name: "listed indexes missing", rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("1-3")}}, succeeded: "1,2"},
		{name: "count of listed", rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("1-5"), SucceededCount: ptr.To[int32](2)}}, succeeded: "0,2,4", want: "Matched rules at index 0"},
		{name: "count only", rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("9")}, {SucceededCount: ptr.To[int32](2)}}, succeeded: "5,7", want: "Matched rules at index 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := matchSuccessPolicy(log, &batchv1.SuccessPolicy{Rules: tc.rules}, 10, parseIndexes(log, tc.succeeded, 10))
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("%q %v, want %q", got, ok, tc.want)
			}
		})
	}
}

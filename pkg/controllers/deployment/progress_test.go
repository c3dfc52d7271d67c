package deployment

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// progressingAt is a Progressing condition last updated at t.
func progressingAt(status corev1.ConditionStatus, reason string, t time.Time) appsv1.DeploymentCondition {
	return appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: status, Reason: reason,
		LastUpdateTime: metav1.NewTime(t), LastTransitionTime: metav1.NewTime(t)}
}

func TestSyncRolloutStatus(t *testing.T) {
	const deadline = 60
	tests := []struct {
		name string
		// status is the Deployment's status before the sync.
		status appsv1.DeploymentStatus
		// newAvailable of the 3 replicas of the new ReplicaSet are available; oldReplicas
		// run in an old one.
		newAvailable, oldReplicas int32
		noDeadline                bool
		wantReason                string
		wantStatus                corev1.ConditionStatus
		wantUpdate                bool
		// wantTransition is the expected lastTransitionTime of Progressing.
		wantTransition time.Time
		wantAfter      time.Duration
	}{
		{name: "complete", newAvailable: 3,
			status:     appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-10*time.Second))}},
			wantReason: ReasonNewReplicaSetReady, wantStatus: corev1.ConditionTrue, wantUpdate: true, wantTransition: now.Add(-10 * time.Second), wantAfter: -1},
		{name: "progress renews the update time, keeps the transition time", newAvailable: 2, oldReplicas: 1,
			status: appsv1.DeploymentStatus{Replicas: 4, UpdatedReplicas: 3, AvailableReplicas: 3, ReadyReplicas: 3, ObservedGeneration: 1,
				Conditions: []appsv1.DeploymentCondition{progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-50*time.Second))}},
			wantReason: ReasonReplicaSetUpdated, wantStatus: corev1.ConditionTrue, wantUpdate: true, wantTransition: now.Add(-50 * time.Second), wantAfter: -1},
		{name: "no progress, before the deadline: requeued for it", newAvailable: 1, oldReplicas: 1,
			status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 4, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2,
				UnavailableReplicas: 2, TerminatingReplicas: ptr.To[int32](0),
				Conditions: []appsv1.DeploymentCondition{progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-20*time.Second)),
					{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: ReasonMinimumUnavailable,
						Message: "Deployment does not have minimum availability.", LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}}},
			wantReason: ReasonReplicaSetUpdated, wantStatus: corev1.ConditionTrue, wantTransition: now.Add(-20 * time.Second), wantAfter: 40 * time.Second},
		{name: "no progress past the deadline", newAvailable: 1, oldReplicas: 1,
			status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 4, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2,
				Conditions: []appsv1.DeploymentCondition{progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-61*time.Second))}},
			wantReason: ReasonProgressDeadline, wantStatus: corev1.ConditionFalse, wantUpdate: true, wantTransition: now, wantAfter: -1},
		{name: "exactly at the deadline is not past it", newAvailable: 1, oldReplicas: 1,
			status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 4, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2,
				Conditions: []appsv1.DeploymentCondition{progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-60*time.Second))}},
			wantReason: ReasonReplicaSetUpdated, wantStatus: corev1.ConditionTrue, wantUpdate: true, wantTransition: now.Add(-60 * time.Second), wantAfter: -1},
		{name: "no deadline: no Progressing condition", newAvailable: 1, oldReplicas: 1, noDeadline: true,
			status:     appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-61*time.Second))}},
			wantUpdate: true, wantAfter: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 3)
			d.Spec.ProgressDeadlineSeconds = ptr.To[int32](deadline)
			if tt.noDeadline {
				d.Spec.ProgressDeadlineSeconds = nil
			}
			d.Status = tt.status
			newRS := withAvailable(newReplicaSet(d, "n", 3, 0, 2), tt.newAvailable)
			all := []*appsv1.ReplicaSet{newRS}
			if tt.oldReplicas > 0 {
				all = append(all, oldReplicaSet(d, "o", tt.oldReplicas, time.Hour, 1))
			}
			f := newFixture(t, d)
			if err := f.ctrl.syncRolloutStatus(f.TestContext(), all, newRS, d.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			updated := len(f.writes()) > 0
			if updated != tt.wantUpdate {
				t.Errorf("status written: %v, want %v (%q)", updated, tt.wantUpdate, f.writes())
			}
			got := f.deployment("d").Status
			cond := getCondition(got, appsv1.DeploymentProgressing)
			switch {
			case tt.wantReason == "" && cond != nil:
				t.Errorf("Progressing = %+v, want none", cond)
			case tt.wantReason != "" && cond == nil:
				t.Errorf("no Progressing condition, want %s", tt.wantReason)
			case cond != nil:
				if cond.Reason != tt.wantReason || cond.Status != tt.wantStatus {
					t.Errorf("Progressing = %s/%s, want %s/%s", cond.Status, cond.Reason, tt.wantStatus, tt.wantReason)
				}
				if !cond.LastTransitionTime.Time.Equal(tt.wantTransition) {
					t.Errorf("lastTransitionTime = %v, want %v", cond.LastTransitionTime.Time, tt.wantTransition)
				}
			}
			gotAfter, requeued := f.Queue.After("ns/d")
			if tt.wantAfter >= 0 != requeued || (requeued && gotAfter != tt.wantAfter+time.Second) {
				t.Errorf("requeued after %v (%v), want %v + 1s", gotAfter, requeued, tt.wantAfter)
			}
		})
	}
}

func TestRequeueForDeadline(t *testing.T) {
	tests := []struct {
		name        string
		cond        *appsv1.DeploymentCondition
		complete    bool
		want        time.Duration
		wantLimited bool
	}{
		{name: "no condition", want: -1},
		{name: "timed out already", cond: ptr.To(progressingAt(corev1.ConditionFalse, ReasonProgressDeadline, now.Add(-time.Hour))), want: -1},
		{name: "complete", cond: ptr.To(progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now)), complete: true, want: -1},
		{name: "deadline ahead", cond: ptr.To(progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-30*time.Second))), want: 30 * time.Second},
		{name: "deadline now: rate limited", cond: ptr.To(progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-60*time.Second))), want: 0, wantLimited: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 1)
			d.Spec.ProgressDeadlineSeconds = ptr.To[int32](60)
			if tt.cond != nil {
				d.Status.Conditions = []appsv1.DeploymentCondition{*tt.cond}
			}
			s := appsv1.DeploymentStatus{}
			if tt.complete {
				s = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ObservedGeneration: 1}
			}
			f := newFixture(t)
			if got := f.ctrl.requeueForDeadline(f.TestContext(), d, s); got != tt.want {
				t.Errorf("requeue after %v, want %v", got, tt.want)
			}
			if limited := len(f.Queue.RateLimited()) > 0; limited != tt.wantLimited {
				t.Errorf("rate limited: %v, want %v", limited, tt.wantLimited)
			}
		})
	}
}

func TestCheckPausedConditions(t *testing.T) {
	tests := []struct {
		name       string
		paused     bool
		cond       *appsv1.DeploymentCondition
		wantReason string
	}{
		{name: "pause", paused: true, cond: ptr.To(progressingAt(corev1.ConditionTrue, ReasonReplicaSetUpdated, now.Add(-time.Minute))), wantReason: ReasonPaused},
		{name: "resume", cond: ptr.To(progressingAt(corev1.ConditionUnknown, ReasonPaused, now.Add(-time.Minute))), wantReason: ReasonResumed},
		{name: "still paused: unchanged", paused: true, cond: ptr.To(progressingAt(corev1.ConditionUnknown, ReasonPaused, now.Add(-time.Minute)))},
		{name: "timed out stays timed out", paused: true, cond: ptr.To(progressingAt(corev1.ConditionFalse, ReasonProgressDeadline, now.Add(-time.Minute)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 1)
			d.Spec.Paused = tt.paused
			d.Status.Conditions = []appsv1.DeploymentCondition{*tt.cond}
			f := newFixture(t, d)
			if err := f.ctrl.checkPausedConditions(f.TestContext(), d.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			got := getCondition(f.deployment("d").Status, appsv1.DeploymentProgressing)
			if tt.wantReason == "" {
				if len(f.writes()) != 0 || got.Reason != tt.cond.Reason {
					t.Errorf("writes %q, condition %s; want no change", f.writes(), got.Reason)
				}
				return
			}
			if got.Reason != tt.wantReason || got.Status != corev1.ConditionUnknown || !got.LastUpdateTime.Time.Equal(now) {
				t.Errorf("Progressing = %s/%s at %v, want Unknown/%s now", got.Status, got.Reason, got.LastUpdateTime, tt.wantReason)
			}
		})
	}
}

// TestProgressDeadlineOverTime drives one stuck rollout with the clock: it keeps its
// condition until the deadline has passed, then turns ProgressDeadlineExceeded.
func TestProgressDeadlineOverTime(t *testing.T) {
	d := synced(newDeployment("d", 2), "2")
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](30)
	d.Status.Conditions[0].LastUpdateTime = metav1.NewTime(now)
	old := oldReplicaSet(d, "a", 2, time.Hour, 1)
	stuck := withAvailable(newReplicaSet(d, "b", 1, time.Minute, 2), 0)
	f := newFixture(t, d, old, stuck)
	for _, step := range []struct {
		advance time.Duration
		want    string
	}{{0, ReasonReplicaSetUpdated}, {30 * time.Second, ReasonReplicaSetUpdated}, {time.Second, ReasonProgressDeadline}} {
		f.clock.Step(step.advance)
		f.Cache(f.deployment("d"))
		f.mustSync("d")
		if c := getCondition(f.deployment("d").Status, appsv1.DeploymentProgressing); c.Reason != step.want {
			t.Fatalf("at %v: Progressing %s, want %s", f.clock.Now().Sub(now), c.Reason, step.want)
		}
	}
}

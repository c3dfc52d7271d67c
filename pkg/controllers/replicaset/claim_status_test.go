package replicaset

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func TestClaim(t *testing.T) {
	rs := newRS("rs", 2)
	other := newRS("other", 1)
	tests := []struct {
		name        string
		rs          *appsv1.ReplicaSet
		pods        []*corev1.Pod
		wantActions []string
		wantReplica int32
	}{
		{name: "an orphan the selector matches is adopted", rs: rs,
			pods:        []*corev1.Pod{newPodOf("mine", rs), newPodOf("orphan", nil)},
			wantActions: []string{"patch pods orphan", "update replicasets/status"}, wantReplica: 2},
		{name: "an orphan the selector does not match is left alone", rs: rs,
			pods:        []*corev1.Pod{newPodOf("mine", rs), newPodOf("mine2", rs), newPodOf("stranger", nil, labelled(map[string]string{"app": "db"}))},
			wantActions: []string{"update replicasets/status"}, wantReplica: 2},
		{name: "an owned pod the selector no longer matches is released (and replaced)", rs: rs,
			pods:        []*corev1.Pod{newPodOf("mine", rs), newPodOf("relabelled", rs, labelled(map[string]string{"app": "debug"}))},
			wantActions: []string{"patch pods relabelled", "create pods", "update replicasets/status"}, wantReplica: 1},
		{name: "a pod controlled by another owner is never touched", rs: rs,
			pods:        []*corev1.Pod{newPodOf("mine", rs), newPodOf("mine2", rs), newPodOf("theirs", other)},
			wantActions: []string{"update replicasets/status"}, wantReplica: 2},
		{name: "an orphan being deleted is not adopted", rs: rs,
			pods:        []*corev1.Pod{newPodOf("mine", rs), newPodOf("mine2", rs), newPodOf("dying", nil, deleting())},
			wantActions: []string{"update replicasets/status"}, wantReplica: 2},
		{name: "a ReplicaSet being deleted adopts nothing and creates nothing",
			rs: newRS("rs", 2, func(r *appsv1.ReplicaSet) {
				r.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
				r.Finalizers = []string{"foregroundDeletion"}
			}),
			pods:        []*corev1.Pod{newPodOf("mine", rs), newPodOf("orphan", nil)},
			wantActions: []string{"update replicasets/status"}, wantReplica: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objs(tc.rs, tc.pods...)...)
			f.MustSync("ns/rs")
			if got := f.actions(false); fmt.Sprint(got) != fmt.Sprint(tc.wantActions) {
				t.Errorf("actions = %v, want %v", got, tc.wantActions)
			}
			if st, ok := f.lastStatus(); !ok || st.Replicas != tc.wantReplica {
				t.Errorf("status.replicas = %d (written %v), want %d", st.Replicas, ok, tc.wantReplica)
			}
			for _, a := range f.Client.Actions() {
				if p, ok := a.(core.PatchAction); ok {
					patch := string(p.GetPatch())
					if !strings.Contains(patch, string(tc.rs.UID)) {
						t.Errorf("patch %s does not name the ReplicaSet", patch)
					}
				}
			}
		})
	}
}

func TestAdoptionChecksTheReplicaSetIsCurrent(t *testing.T) {
	rs := newRS("rs", 1)
	f := newFixture(t, rs, newPodOf("orphan", nil))
	// The API server has a new ReplicaSet of that name: the cached one is stale.
	f.Client.PrependReactor("get", "replicasets", func(core.Action) (bool, runtime.Object, error) {
		fresh := rs.DeepCopy()
		fresh.UID = "uid-new"
		return true, fresh, nil
	})
	err := f.Sync("ns/rs")
	if err == nil || !strings.Contains(err.Error(), "is gone") {
		t.Fatalf("sync error = %v, want the stale-owner error", err)
	}
	if got := f.actions(false); len(got) != 0 {
		t.Errorf("actions = %v, want none", got)
	}
}

func TestComputeStatus(t *testing.T) {
	rs := newRS("rs", 3, withMinReady(30))
	failing := newRS("rs", 3, withMinReady(30), withStatus(appsv1.ReplicaSetStatus{Conditions: []appsv1.ReplicaSetCondition{{
		Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: ReasonFailedCreate, Message: "old",
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour)),
	}}}))
	tests := []struct {
		name        string
		rs          *appsv1.ReplicaSet
		active      []*corev1.Pod
		terminating []*corev1.Pod
		manageErr   error

		want     [4]int32 // replicas, fullyLabeled, ready, available
		wantTerm int32
		wantCond string // "" none, else the reason
		wantMsg  string
	}{
		{name: "counts", rs: rs,
			active: []*corev1.Pod{
				newPodOf("available", rs, ready(t0.Add(-time.Minute))),
				newPodOf("exactly-min-ready", rs, ready(t0.Add(-30*time.Second))),
				newPodOf("ready-not-long-enough", rs, ready(t0.Add(-29*time.Second))),
				newPodOf("not-ready", rs),
				newPodOf("partly-labelled", rs, labelled(selectorLabels), ready(t0.Add(-time.Hour))),
			},
			terminating: []*corev1.Pod{newPodOf("t", rs, deleting())},
			want:        [4]int32{5, 4, 4, 3}, wantTerm: 1},
		{name: "ready without a transition time is not available", rs: rs,
			active: []*corev1.Pod{newPodOf("a", rs, ready(time.Time{}))}, want: [4]int32{1, 1, 1, 0}},
		{name: "without minReadySeconds every ready pod is available", rs: newRS("rs", 1),
			active: []*corev1.Pod{newPodOf("a", rs, ready(t0))}, want: [4]int32{1, 1, 1, 1}},
		{name: "no pods: zero terminating, reported", rs: rs, want: [4]int32{}, wantTerm: 0},
		{name: "too few and an error: FailedCreate", rs: rs, manageErr: errors.New("quota"),
			want: [4]int32{}, wantCond: ReasonFailedCreate, wantMsg: "quota"},
		{name: "too many and an error: FailedDelete", rs: newRS("rs", 0), manageErr: errors.New("nope"),
			active: []*corev1.Pod{newPodOf("a", rs)}, want: [4]int32{1, 1, 0, 0}, wantCond: ReasonFailedDelete, wantMsg: "nope"},
		{name: "an existing failure is kept as it was", rs: failing, manageErr: errors.New("new"),
			want: [4]int32{}, wantCond: ReasonFailedCreate, wantMsg: "old"},
		{name: "success removes the failure", rs: failing, want: [4]int32{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := computeStatus(tc.rs, tc.active, tc.terminating, tc.manageErr, t0)
			got := [4]int32{st.Replicas, st.FullyLabeledReplicas, st.ReadyReplicas, st.AvailableReplicas}
			if got != tc.want {
				t.Errorf("replicas, fullyLabeled, ready, available = %v, want %v", got, tc.want)
			}
			if st.TerminatingReplicas == nil || *st.TerminatingReplicas != tc.wantTerm {
				t.Errorf("terminatingReplicas = %v, want %d", st.TerminatingReplicas, tc.wantTerm)
			}
			c := findCondition(st.Conditions, appsv1.ReplicaSetReplicaFailure)
			switch {
			case tc.wantCond == "" && c != nil:
				t.Errorf("condition %+v, want none", c)
			case tc.wantCond != "" && (c == nil || c.Reason != tc.wantCond || c.Message != tc.wantMsg || c.Status != corev1.ConditionTrue):
				t.Errorf("condition %+v, want ReplicaFailure %s %q", c, tc.wantCond, tc.wantMsg)
			}
			if len(st.Conditions) > 1 {
				t.Errorf("conditions = %+v, want at most one", st.Conditions)
			}
		})
	}
}

func TestReplicaFailureOnQuotaAndItsRemoval(t *testing.T) {
	rs := newRS("rs", 2)
	f := newFixture(t, rs)
	failCreatesFrom(f, 1, quotaErr())
	if err := f.Sync("ns/rs"); err == nil {
		t.Fatal("sync succeeded despite the quota error")
	}
	st, ok := f.lastStatus()
	c := findCondition(st.Conditions, appsv1.ReplicaSetReplicaFailure)
	if !ok || c == nil || c.Reason != ReasonFailedCreate || !strings.Contains(c.Message, "exceeded quota") {
		t.Fatalf("status = %+v, want ReplicaFailure FailedCreate with the quota message", st)
	}
	ev := f.Events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning FailedCreate Error creating: pods is forbidden: exceeded quota") {
		t.Errorf("events = %q", ev)
	}

	// The quota is raised; the informer brings the failed status back.
	f2 := newFixture(t, newRS("rs", 2, withStatus(st), func(r *appsv1.ReplicaSet) { r.Status.ObservedGeneration = 1 }))
	f2.MustSync("ns/rs")
	st2, ok := f2.lastStatus()
	if !ok || findCondition(st2.Conditions, appsv1.ReplicaSetReplicaFailure) != nil {
		t.Errorf("status = %+v, want the ReplicaFailure condition removed", st2)
	}
}

func TestStatusUpdate(t *testing.T) {
	upToDate := appsv1.ReplicaSetStatus{Replicas: 1, FullyLabeledReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		TerminatingReplicas: ptr.To[int32](0), ObservedGeneration: 1}
	tests := []struct {
		name        string
		status      appsv1.ReplicaSetStatus
		generation  int64
		conflicts   int
		wantErr     bool
		wantActions []string
	}{
		{name: "nothing changed: no write", status: upToDate, generation: 1},
		{name: "a new generation is written", status: upToDate, generation: 2,
			wantActions: []string{"update replicasets/status"}},
		{name: "terminatingReplicas unset before: written", generation: 1,
			status:      func() appsv1.ReplicaSetStatus { s := upToDate; s.TerminatingReplicas = nil; return s }(),
			wantActions: []string{"update replicasets/status"}},
		{name: "a conflict is retried once on a fresh read", generation: 2, status: upToDate, conflicts: 1,
			wantActions: []string{"update replicasets/status", "get replicasets rs", "update replicasets/status"}},
		{name: "two conflicts fail the sync", generation: 2, status: upToDate, conflicts: 2, wantErr: true,
			wantActions: []string{"update replicasets/status", "get replicasets rs", "update replicasets/status"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newRS("rs", 1, withStatus(tc.status), func(r *appsv1.ReplicaSet) { r.Generation = tc.generation })
			f := newFixture(t, rs, newPodOf("a", rs, ready(t0.Add(-time.Hour))))
			n := 0
			f.Client.PrependReactor("update", "replicasets", func(a core.Action) (bool, runtime.Object, error) {
				if a.GetSubresource() == "status" && n < tc.conflicts {
					n++
					return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "rs", errors.New("changed"))
				}
				return false, nil, nil
			})
			err := f.Sync("ns/rs")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			if got := f.actions(true); fmt.Sprint(got) != fmt.Sprint(tc.wantActions) {
				t.Errorf("actions = %v, want %v", got, tc.wantActions)
			}
			if st, ok := f.lastStatus(); ok && st.ObservedGeneration != tc.generation {
				t.Errorf("observedGeneration = %d, want %d", st.ObservedGeneration, tc.generation)
			}
		})
	}
}

package deployment

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/pkg/controllers/internal/templatehash"
)

// podOf is a pod controlled by rs in phase.
func podOf(rs *appsv1.ReplicaSet, name string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: rs.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
		Status: corev1.PodStatus{Phase: phase},
	}
}

// TestRecreate checks the order of a Recreate rollout: old ReplicaSets to 0 first, no new
// ReplicaSet while an old pod still runs, then the new one at full size.
func TestRecreate(t *testing.T) {
	tests := []struct {
		name string
		// oldSize and oldStatus are the old ReplicaSet's spec and status replicas.
		oldSize, oldStatus int32
		oldPods            []corev1.PodPhase
		wantWrites         func(newName string) []string
	}{
		{name: "old ReplicaSet scaled down first", oldSize: 3, oldStatus: 3,
			oldPods:    []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodRunning},
			wantWrites: func(string) []string { return []string{"update replicasets d-a", "update deployments/status d"} }},
		{name: "old ReplicaSet still reports pods", oldSize: 0, oldStatus: 2,
			oldPods:    []corev1.PodPhase{corev1.PodRunning, corev1.PodPending},
			wantWrites: func(string) []string { return []string{"update deployments/status d"} }},
		{name: "an old pod still running", oldSize: 0, oldStatus: 0,
			oldPods:    []corev1.PodPhase{corev1.PodRunning},
			wantWrites: func(string) []string { return []string{"update deployments/status d"} }},
		{name: "an old pod in unknown phase", oldSize: 0, oldStatus: 0,
			oldPods:    []corev1.PodPhase{corev1.PodUnknown},
			wantWrites: func(string) []string { return []string{"update deployments/status d"} }},
		{name: "only finished old pods: new ReplicaSet at full size", oldSize: 0, oldStatus: 0,
			oldPods: []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed},
			wantWrites: func(n string) []string {
				return []string{"create replicasets " + n, "update deployments/status d", "update deployments/status d"}
			}},
		{name: "old pods gone", oldSize: 0, oldStatus: 0,
			wantWrites: func(n string) []string {
				return []string{"create replicasets " + n, "update deployments/status d", "update deployments/status d"}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := recreate(newDeployment("d", 3))
			d := synced(recreate(withImage(newDeployment("d", 3), "image:2")), "1")
			old := newReplicaSet(before, "a", tt.oldSize, time.Hour, 1)
			old.Status.Replicas = tt.oldStatus
			objs := []runtime.Object{d, old}
			for i, phase := range tt.oldPods {
				objs = append(objs, podOf(old, "p"+string(rune('0'+i)), phase))
			}
			f := newFixture(t, objs...)
			f.mustSync("d")
			newName := replicaSetName("d", templatehash.Compute(&d.Spec.Template, nil))
			if got, want := f.writes(), tt.wantWrites(newName); !slices.Equal(got, want) {
				t.Fatalf("writes = %q, want %q", got, want)
			}
			if slices.Contains(f.writes(), "create replicasets "+newName) {
				if got := *f.replicaSet(newName).Spec.Replicas; got != 3 {
					t.Errorf("new ReplicaSet has %d replicas, want 3", got)
				}
			}
		})
	}
}

func TestOldPodsRunning(t *testing.T) {
	d := recreate(newDeployment("d", 1))
	newRS := newReplicaSet(d, "n", 1, 0, 2)
	old := oldReplicaSet(d, "o", 0, time.Hour, 1)
	old.Status.Replicas = 0
	tests := []struct {
		name string
		pods map[types.UID][]*corev1.Pod
		want bool
	}{
		{name: "no pods"},
		{name: "new ReplicaSet's pods do not count", pods: map[types.UID][]*corev1.Pod{newRS.UID: {podOf(newRS, "p", corev1.PodRunning)}}},
		{name: "old running pod", pods: map[types.UID][]*corev1.Pod{old.UID: {podOf(old, "p", corev1.PodRunning)}}, want: true},
		{name: "old pending pod", pods: map[types.UID][]*corev1.Pod{old.UID: {podOf(old, "p", corev1.PodPending)}}, want: true},
		{name: "old finished pods", pods: map[types.UID][]*corev1.Pod{old.UID: {podOf(old, "p", corev1.PodSucceeded), podOf(old, "q", corev1.PodFailed)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := oldPodsRunning(newRS, []*appsv1.ReplicaSet{old}, tt.pods); got != tt.want {
				t.Errorf("oldPodsRunning = %v, want %v", got, tt.want)
			}
		})
	}
}

package statefulset

import (
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestCountReplicas(t *testing.T) {
	set := newSet("web", 4, minReady(10))
	cur := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "cur"}}
	upd := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "upd"}}
	justReady := podAt(set, 2, "upd")
	justReady.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-time.Second))
	pods := []*corev1.Pod{
		podAt(set, 0, "cur"),
		podAt(set, 1, "upd"),
		justReady,
		podAt(set, 3, "upd", deleting()),
		newPod(set, 4), // planned, not created
		podAt(set, 5, "cur", phase(corev1.PodPending), notReady()),
	}
	var st appsv1.StatefulSetStatus
	countReplicas(&st, set.Spec.MinReadySeconds, cur, upd, t0, pods)
	want := appsv1.StatefulSetStatus{Replicas: 5, ReadyReplicas: 4, AvailableReplicas: 3, CurrentReplicas: 2, UpdatedReplicas: 2}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("got %+v, want %+v", st, want)
	}
}

func TestCompleteUpdate(t *testing.T) {
	set := newSet("web", 2)
	tests := []struct {
		name string
		st   appsv1.StatefulSetStatus
		done bool
	}{
		{name: "all updated and ready", st: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "a", UpdateRevision: "b"}, done: true},
		{name: "one not ready", st: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 2, CurrentRevision: "a", UpdateRevision: "b"}},
		{name: "one not updated", st: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 1, CurrentRevision: "a", UpdateRevision: "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st
			completeUpdate(set, &st)
			if (st.CurrentRevision == "b" && st.CurrentReplicas == 2) != tt.done {
				t.Errorf("status %+v", st)
			}
		})
	}
}

func TestMaxUnavailable(t *testing.T) {
	tests := []struct {
		name     string
		replicas int32
		v        *intstr.IntOrString
		want     int
	}{
		{name: "default", replicas: 5, want: 1},
		{name: "int", replicas: 5, v: ptrTo(intstr.FromInt32(3)), want: 3},
		{name: "percent rounds down", replicas: 5, v: ptrTo(intstr.FromString("50%")), want: 2},
		{name: "at least one", replicas: 5, v: ptrTo(intstr.FromString("10%")), want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := newSet("web", tt.replicas)
			set.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = tt.v
			got, err := maxUnavailable(set)
			if err != nil || got != tt.want {
				t.Errorf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

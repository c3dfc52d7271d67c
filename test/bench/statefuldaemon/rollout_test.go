package statefuldaemon

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDaemonSetRolledOut(t *testing.T) {
	done := appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 5, CurrentNumberScheduled: 5, UpdatedNumberScheduled: 5,
		NumberReady: 5, NumberAvailable: 5}
	tests := []struct {
		name   string
		mutate func(*appsv1.DaemonSetStatus)
		want   bool
	}{
		{name: "every node updated and available", mutate: func(*appsv1.DaemonSetStatus) {}, want: true},
		{name: "generation not observed", mutate: func(s *appsv1.DaemonSetStatus) { s.ObservedGeneration = 1 }},
		{name: "fewer nodes desired than the benchmark made", mutate: func(s *appsv1.DaemonSetStatus) {
			s.DesiredNumberScheduled, s.CurrentNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady, s.NumberAvailable = 4, 4, 4, 4, 4
		}},
		{name: "an old pod left", mutate: func(s *appsv1.DaemonSetStatus) { s.UpdatedNumberScheduled = 4 }},
		{name: "a pod not available", mutate: func(s *appsv1.DaemonSetStatus) { s.NumberAvailable, s.NumberUnavailable = 4, 1 }},
		{name: "a pod not ready", mutate: func(s *appsv1.DaemonSetStatus) { s.NumberReady = 4 }},
		{name: "a misscheduled pod", mutate: func(s *appsv1.DaemonSetStatus) { s.NumberMisscheduled = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: dsName, Generation: 2}, Status: done}
			tt.mutate(&ds.Status)
			if err := dsRolledOut(ds, 5); (err == nil) != tt.want {
				t.Errorf("dsRolledOut = %v, want rolled out %v", err, tt.want)
			}
		})
	}
}

func TestStatefulSetRolledOut(t *testing.T) {
	done := appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 5, ReadyReplicas: 5, AvailableReplicas: 5, UpdatedReplicas: 5,
		CurrentReplicas: 5, CurrentRevision: "web-2", UpdateRevision: "web-2"}
	tests := []struct {
		name   string
		mutate func(*appsv1.StatefulSetStatus)
		want   bool
	}{
		{name: "every replica updated, ready and current", mutate: func(*appsv1.StatefulSetStatus) {}, want: true},
		{name: "generation not observed", mutate: func(s *appsv1.StatefulSetStatus) { s.ObservedGeneration = 1 }},
		{name: "a replica missing", mutate: func(s *appsv1.StatefulSetStatus) { s.Replicas, s.ReadyReplicas, s.AvailableReplicas = 4, 4, 4 }},
		{name: "a replica not ready", mutate: func(s *appsv1.StatefulSetStatus) { s.ReadyReplicas = 4 }},
		{name: "rollout under way", mutate: func(s *appsv1.StatefulSetStatus) {
			s.UpdatedReplicas, s.CurrentReplicas, s.CurrentRevision = 2, 3, "web-1"
		}},
		{name: "last pod updated, revision not yet current", mutate: func(s *appsv1.StatefulSetStatus) { s.CurrentRevision = "web-1" }},
		{name: "no revision yet", mutate: func(s *appsv1.StatefulSetStatus) { s.CurrentRevision, s.UpdateRevision = "", "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: stsName, Generation: 2},
				Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](5)}, Status: done}
			tt.mutate(&sts.Status)
			if err := stsRolledOut(sts); (err == nil) != tt.want {
				t.Errorf("stsRolledOut = %v, want rolled out %v", err, tt.want)
			}
		})
	}
}

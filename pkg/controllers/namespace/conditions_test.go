package namespace

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestConditionUpdate: the first update adds all five conditions; an unchanged one is
// not written again; a changed message keeps the lastTransitionTime, a changed status
// moves it.
func TestConditionUpdate(t *testing.T) {
	old := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tests := []struct {
		name        string
		have        []corev1.NamespaceCondition
		found       func(u *conditionUpdater)
		wantChanged bool
		// wantMoved says whether the content failure condition's time moved.
		wantMoved bool
	}{
		{name: "first update adds every condition", found: func(*conditionUpdater) {}, wantChanged: true, wantMoved: true},
		{
			name:  "nothing changed",
			have:  okList(old),
			found: func(*conditionUpdater) {}, wantChanged: false,
		},
		{
			name:  "status flips: time moves",
			have:  okList(old),
			found: func(u *conditionUpdater) { u.contentFailed(errors.New("boom")) }, wantChanged: true, wantMoved: true,
		},
		{
			name: "message changes, status does not: time stays",
			have: func() []corev1.NamespaceCondition {
				cs := okList(old)
				for i := range cs {
					if cs[i].Type == corev1.NamespaceDeletionContentFailure {
						cs[i].Status, cs[i].Reason, cs[i].Message = corev1.ConditionTrue, "ContentDeletionFailed", "older"
					}
				}
				return cs
			}(),
			found: func(u *conditionUpdater) { u.contentFailed(errors.New("boom")) }, wantChanged: true, wantMoved: false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := &corev1.Namespace{Status: corev1.NamespaceStatus{Conditions: tc.have}}
			u := &conditionUpdater{}
			tc.found(u)
			if got := u.update(ns); got != tc.wantChanged {
				t.Errorf("changed = %v, want %v", got, tc.wantChanged)
			}
			if len(ns.Status.Conditions) != len(conditionTypes) {
				t.Fatalf("%d conditions, want %d", len(ns.Status.Conditions), len(conditionTypes))
			}
			c := find(ns.Status.Conditions, corev1.NamespaceDeletionContentFailure)
			if moved := !c.LastTransitionTime.Equal(&old); moved != tc.wantMoved {
				t.Errorf("lastTransitionTime moved = %v, want %v", moved, tc.wantMoved)
			}
		})
	}
}

func okList(at metav1.Time) []corev1.NamespaceCondition {
	var out []corev1.NamespaceCondition
	for _, t := range conditionTypes {
		out = append(out, corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, LastTransitionTime: at,
			Reason: okReasons[t], Message: okMessages[t]})
	}
	return out
}

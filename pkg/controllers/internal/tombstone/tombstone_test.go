package tombstone

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestUnwrap(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	tests := []struct {
		name   string
		obj    any
		wantOK bool
	}{
		{name: "the object itself", obj: pod, wantOK: true},
		{name: "a tombstone of the object", obj: toolscache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}, wantOK: true},
		{name: "an object of another type", obj: &corev1.Secret{}},
		{name: "a tombstone of another type", obj: toolscache.DeletedFinalStateUnknown{Key: "ns/s", Obj: &corev1.Secret{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Unwrap[*corev1.Pod](tt.obj)
			if ok != tt.wantOK || (ok && got != pod) {
				t.Errorf("Unwrap = %v, %v; want the pod: %v", got, ok, tt.wantOK)
			}
		})
	}
}

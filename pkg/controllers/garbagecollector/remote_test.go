package garbagecollector

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConservativeRemote(t *testing.T) {
	for _, fin := range []string{metav1.FinalizerDeleteDependents, metav1.FinalizerOrphanDependents} {
		if pending, err := (ConservativeRemote{}).Pending(context.Background(), metav1.OwnerReference{Name: "n"}, fin); !pending || err != nil {
			t.Errorf("%s: pending %v, %v; the default must always hold the finalizer", fin, pending, err)
		}
	}
}

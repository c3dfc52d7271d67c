package deployment

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// TestDeprecatedRollback covers the deprecated.deployment.rollback.to annotation.
func TestDeprecatedRollback(t *testing.T) {
	tests := []struct {
		name      string
		to        string
		wantImage string
		wantEvent string
	}{
		{name: "to the previous revision", to: "0", wantImage: "image:old-a",
			wantEvent: `Normal DeploymentRollback Rolled back deployment "d" to revision 1`},
		{name: "to a named revision", to: "1", wantImage: "image:old-a",
			wantEvent: `Normal DeploymentRollback Rolled back deployment "d" to revision 1`},
		{name: "to the current revision", to: "2", wantImage: "image:1",
			wantEvent: `Warning DeploymentRollbackTemplateUnchanged The rollback revision contains the same template as current deployment "d"`},
		{name: "to a missing revision", to: "9", wantImage: "image:1",
			wantEvent: "Warning DeploymentRollbackRevisionNotFound Unable to find the revision to rollback to."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := synced(newDeployment("d", 2), "2")
			d.Annotations[appsv1.DeprecatedRollbackTo] = tt.to
			old := oldReplicaSet(d, "a", 0, time.Hour, 1)
			old.Annotations["kubernetes.io/change-cause"] = "first"
			cur := newReplicaSet(d, "b", 2, time.Minute, 2)
			f := newFixture(t, d, old, cur)
			f.mustSync("d")
			got := f.deployment("d")
			if _, ok := got.Annotations[appsv1.DeprecatedRollbackTo]; ok {
				t.Error("rollback request not cleared")
			}
			if img := got.Spec.Template.Spec.Containers[0].Image; img != tt.wantImage {
				t.Errorf("image = %q, want %q", img, tt.wantImage)
			}
			if _, ok := got.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; ok {
				t.Error("pod-template-hash copied into the Deployment's template")
			}
			if ev := f.Events(); !slices.Contains(ev, tt.wantEvent) {
				t.Errorf("events = %q, want %q among them", ev, tt.wantEvent)
			}
		})
	}
}

func TestRollbackTo(t *testing.T) {
	tests := []struct {
		name, value string
		want        *int64
	}{
		{name: "absent"},
		{name: "invalid", value: "x"},
		{name: "zero", value: "0", want: new(int64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDeployment("d", 1)
			if tt.value != "" {
				d.Annotations[appsv1.DeprecatedRollbackTo] = tt.value
			}
			got := rollbackTo(d)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("rollbackTo = %v, want %v", got, tt.want)
			}
		})
	}
}

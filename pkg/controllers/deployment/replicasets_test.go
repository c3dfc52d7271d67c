package deployment

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestEqualIgnoringHash(t *testing.T) {
	base := newDeployment("d", 1).Spec.Template
	withHash := *base.DeepCopy()
	withHash.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "abc"
	otherImage := *withHash.DeepCopy()
	otherImage.Spec.Containers[0].Image = "other"
	onlyHash := corev1.PodTemplateSpec{}
	onlyHash.Labels = map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "abc"}
	tests := []struct {
		name string
		a, b corev1.PodTemplateSpec
		want bool
	}{
		{name: "hash label ignored", a: base, b: withHash, want: true},
		{name: "other image", a: base, b: otherImage},
		{name: "other label", a: base, b: corev1.PodTemplateSpec{Spec: base.Spec}},
		{name: "a label map of only the hash equals none", a: onlyHash, b: corev1.PodTemplateSpec{}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.b.DeepCopy()
			if got := equalIgnoringHash(&tt.a, &tt.b); got != tt.want {
				t.Errorf("equalIgnoringHash = %v, want %v", got, tt.want)
			}
			if tt.b.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != before.Labels[appsv1.DefaultDeploymentUniqueLabelKey] {
				t.Error("the compared template was modified")
			}
		})
	}
}

package templatehash

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The vectors were observed on the upstream reference control plane
// (hack/cluster-upstream.sh: kube-apiserver and kube-controller-manager v1.37.1), not
// computed here: Deployments created in namespace dp-hashvec, their defaulted
// .spec.template saved with `kubectl get deploy NAME -o jsonpath='{.spec.template}'` into
// testdata/, and the pod-template-hash label read from the ReplicaSet upstream created (upstream's
// DaemonSet controller hashes its template with the same function).
// The collision vector is hv1 after `kubectl patch --subresource=status` set
// status.collisionCount=2 and `kubectl set image` changed the template.
func TestComputeMatchesUpstream(t *testing.T) {
	tests := []struct {
		name           string
		file           string
		collisionCount *int32
		want           string
	}{
		{name: "one container", file: "upstream-hv1-template.json", want: "7b9599f8f5"},
		{name: "annotations, ports, env, resources", file: "upstream-hv2-template.json", want: "5c45b89c8d"},
		{name: "collision count 2", file: "upstream-hv1-collision2-template.json", collisionCount: ptr.To[int32](2), want: "6b6f56bb88"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var tmpl corev1.PodTemplateSpec
			if err := json.Unmarshal(raw, &tmpl); err != nil {
				t.Fatal(err)
			}
			if got := Compute(&tmpl, tt.collisionCount); got != tt.want {
				t.Errorf("Compute = %q, upstream computed %q", got, tt.want)
			}
			// Informers may decode protobuf instead of JSON; quantities must dump alike.
			pb, err := tmpl.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var fromPB corev1.PodTemplateSpec
			if err := fromPB.Unmarshal(pb); err != nil {
				t.Fatal(err)
			}
			if got := Compute(&fromPB, tt.collisionCount); got != tt.want {
				t.Errorf("podTemplateHash after a protobuf round trip = %q, upstream computed %q", got, tt.want)
			}
		})
	}
}

func TestComputeChanges(t *testing.T) {
	base := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "a"}}}}
	other := *base.DeepCopy()
	other.Spec.Containers[0].Image = "b"
	tests := []struct {
		name       string
		a, b       corev1.PodTemplateSpec
		ca, cb     *int32
		wantEquals bool
	}{
		{name: "same template", a: base, b: *base.DeepCopy(), wantEquals: true},
		{name: "other image", a: base, b: other},
		{name: "nil vs zero collision count", a: base, b: base, cb: ptr.To[int32](0)},
		{name: "collision count 1 vs 2", a: base, b: base, ca: ptr.To[int32](1), cb: ptr.To[int32](2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ha, hb := Compute(&tt.a, tt.ca), Compute(&tt.b, tt.cb)
			if (ha == hb) != tt.wantEquals {
				t.Errorf("hashes %q and %q: equal=%v, want %v", ha, hb, ha == hb, tt.wantEquals)
			}
		})
	}
}

package daemonset

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The vectors are the Deployment controller's (pkg/controllers/deployment/testdata):
// templates saved from the upstream reference control plane and the pod-template-hash
// upstream computed for them. Upstream's DaemonSet controller names revisions and labels
// pods with the same function (controller.ComputeHash) over the template.
func TestTemplateHashMatchesUpstream(t *testing.T) {
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
			if got := templateHash(&tmpl, tt.collisionCount); got != tt.want {
				t.Errorf("templateHash = %q, upstream computed %q", got, tt.want)
			}
		})
	}
}

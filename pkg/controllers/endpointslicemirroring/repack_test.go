//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TestRepackSubsetsMatchesUpstream: the canonical form of each input equals the one
// kube-controller-manager's RepackSubsets gives, order included (which addresses a subset
// over the limit keeps, and the order of a slice's ports, follow from it). The vectors were
// computed, not written by hand: testdata/repack-vectors.json holds each input and what
// k8s.io/kubernetes v1.37.1's pkg/api/v1/endpoints.RepackSubsets returned for it, run by a
// throwaway program built in the tools module (hack/tools/kube), which may import
// k8s.io/kubernetes.
func TestRepackSubsetsMatchesUpstream(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "repack-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors []struct {
		Name     string                  `json:"name"`
		In       []corev1.EndpointSubset `json:"in"`
		Upstream []corev1.EndpointSubset `json:"upstream"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 7 {
		t.Fatalf("%d vectors, want the 7 recorded", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			in, _ := json.Marshal(v.In)
			got := repackSubsets(v.In)
			if !equality.Semantic.DeepEqual(got, v.Upstream) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(v.Upstream)
				t.Errorf("repackSubsets:\n got %s\nwant %s", g, w)
			}
			// The input is left as it was.
			after, _ := json.Marshal(v.In)
			if string(after) != string(in) {
				t.Errorf("input changed:\n%s\n%s", in, after)
			}
		})
	}
}

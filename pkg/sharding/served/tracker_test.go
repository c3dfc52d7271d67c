package served

import (
	"errors"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func setOf(gvrs ...schema.GroupVersionResource) Set {
	return (Set{}).withAll(gvrs)
}

func gvrsOf(rs []Resource) []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, r := range rs {
		out = append(out, r.GroupVersionResource)
	}
	return out
}

func TestTracker(t *testing.T) {
	widgetsV2 := schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"}
	exampleV1 := schema.GroupVersion{Group: "example.com", Version: "v1"}
	type round struct {
		found                 Set
		failed                map[schema.GroupVersion]error
		wantAdded, wantRemove []schema.GroupVersionResource
		wantCurrent           []schema.GroupVersionResource
	}
	tests := []struct {
		name   string
		rounds []round
	}{
		{name: "first discovery starts everything", rounds: []round{
			{found: setOf(pods, nodes), wantAdded: []schema.GroupVersionResource{nodes, pods}, wantCurrent: []schema.GroupVersionResource{nodes, pods}},
		}},
		{name: "a CRD created, then deleted", rounds: []round{
			{found: setOf(pods), wantAdded: []schema.GroupVersionResource{pods}, wantCurrent: []schema.GroupVersionResource{pods}},
			{found: setOf(pods, widgets), wantAdded: []schema.GroupVersionResource{widgets}, wantCurrent: []schema.GroupVersionResource{pods, widgets}},
			{found: setOf(pods), wantRemove: []schema.GroupVersionResource{widgets}, wantCurrent: []schema.GroupVersionResource{pods}},
		}},
		{name: "a group that fails discovery keeps its resources until it answers", rounds: []round{
			{found: setOf(pods, widgets), wantAdded: []schema.GroupVersionResource{pods, widgets}, wantCurrent: []schema.GroupVersionResource{pods, widgets}},
			{found: setOf(pods), failed: map[schema.GroupVersion]error{exampleV1: errors.New("503")}, wantCurrent: []schema.GroupVersionResource{pods, widgets}},
			{found: setOf(pods), wantRemove: []schema.GroupVersionResource{widgets}, wantCurrent: []schema.GroupVersionResource{pods}},
		}},
		{name: "a failed group never found before is not invented", rounds: []round{
			{found: setOf(pods), failed: map[schema.GroupVersion]error{exampleV1: errors.New("503")}, wantAdded: []schema.GroupVersionResource{pods}, wantCurrent: []schema.GroupVersionResource{pods}},
		}},
		{name: "a new preferred version: one stopped, one started", rounds: []round{
			{found: setOf(widgets), wantAdded: []schema.GroupVersionResource{widgets}, wantCurrent: []schema.GroupVersionResource{widgets}},
			{found: setOf(widgetsV2), wantAdded: []schema.GroupVersionResource{widgetsV2}, wantRemove: []schema.GroupVersionResource{widgets}, wantCurrent: []schema.GroupVersionResource{widgetsV2}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr Tracker
			for i, r := range tt.rounds {
				added, removed := tr.Update(r.found, r.failed)
				if got := gvrsOf(added); !reflect.DeepEqual(got, r.wantAdded) {
					t.Errorf("round %d: added %v, want %v", i, got, r.wantAdded)
				}
				if got := gvrsOf(removed); !reflect.DeepEqual(got, r.wantRemove) {
					t.Errorf("round %d: removed %v, want %v", i, got, r.wantRemove)
				}
				if got := gvrsOf(tr.Current().Sorted()); !reflect.DeepEqual(got, r.wantCurrent) {
					t.Errorf("round %d: current %v, want %v", i, got, r.wantCurrent)
				}
			}
		})
	}
}

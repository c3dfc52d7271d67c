package replicaset

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
)

type fixedRV string

func (f fixedRV) LastStoreSyncResourceVersion() string { return string(f) }

func TestConsistency(t *testing.T) {
	type write struct {
		uid string
		res resource
		rv  string
	}
	tests := []struct {
		name      string
		writes    []write
		clearUID  *string
		pods, rss string
		wantStale resource // "" when ready
	}{
		{name: "nothing written", pods: "5", rss: "5"},
		{name: "pods caught up", writes: []write{{"u", resourcePods, "7"}}, pods: "7", rss: "1"},
		{name: "pods behind", writes: []write{{"u", resourcePods, "7"}}, pods: "6", rss: "9", wantStale: resourcePods},
		{name: "replicaset behind", writes: []write{{"u", resourceReplicaSets, "12"}}, pods: "20", rss: "11",
			wantStale: resourceReplicaSets},
		{name: "the newest write counts", writes: []write{{"u", resourcePods, "9"}, {"u", resourcePods, "8"}}, pods: "8",
			rss: "1", wantStale: resourcePods},
		{name: "a new ReplicaSet of the name starts afresh", writes: []write{{"u", resourcePods, "9"}, {"u2", resourcePods, "3"}},
			pods: "4", rss: "1"},
		{name: "a store that cannot tell holds nothing back", writes: []write{{"u", resourcePods, "9"}}, pods: "", rss: ""},
		{name: "versions that do not compare hold nothing back", writes: []write{{"u", resourcePods, "x9"}}, pods: "4", rss: ""},
		{name: "cleared for its uid", writes: []write{{"u", resourcePods, "9"}}, clearUID: ptrTo("u"), pods: "1", rss: "1"},
		{name: "not cleared for another uid", writes: []write{{"u", resourcePods, "9"}}, clearUID: ptrTo("v"), pods: "1", rss: "1",
			wantStale: resourcePods},
		{name: "cleared for any uid", writes: []write{{"u", resourcePods, "9"}}, clearUID: ptrTo(""), pods: "1", rss: "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newConsistency(map[resource]rvSource{resourcePods: fixedRV(tc.pods), resourceReplicaSets: fixedRV(tc.rss)})
			for _, w := range tc.writes {
				c.wrote("ns/rs", typesUID(w.uid), w.res, w.rv)
			}
			if tc.clearUID != nil {
				c.clear("ns/rs", typesUID(*tc.clearUID))
			}
			err := c.ready("ns/rs")
			var stale *errStaleCache
			switch {
			case tc.wantStale == "" && err != nil:
				t.Errorf("ready = %v, want nil", err)
			case tc.wantStale != "" && (!errors.As(err, &stale) || stale.resource != tc.wantStale):
				t.Errorf("ready = %v, want stale %s", err, tc.wantStale)
			}
			if tc.wantStale == "" && len(c.byKey) != 0 {
				t.Errorf("records left after ready: %v", c.byKey)
			}
		})
	}
}

// TestSyncWaitsForItsOwnWrites: a sync right after one that created pods does nothing
// until the pod cache has reached the creates' resourceVersion.
func TestSyncWaitsForItsOwnWrites(t *testing.T) {
	rs := newRS("rs", 2)
	// The pod cache is at resourceVersion 10 (an unrelated pod).
	f := newFixture(t, rs, newPodOf("unrelated", nil, rv("10"), labelled(map[string]string{"x": "y"})))
	f.client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		pod.Name = fmt.Sprintf("%s%d", pod.GenerateName, f.created.Add(1))
		pod.ResourceVersion = "50"
		return true, pod, nil
	})
	f.mustSync("ns/rs")
	var stale *errStaleCache
	if err := f.sync("ns/rs"); !errors.As(err, &stale) || stale.resource != resourcePods {
		t.Fatalf("second sync = %v, want a stale pod cache", err)
	}
	f.cache(newPodOf("later", nil, rv("50"), labelled(map[string]string{"x": "y"})))
	if err := f.sync("ns/rs"); err != nil {
		t.Fatalf("sync once the cache caught up = %v", err)
	}
}

func ptrTo(s string) *string { return &s }

func typesUID(s string) types.UID { return types.UID(s) }

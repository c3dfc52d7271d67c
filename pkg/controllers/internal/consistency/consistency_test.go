package consistency

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

type fixedRV string

func (f fixedRV) LastStoreSyncResourceVersion() string { return string(f) }

var (
	pods = schema.GroupResource{Resource: "pods"}
	rss  = schema.GroupResource{Group: "apps", Resource: "replicasets"}
)

func TestStore(t *testing.T) {
	type write struct {
		uid string
		res schema.GroupResource
		rv  string
	}
	tests := []struct {
		name      string
		writes    []write
		clearUID  *string
		pods, rss string
		wantStale schema.GroupResource // zero when ready
	}{
		{name: "nothing written", pods: "5", rss: "5"},
		{name: "pods caught up", writes: []write{{"u", pods, "7"}}, pods: "7", rss: "1"},
		{name: "pods behind", writes: []write{{"u", pods, "7"}}, pods: "6", rss: "9", wantStale: pods},
		{name: "owner behind", writes: []write{{"u", rss, "12"}}, pods: "20", rss: "11", wantStale: rss},
		{name: "the newest write counts", writes: []write{{"u", pods, "9"}, {"u", pods, "8"}}, pods: "8", rss: "1", wantStale: pods},
		{name: "a new owner of the name starts afresh", writes: []write{{"u", pods, "9"}, {"u2", pods, "3"}}, pods: "4", rss: "1"},
		{name: "a store that cannot tell holds nothing back", writes: []write{{"u", pods, "9"}}, pods: "", rss: ""},
		{name: "versions that do not compare hold nothing back", writes: []write{{"u", pods, "x9"}}, pods: "4", rss: ""},
		{name: "a resource without a store holds nothing back", writes: []write{{"u", schema.GroupResource{Resource: "events"}, "9"}}, pods: "1", rss: "1"},
		{name: "an empty resourceVersion is not recorded", writes: []write{{"u", pods, ""}}, pods: "1", rss: "1"},
		{name: "cleared for its uid", writes: []write{{"u", pods, "9"}}, clearUID: ptrTo("u"), pods: "1", rss: "1"},
		{name: "not cleared for another uid", writes: []write{{"u", pods, "9"}}, clearUID: ptrTo("v"), pods: "1", rss: "1", wantStale: pods},
		{name: "cleared for any uid", writes: []write{{"u", pods, "9"}}, clearUID: ptrTo(""), pods: "1", rss: "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(map[schema.GroupResource]RVSource{pods: fixedRV(tc.pods), rss: fixedRV(tc.rss)})
			for _, w := range tc.writes {
				c.Wrote("ns/owner", types.UID(w.uid), w.res, w.rv)
			}
			if tc.clearUID != nil {
				c.Clear("ns/owner", types.UID(*tc.clearUID))
			}
			err := c.Ready("ns/owner")
			var stale *StaleError
			switch {
			case tc.wantStale.Empty() && err != nil:
				t.Errorf("Ready = %v, want nil", err)
			case !tc.wantStale.Empty() && (!errors.As(err, &stale) || stale.Resource != tc.wantStale):
				t.Errorf("Ready = %v, want stale %s", err, tc.wantStale)
			}
			if tc.wantStale.Empty() && len(c.byKey) != 0 {
				t.Errorf("records left after Ready: %v", c.byKey)
			}
			if !tc.wantStale.Empty() && c.Ready("ns/owner") == nil {
				t.Error("a stale Ready forgot the writes")
			}
		})
	}
}

func ptrTo(s string) *string { return &s }

// perNamespace is a NamespacedRVSource: store-wide resourceVersion all, and one per
// namespace.
type perNamespace struct {
	all string
	ns  map[string]string
}

func (p perNamespace) LastStoreSyncResourceVersion() string { return p.all }
func (p perNamespace) LastStoreSyncResourceVersionIn(namespace string) string {
	return p.ns[namespace]
}

func TestStoreNamespaced(t *testing.T) {
	tests := []struct {
		name      string
		key       string
		wrote     string
		store     perNamespace
		wantStale bool
	}{
		{name: "the namespace's stream caught up", key: "a/owner", wrote: "7", store: perNamespace{all: "3", ns: map[string]string{"a": "7"}}},
		{
			name: "another stream ahead does not count", key: "a/owner", wrote: "7",
			store: perNamespace{all: "20", ns: map[string]string{"a": "6", "b": "20"}}, wantStale: true,
		},
		{name: "a namespace the store cannot tell about holds nothing back", key: "c/owner", wrote: "7", store: perNamespace{all: "1", ns: map[string]string{"a": "1"}}},
		{name: "a cluster-scoped owner is asked about no namespace", key: "owner", wrote: "7", store: perNamespace{all: "20", ns: map[string]string{"": "6"}}, wantStale: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(map[schema.GroupResource]RVSource{pods: tc.store})
			c.Wrote(tc.key, "u", pods, tc.wrote)
			err := c.Ready(tc.key)
			var stale *StaleError
			if got := errors.As(err, &stale); got != tc.wantStale {
				t.Errorf("Ready = %v, want stale %v", err, tc.wantStale)
			}
		})
	}
}

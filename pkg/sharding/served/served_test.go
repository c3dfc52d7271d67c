package served

import (
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// fakeDiscovery answers ServerPreferredResources with lists and err.
type fakeDiscovery struct {
	discovery.ServerResourcesInterface
	lists []*metav1.APIResourceList
	err   error
}

func (f fakeDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return f.lists, f.err
}

var (
	all       = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	listWatch = []string{"list", "watch"}
	gcSpec    = Spec{Verbs: []string{"delete", "list", "watch"}, Ignore: []schema.GroupResource{{Resource: "events"}, {Group: "events.k8s.io", Resource: "events"}}}
	quotaSpec = Spec{Verbs: []string{"create", "list", "watch", "delete"}, NamespacedOnly: true}

	pods    = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodes   = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	events  = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func resourceList(gv string, rs ...metav1.APIResource) *metav1.APIResourceList {
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: rs}
}

func apiResource(name, kind string, namespaced bool, verbs []string) metav1.APIResource {
	return metav1.APIResource{Name: name, Kind: kind, Namespaced: namespaced, Verbs: verbs}
}

func cluster() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		resourceList("v1",
			apiResource("pods", "Pod", true, all),
			apiResource("nodes", "Node", false, all),
			apiResource("events", "Event", true, all),
		),
		resourceList("example.com/v1", apiResource("widgets", "Widget", true, all)),
		// Aggregated metrics: get and list only, no watch.
		resourceList("metrics.k8s.io/v1beta1", apiResource("pods", "PodMetrics", true, []string{"get", "list"})),
		resourceList("not/a/group/version", apiResource("things", "Thing", true, all)),
	}
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name       string
		d          fakeDiscovery
		spec       Spec
		want       []schema.GroupVersionResource
		wantFailed []schema.GroupVersion
		wantErr    bool
	}{
		{name: "garbage collector: deletable, watchable, events ignored", d: fakeDiscovery{lists: cluster()}, spec: gcSpec,
			want: []schema.GroupVersionResource{pods, nodes, widgets}},
		{name: "quota: namespaced only", d: fakeDiscovery{lists: cluster()}, spec: quotaSpec,
			want: []schema.GroupVersionResource{pods, events, widgets}},
		{name: "list and watch: the metrics API cannot be watched", d: fakeDiscovery{lists: cluster()}, spec: Spec{Verbs: listWatch},
			want: []schema.GroupVersionResource{pods, nodes, events, widgets}},
		{name: "an aggregated API is down: the others are found", spec: gcSpec,
			d: fakeDiscovery{lists: cluster()[:1], err: &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{
				{Group: "example.com", Version: "v1"}: errors.New("503")}}},
			want: []schema.GroupVersionResource{pods, nodes}, wantFailed: []schema.GroupVersion{{Group: "example.com", Version: "v1"}}},
		{name: "discovery failed as a whole", spec: gcSpec, d: fakeDiscovery{err: errors.New("connection refused")}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			found, failed, err := Discover(tt.d, tt.spec)
			if tt.wantErr {
				if err == nil || found != nil {
					t.Fatalf("Discover = %v, %v; want an error and no set", found, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []schema.GroupVersionResource
			for _, r := range found.Sorted() {
				got = append(got, r.GroupVersionResource)
			}
			var want []schema.GroupVersionResource
			for _, r := range (Set{}).withAll(tt.want).Sorted() {
				want = append(want, r.GroupVersionResource)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("found %v, want %v", got, want)
			}
			if len(failed) != len(tt.wantFailed) {
				t.Errorf("failed groups %v, want %v", failed, tt.wantFailed)
			}
			for _, gv := range tt.wantFailed {
				if _, ok := failed[gv]; !ok {
					t.Errorf("failed groups %v lack %v", failed, gv)
				}
			}
			if r, ok := found[pods]; ok && (r.Kind != "Pod" || !r.Namespaced) {
				t.Errorf("pods found as %+v", r)
			}
			if r, ok := found[nodes]; ok && (r.Kind != "Node" || r.Namespaced) {
				t.Errorf("nodes found as %+v", r)
			}
		})
	}
}

// withAll returns s plus a Resource for each of gvrs (kind and scope left empty: the
// tests compare resources by GroupVersionResource).
func (s Set) withAll(gvrs []schema.GroupVersionResource) Set {
	for _, gvr := range gvrs {
		s[gvr] = Resource{GroupVersionResource: gvr}
	}
	return s
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name    string
		spec    Spec
		wantErr bool
	}{
		{name: "garbage collector", spec: gcSpec},
		{name: "no watch", spec: Spec{Verbs: []string{"list", "delete"}}, wantErr: true},
		{name: "no verbs", spec: Spec{}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.spec.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

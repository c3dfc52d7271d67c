package endpointslice

import (
	"errors"
	"reflect"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestSyncService(t *testing.T) {
	nodeA := newNode("node-a", "zone-a", true)
	tests := []struct {
		name    string
		opts    Options
		objs    []runtime.Object
		wantErr bool
		// slices is the number of slices stored after the sync, and endpoints their
		// endpoints ("ip ready/serving/terminating"); ports the first slice's ports.
		slices    int
		endpoints []string
		port      int32
		writes    int
	}{{
		name:   "ready and not ready pods",
		objs:   objs(newService("web"), nodeA, newPod(0), newPod(1, notReady)),
		slices: 1, port: 8080, writes: 1,
		endpoints: []string{"10.1.0.1 true/true/false", "10.1.0.2 false/false/false"},
	}, {
		name:   "a terminating pod is not ready and not serving, and terminating",
		objs:   objs(newService("web"), nodeA, newPod(0), newPod(1, terminating)),
		slices: 1, port: 8080, writes: 1,
		endpoints: []string{"10.1.0.1 true/true/false", "10.1.0.2 false/false/true"},
	}, {
		name:   "publishNotReadyAddresses makes every pod ready",
		objs:   objs(newService("web", publishNotReady), nodeA, newPod(0), newPod(1, notReady)),
		slices: 1, port: 8080, writes: 1,
		endpoints: []string{"10.1.0.1 true/true/false", "10.1.0.2 true/false/false"},
	}, {
		name:   "a named target port is resolved from the pod's container port",
		objs:   objs(newService("web", namedTargetPort("web")), nodeA, newPod(0)),
		slices: 1, port: 9090, writes: 1,
		endpoints: []string{"10.1.0.1 true/true/false"},
	}, {
		name:   "no pods: a placeholder slice",
		objs:   objs(newService("web", withSelector(map[string]string{"app": "none"})), nodeA, newPod(0)),
		slices: 1, writes: 1,
	}, {
		name:   "more pods than max-endpoints-per-slice: split",
		opts:   Options{MaxEndpointsPerSlice: 2},
		objs:   objs(newService("web"), nodeA, newPods(5)),
		slices: 3, port: 8080, writes: 3,
		endpoints: []string{"10.1.0.1 true/true/false", "10.1.0.2 true/true/false", "10.1.0.3 true/true/false",
			"10.1.0.4 true/true/false", "10.1.0.5 true/true/false"},
	}, {
		name:    "a pod on a node not cached is left out and the sync fails, to be retried",
		objs:    objs(newService("web"), newPod(0)),
		wantErr: true, slices: 1, writes: 1,
	}, {
		name: "ExternalName: nothing",
		objs: objs(newService("web", externalName), nodeA, newPod(0)),
	}, {
		name: "no selector: nothing",
		objs: objs(newService("web", withSelector(nil)), nodeA, newPod(0)),
	}, {
		name: "Service gone: nothing",
		objs: objs(nodeA, newPod(0)),
	}, {
		name: "a slice being deleted is neither updated nor deleted; a new one is created",
		objs: objs(newService("web"), nodeA, newPod(0), func() *discoveryv1.EndpointSlice {
			s := managedSlice("web-old", "web", 1)
			s.DeletionTimestamp = &metav1.Time{}
			s.Finalizers = []string{"example.com/hold"}
			return s
		}()),
		slices: 2, port: 8080, writes: 1,
		endpoints: []string{"10.1.0.1 true/true/false"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts, tc.objs...)
			err := f.Sync("ns/web")
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync: err %v, want error %v", err, tc.wantErr)
			}
			if got := len(f.actions()); got != tc.writes {
				t.Errorf("writes %v, want %d", f.actions(), tc.writes)
			}
			got := f.slices()
			if len(got) != tc.slices {
				t.Fatalf("%d slices stored, want %d: %v", len(got), tc.slices, got)
			}
			if eps := endpointSummary(got); !reflect.DeepEqual(eps, tc.endpoints) {
				t.Errorf("endpoints %v, want %v", eps, tc.endpoints)
			}
			for _, s := range got {
				if s.Name == "web-old" {
					continue
				}
				if s.Labels[discoveryv1.LabelManagedBy] != ControllerName || s.Labels[discoveryv1.LabelServiceName] != "web" {
					t.Errorf("slice %s labels %v", s.Name, s.Labels)
				}
				if tc.port != 0 && (len(s.Ports) != 1 || *s.Ports[0].Port != tc.port || *s.Ports[0].Name != "http") {
					t.Errorf("slice %s ports %v, want http %d", s.Name, s.Ports, tc.port)
				}
			}
		})
	}
}

// TestSyncStale checks the tracker's read-your-writes guard: after the controller wrote a
// slice, a cache without that write fails the sync as stale (no write), and the sync goes
// through once the cache shows it.
func TestSyncStale(t *testing.T) {
	f := newFixture(t, Options{}, objs(newService("web"), newNode("node-a", "zone-a", true), newPod(0))...)
	f.MustSync("ns/web")
	if len(f.slices()) != 1 {
		t.Fatalf("slices %v", f.slices())
	}
	f.Client.ClearActions()
	if err := f.Sync("ns/web"); !errors.Is(err, errStaleCache) {
		t.Fatalf("sync with the slice not cached: %v, want the stale error", err)
	}
	if len(f.actions()) != 0 {
		t.Errorf("a stale sync wrote %v", f.actions())
	}
	f.cacheStored()
	f.MustSync("ns/web")
	if len(f.actions()) != 0 {
		t.Errorf("a sync of an up-to-date Service wrote %v", f.actions())
	}
}

// TestSyncRevertsHandEdit checks that a slice edited by someone else is written back.
func TestSyncRevertsHandEdit(t *testing.T) {
	f := newFixture(t, Options{}, objs(newService("web"), newNode("node-a", "zone-a", true), newPod(0))...)
	f.MustSync("ns/web")
	f.cacheStored()
	edited := f.slices()[0].DeepCopy()
	edited.Endpoints = nil
	edited.Generation++
	f.Cache(edited)
	f.Client.ClearActions()
	f.MustSync("ns/web")
	if got := endpointSummary(f.slices()); !reflect.DeepEqual(got, []string{"10.1.0.1 true/true/false"}) {
		t.Errorf("endpoints after the edit's sync %v (writes %v)", got, f.actions())
	}
}

func TestDropSlicesPendingDeletion(t *testing.T) {
	deleting := managedSlice("b", "web", 1)
	deleting.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name string
		in   []*discoveryv1.EndpointSlice
		want []string
	}{
		{name: "none", in: nil, want: nil},
		{name: "one of three", in: []*discoveryv1.EndpointSlice{managedSlice("a", "web", 1), deleting, managedSlice("c", "web", 1)}, want: []string{"a", "c"}},
		{name: "all", in: []*discoveryv1.EndpointSlice{deleting}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range dropSlicesPendingDeletion(tc.in) {
				got = append(got, s.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

package endpointslice

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/endpointslice/topologycache"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// updated gives a pod the resourceVersion of its next write.
func updated(p *corev1.Pod) { p.ResourceVersion = "2" }

func TestPodEventsQueueServices(t *testing.T) {
	other := map[string]string{"app": "other"}
	tests := []struct {
		name     string
		batch    time.Duration
		old, cur *corev1.Pod
		want     map[string]time.Duration
	}{
		{name: "added pod queues its Service", cur: newPod(0), want: map[string]time.Duration{"ns/web": 0}},
		{name: "after the batch period", batch: 3 * time.Second, cur: newPod(0), want: map[string]time.Duration{"ns/web": 3 * time.Second}},
		{name: "deleted pod queues its Service", old: newPod(0), want: map[string]time.Duration{"ns/web": 0}},
		{name: "readiness flip queues its Service", old: newPod(0), cur: newPod(0, notReady, updated), want: map[string]time.Duration{"ns/web": 0}},
		{name: "relabelled pod queues old and new Services", old: newPod(0), cur: newPod(0, withLabels(other), updated),
			want: map[string]time.Duration{"ns/web": 0, "ns/other": 0}},
		{name: "a change endpoints do not show queues nothing", old: newPod(0),
			cur: newPod(0, updated, func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }), want: map[string]time.Duration{}},
		{name: "a resync (same resourceVersion) queues nothing", old: newPod(0), cur: newPod(0, notReady), want: map[string]time.Duration{}},
		{name: "a pod of no Service queues nothing", cur: newPod(0, withLabels(map[string]string{"app": "none"})), want: map[string]time.Duration{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{BatchPeriod: tc.batch}, newService("web"), newService("other", withSelector(other)))
			var old, cur any
			if tc.old != nil {
				old = tc.old
			}
			if tc.cur != nil {
				cur = tc.cur
			}
			f.ctrl.podChanged(controllertest.Logger(t), old, cur)
			if got := f.Queue.Delayed(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSliceEventsQueueServices(t *testing.T) {
	foreign := managedSlice("web-x", "web", 1)
	foreign.Labels[discoveryv1.LabelManagedBy] = "someone-else"
	moved := managedSlice("web-a", "other", 1)
	tests := []struct {
		name  string
		batch time.Duration
		// own are slices the controller wrote (tracked) before the event.
		own   []*discoveryv1.EndpointSlice
		event func(c *Controller)
		want  map[string]time.Duration
	}{{
		name:  "a new slice the controller did not write",
		event: func(c *Controller) { c.addSlice(managedSlice("web-a", "web", 1)) },
		want:  map[string]time.Duration{"ns/web": time.Second},
	}, {
		name:  "after the batch period when longer than a second",
		batch: 5 * time.Second,
		event: func(c *Controller) { c.addSlice(managedSlice("web-a", "web", 1)) },
		want:  map[string]time.Duration{"ns/web": 5 * time.Second},
	}, {
		name:  "the controller's own write",
		own:   []*discoveryv1.EndpointSlice{managedSlice("web-a", "web", 2)},
		event: func(c *Controller) { c.addSlice(managedSlice("web-a", "web", 2)) },
		want:  map[string]time.Duration{},
	}, {
		name:  "another manager's slice",
		event: func(c *Controller) { c.addSlice(foreign) },
		want:  map[string]time.Duration{},
	}, {
		name: "an edit by someone else",
		own:  []*discoveryv1.EndpointSlice{managedSlice("web-a", "web", 2)},
		event: func(c *Controller) {
			c.updateSlice(controllertest.Logger(t), managedSlice("web-a", "web", 2), managedSlice("web-a", "web", 3))
		},
		want: map[string]time.Duration{"ns/web": time.Second},
	}, {
		name: "managed-by taken away",
		own:  []*discoveryv1.EndpointSlice{managedSlice("web-x", "web", 2)},
		event: func(c *Controller) {
			c.updateSlice(controllertest.Logger(t), managedSlice("web-x", "web", 2), foreign)
		},
		want: map[string]time.Duration{"ns/web": time.Second},
	}, {
		name: "service-name label changed: both Services",
		own:  []*discoveryv1.EndpointSlice{managedSlice("web-a", "web", 2)},
		event: func(c *Controller) {
			c.updateSlice(controllertest.Logger(t), managedSlice("web-a", "web", 2), moved)
		},
		want: map[string]time.Duration{"ns/web": time.Second, "ns/other": time.Second},
	}, {
		name: "a slice deleted by someone else",
		own:  []*discoveryv1.EndpointSlice{managedSlice("web-a", "web", 2)},
		event: func(c *Controller) {
			c.deleteSlice(toolscache.DeletedFinalStateUnknown{Key: "ns/web-a", Obj: managedSlice("web-a", "web", 2)})
		},
		want: map[string]time.Duration{"ns/web": time.Second},
	}, {
		name: "a slice the controller deleted",
		own:  []*discoveryv1.EndpointSlice{managedSlice("web-a", "web", 2)},
		event: func(c *Controller) {
			c.tracker.ExpectDeletion(managedSlice("web-a", "web", 2))
			c.deleteSlice(managedSlice("web-a", "web", 2))
		},
		want: map[string]time.Duration{},
	}, {
		name:  "an untracked slice deleted",
		event: func(c *Controller) { c.deleteSlice(managedSlice("web-a", "web", 2)) },
		want:  map[string]time.Duration{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{BatchPeriod: tc.batch}, newService("web"))
			for _, s := range tc.own {
				f.ctrl.tracker.Update(s)
			}
			tc.event(f.ctrl)
			if got := f.Queue.Delayed(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNodeEventsTriggerTopology(t *testing.T) {
	tests := []struct {
		name     string
		old, cur *corev1.Node
		want     bool
	}{
		{name: "became ready", old: newNode("n", "a", false), cur: newNode("n", "a", true), want: true},
		{name: "zone changed", old: newNode("n", "a", true), cur: newNode("n", "b", true), want: true},
		{name: "other label", old: newNode("n", "a", true), cur: func() *corev1.Node {
			n := newNode("n", "a", true)
			n.Labels["x"] = "y"
			return n
		}(), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{})
			f.ctrl.updateNode(tc.old, tc.cur)
			if got := len(f.ctrl.topologyTrigger) == 1; got != tc.want {
				t.Errorf("triggered %v, want %v", got, tc.want)
			}
			// Triggers coalesce: a second one while one is pending does not block.
			f.ctrl.triggerTopology()
			f.ctrl.triggerTopology()
			if len(f.ctrl.topologyTrigger) != 1 {
				t.Errorf("%d triggers pending, want 1", len(f.ctrl.topologyTrigger))
			}
		})
	}
}

// TestNamespaceComesBack plays design §3.1's hazard: the controller creates a slice
// whose create its cache has not shown when the namespace leaves the shard (the cache
// shows the Service and the cached slices as deleted); meanwhile another shard deletes
// that slice; the namespace comes back. The Service's next sync must reconcile (create
// the slice again), not fail as stale for ever, which it would if the tracker had kept
// the slice the controller wrote. A late delete event, arriving once the Service is
// cached again, must not make it forget the Service's current state.
func TestNamespaceComesBack(t *testing.T) {
	tests := []struct {
		name string
		// lateDelete: the Service's delete event is handled after it is cached again.
		lateDelete bool
		wantErr    error
	}{
		{name: "Service gone from the cache when its delete is handled: forgotten, reconciled on return"},
		{name: "delete event handled after the Service came back: kept, stale", lateDelete: true, wantErr: errStaleCache},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, pod, node := newService("web"), newPod(0), newNode("node-a", "zone-a", true)
			f := newFixture(t, Options{}, svc, pod, node)
			log := controllertest.Logger(t)
			f.MustSync("ns/web")
			written := f.slices()
			if len(written) != 1 {
				t.Fatalf("slices %v", written)
			}
			// The namespace leaves before the create reached the cache: the cache shows
			// the Service (and the pod) deleted.
			if !tc.lateDelete {
				f.Uncache(svc, pod)
				f.ctrl.deleteService(log, svc)
			}
			// Another shard deletes the slice; the namespace comes back.
			if err := f.Client.DiscoveryV1().EndpointSlices("ns").Delete(f.TestContext(), written[0].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			f.Cache(svc, pod)
			if tc.lateDelete {
				f.ctrl.deleteService(log, svc)
			}
			f.Client.ClearActions()
			err := f.Sync("ns/web")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("sync after the return: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil {
				if got := endpointSummary(f.slices()); !reflect.DeepEqual(got, []string{"10.1.0.1 true/true/false"}) {
					t.Errorf("endpoints after the return %v (writes %v)", got, f.actions())
				}
			}
		})
	}
}

// TestTopologyCheckQueuesOverloadedServices checks that the topology check feeds the
// cache every Node and queues the Services whose endpoints the zones' new CPU shares make
// too uneven for their hints.
func TestTopologyCheckQueuesOverloadedServices(t *testing.T) {
	withCPU := func(n *corev1.Node, cpu string) *corev1.Node {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		return n
	}
	tests := []struct {
		name  string
		nodes []runtime.Object
		want  []string
	}{
		{name: "zones as the endpoints: nothing", nodes: []runtime.Object{
			withCPU(newNode("a", "zone-a", true), "4"), withCPU(newNode("b", "zone-b", true), "4")}},
		{name: "one zone with most CPU: the Service is queued", want: []string{"ns/web"}, nodes: []runtime.Object{
			withCPU(newNode("a", "zone-a", true), "36"), withCPU(newNode("b", "zone-b", true), "4")}},
		{name: "a node not ready is left out: one zone only, hints cannot hold", want: []string{"ns/web"}, nodes: []runtime.Object{
			withCPU(newNode("a", "zone-a", true), "4"), withCPU(newNode("b", "zone-b", false), "4")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{}, tc.nodes...)
			f.ctrl.topology.SetHints("ns/web", discoveryv1.AddressTypeIPv4, topologycache.EndpointZoneInfo{"zone-a": 5, "zone-b": 5})
			f.ctrl.checkNodeTopologyDistribution(controllertest.Logger(t))
			if got := f.Queue.Keys(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // substrings of the error, none for valid
	}{
		{name: "defaults"},
		{name: "bounds", args: []string{"--concurrent-service-endpoint-syncs=50", "--max-endpoints-per-slice=1000"}},
		{name: "too many workers", args: []string{"--concurrent-service-endpoint-syncs=51"},
			want: []string{"concurrent-service-endpoint-syncs must not be more than 50, but got 51"}},
		{name: "no workers and no endpoints", args: []string{"--concurrent-service-endpoint-syncs=0", "--max-endpoints-per-slice=0"},
			want: []string{"concurrent-service-endpoint-syncs must not be less than 1, but got 0", "max-endpoints-per-slice must not be less than 1, but got 0"}},
		{name: "too many endpoints", args: []string{"--max-endpoints-per-slice=1001"},
			want: []string{"max-endpoints-per-slice must not be more than 1000, but got 1001"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Descriptor()
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			var workers int
			fs.IntVar(&workers, d.WorkersFlag, d.DefaultWorkers, "") // as the registry does
			d.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := d.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
)

// TestEvents: which informer events queue which key, at once or after the batch period,
// as upstream's handlers decide.
func TestEvents(t *testing.T) {
	log := klog.Background()
	web := []corev1.EndpointPort{port("http", 80)}
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...))
	skipped := newEndpoints("svc", epLabels(discoveryv1.LabelSkipMirror, "true"))
	leader := newEndpoints("svc", epAnnotations(resourcelock.LeaderElectionRecordAnnotationKey, "{}"))
	slice := mirrored("s1", ep, discoveryv1.AddressTypeIPv4, web, endpoint("10.0.0.1", true))
	foreign := slice.DeepCopy()
	foreign.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	renamed := slice.DeepCopy()
	renamed.Labels[discoveryv1.LabelServiceName] = "other"
	newer := slice.DeepCopy()
	newer.Generation = 2
	const batch = 3 * time.Second
	tests := []struct {
		name string
		// track makes the controller have written slice (generation 1) itself.
		track bool
		event func(c *Controller)
		now   []string
		after map[string]time.Duration
	}{
		{name: "an Endpoints added", event: func(c *Controller) { c.addEndpoints(log, ep) }, now: []string{"ns/svc"}},
		{name: "a skip-mirror Endpoints added", event: func(c *Controller) { c.addEndpoints(log, skipped) }},
		{name: "a leader-election Endpoints added", event: func(c *Controller) { c.addEndpoints(log, leader) }},
		{name: "an Endpoints updated", event: func(c *Controller) { c.updateEndpoints(log, ep, ep) }, now: []string{"ns/svc"}},
		{name: "an Endpoints gains skip-mirror", event: func(c *Controller) { c.updateEndpoints(log, ep, skipped) }, now: []string{"ns/svc"}},
		{name: "a skip-mirror Endpoints changes", event: func(c *Controller) { c.updateEndpoints(log, skipped, skipped) }},
		{name: "an Endpoints deleted", event: func(c *Controller) { c.deleteEndpoints(log, ep) }, now: []string{"ns/svc"}},
		{name: "an Endpoints deleted, in a tombstone", event: func(c *Controller) {
			c.deleteEndpoints(log, toolscache.DeletedFinalStateUnknown{Key: "ns/svc", Obj: ep})
		}, now: []string{"ns/svc"}},
		{name: "a skip-mirror Endpoints deleted", event: func(c *Controller) { c.deleteEndpoints(log, skipped) }},
		{name: "a selectorless Service added", event: func(c *Controller) { c.addService(newService("svc", nil)) }, now: []string{"ns/svc"}},
		{name: "a Service with a selector added", event: func(c *Controller) { c.addService(newService("svc", map[string]string{"a": "b"})) }},
		{name: "a Service gains a selector", event: func(c *Controller) {
			c.updateService(newService("svc", nil), newService("svc", map[string]string{"a": "b"}))
		}, now: []string{"ns/svc"}},
		{name: "a Service loses its selector", event: func(c *Controller) {
			c.updateService(newService("svc", map[string]string{"a": "b"}), newService("svc", nil))
		}, now: []string{"ns/svc"}},
		{name: "a selectorless Service changes otherwise", event: func(c *Controller) {
			c.updateService(newService("svc", nil), newService("svc", nil))
		}},
		{name: "a selectorless Service deleted", event: func(c *Controller) { c.deleteService(newService("svc", nil)) }, now: []string{"ns/svc"}},
		{name: "a Service with a selector deleted", event: func(c *Controller) { c.deleteService(newService("svc", map[string]string{"a": "b"})) }},
		{name: "a mirrored slice the controller did not write appears", event: func(c *Controller) { c.addSlice(slice) },
			after: map[string]time.Duration{"ns/svc": batch}},
		{name: "its own slice appears", track: true, event: func(c *Controller) { c.addSlice(slice) }},
		{name: "another manager's slice appears", event: func(c *Controller) { c.addSlice(foreign) }},
		{name: "its own slice changed by someone else", track: true, event: func(c *Controller) { c.updateSlice(log, slice, newer) },
			after: map[string]time.Duration{"ns/svc": batch}},
		{name: "its own slice, the update it made", track: true, event: func(c *Controller) { c.updateSlice(log, slice, slice) }},
		{name: "a slice taken over by another manager", track: true, event: func(c *Controller) { c.updateSlice(log, slice, foreign) },
			after: map[string]time.Duration{"ns/svc": batch}},
		{name: "another manager's slice changes", event: func(c *Controller) { c.updateSlice(log, foreign, foreign) }},
		{name: "a slice's service name changes: both Endpoints", track: true, event: func(c *Controller) { c.updateSlice(log, slice, renamed) },
			after: map[string]time.Duration{"ns/svc": batch, "ns/other": batch}},
		{name: "its own slice deleted unexpectedly", track: true, event: func(c *Controller) { c.deleteSlice(slice) },
			after: map[string]time.Duration{"ns/svc": batch}},
		{name: "its own slice deleted as it asked", track: true, event: func(c *Controller) {
			c.tracker.ExpectDeletion(slice)
			c.deleteSlice(slice)
		}},
		{name: "an untracked slice deleted", event: func(c *Controller) { c.deleteSlice(slice) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Options{BatchPeriod: batch})
			if tt.track {
				f.ctrl.tracker.Update(slice)
			}
			tt.event(f.ctrl)
			if got := f.Queue.Keys(); !reflect.DeepEqual(got, tt.now) {
				t.Errorf("queued %v, want %v", got, tt.now)
			}
			after := tt.after
			if after == nil {
				after = map[string]time.Duration{}
			}
			if got := f.Queue.Delayed(); !reflect.DeepEqual(got, after) {
				t.Errorf("queued later %v, want %v", got, after)
			}
		})
	}
}

// TestForgetWhenEndpointsLeaves: when an Endpoints leaves the cache (deleted, or its
// namespace moved to another shard, where this shard's sync never runs), the tracker's
// record of its slices goes, so that if the namespace comes back after another shard
// rewrote or deleted them, the key is not stale for ever; a delete event that arrives
// when the Endpoints is cached again (the namespace came back) forgets nothing.
func TestForgetWhenEndpointsLeaves(t *testing.T) {
	web := []corev1.EndpointPort{port("http", 80)}
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...))
	tests := []struct {
		name       string
		stillThere bool
		wantStale  bool
	}{
		{name: "gone from the cache: forgotten", stillThere: false, wantStale: false},
		{name: "back in the cache: kept", stillThere: true, wantStale: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Options{}, newService("svc", nil), ep)
			f.MustSync("ns/svc") // creates a slice, tracked, not cached
			if n := len(f.ctrl.metricsCache.byEndpoints); n != 1 {
				t.Fatalf("metrics cache holds %d Endpoints, want 1", n)
			}
			if !tt.stillThere {
				f.Uncache(ep)
			}
			f.ctrl.deleteEndpoints(klog.Background(), ep)
			f.Cache(ep)
			err := f.Sync("ns/svc")
			if stale := err != nil; stale != tt.wantStale {
				t.Errorf("sync after the delete event: %v, want stale %v", err, tt.wantStale)
			}
			if n := len(f.ctrl.metricsCache.byEndpoints); tt.wantStale && n != 1 {
				t.Errorf("metrics cache holds %d Endpoints, want 1 kept", n)
			}
		})
	}
}

// TestResync: on acquire, the key of every mirrored slice of the acquired namespaces is
// queued (an orphan slice's Endpoints is gone and queues nothing), and nothing else.
func TestResync(t *testing.T) {
	web := []corev1.EndpointPort{port("http", 80)}
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...))
	orphan := mirrored("orphan-1", newEndpoints("gone"), discoveryv1.AddressTypeIPv4, web, endpoint("10.0.0.1", true))
	elsewhere := orphan.DeepCopy()
	elsewhere.Namespace, elsewhere.Name = "other", "elsewhere"
	foreign := mirrored("foreign", ep, discoveryv1.AddressTypeIPv4, web)
	foreign.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	foreign.Labels[discoveryv1.LabelServiceName] = "selected"
	f := newFixture(t, Options{}, orphan, elsewhere, foreign)
	f.ctrl.Resync(controllers.Scope{Namespaces: []string{"ns"}})
	if got, want := f.Queue.Keys(), []string{"ns/gone"}; !reflect.DeepEqual(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
	// Its sync deletes the orphan.
	f.MustSync("ns/gone")
	if got, want := f.writes(), []string{"delete endpointslices orphan-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("writes %v, want %v", got, want)
	}
}

// TestFlags: the flags take kube-controller-manager's names and defaults, and refuse
// what it refuses.
func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults"},
		{name: "bounds", args: []string{"--mirroring-max-endpoints-per-subset=1", "--mirroring-concurrent-service-endpoint-syncs=50"}},
		{name: "upper bounds", args: []string{"--mirroring-max-endpoints-per-subset=1000", "--mirroring-concurrent-service-endpoint-syncs=1"}},
		{name: "no addresses per subset", args: []string{"--mirroring-max-endpoints-per-subset=0"},
			wantErr: "mirroring-max-endpoints-per-subset must not be less than 1, but got 0"},
		{name: "too many addresses per subset", args: []string{"--mirroring-max-endpoints-per-subset=1001"},
			wantErr: "mirroring-max-endpoints-per-subset must not be more than 1000, but got 1001"},
		{name: "too many workers", args: []string{"--mirroring-concurrent-service-endpoint-syncs=51"},
			wantErr: "mirroring-concurrent-service-endpoint-syncs must not be more than 50, but got 51"},
		{name: "both reported", args: []string{"--mirroring-concurrent-service-endpoint-syncs=0", "--mirroring-max-endpoints-per-subset=0"},
			wantErr: "mirroring-max-endpoints-per-subset must not be less than 1, but got 0\nmirroring-concurrent-service-endpoint-syncs must not be less than 1, but got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Descriptor()
			r, err := controllers.NewRegistry(d)
			if err != nil {
				t.Fatal(err)
			}
			fs := newFlagSet()
			r.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err = d.Validate()
			if got := errString(err); got != tt.wantErr {
				t.Errorf("Validate: %q, want %q", got, tt.wantErr)
			}
			if tt.name == "defaults" {
				for flag, want := range map[string]string{WorkersFlag: "5", MaxPerSubsetFlag: "1000", BatchPeriodFlag: "0s"} {
					if got := fs.Lookup(flag); got == nil || got.DefValue != want {
						t.Errorf("--%s default %v, want %s", flag, got, want)
					}
				}
			}
		})
	}
}

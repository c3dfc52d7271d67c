//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// TestSync: one sync of an Endpoints, from what is cached to the writes it makes, the
// slices that result and the events it records.
func TestSync(t *testing.T) {
	web := []corev1.EndpointPort{port("http", 80)}
	selectorless := newService("svc", nil)
	plain := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1"), addr("10.0.0.2")},
		[]corev1.EndpointAddress{addr("10.0.0.3")}, web...))
	plainSlice := func(name string) *discoveryv1.EndpointSlice {
		return mirrored(name, plain, discoveryv1.AddressTypeIPv4, web,
			endpoint("10.0.0.1", true), endpoint("10.0.0.2", true), endpoint("10.0.0.3", false))
	}
	other := plainSlice("other")
	other.Labels[discoveryv1.LabelManagedBy] = "someone-else"

	tests := []struct {
		name    string
		opts    Options
		objs    []runtime.Object
		key     string
		wantErr bool
		// writes are the requests made, in order ("create endpointslices" for a
		// generated name); slices what the API server holds after.
		writes []string
		// oneOf, when set, are the possible writes (the cache lists slices in no order).
		oneOf  [][]string
		slices []string
		events []string
	}{
		{name: "ready and not-ready addresses mirrored into one slice",
			objs:   []runtime.Object{selectorless, plain},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true 10.0.0.3:false"}},
		{name: "targets, node names and hostnames are kept",
			objs: []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{
				func() corev1.EndpointAddress { a := podAddr("10.0.0.1", "p1", "n1"); a.Hostname = "h1"; return a }()}, nil, web...))},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true@p1/n1#h1"}},
		{name: "a slice per address type",
			objs:   []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1"), addr("fd00::1")}, nil, web...))},
			writes: []string{"create endpointslices", "create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true", "IPv6 [http/80] fd00::1:true"}},
		{name: "a slice per port set, after the subsets are repacked by the addresses each port serves",
			objs: []runtime.Object{selectorless, newEndpoints("svc",
				subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, port("http", 80)),
				subset([]corev1.EndpointAddress{addr("10.0.0.2")}, nil, port("https", 443), port("http", 80)))},
			writes: []string{"create endpointslices", "create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true", "IPv4 [https/443] 10.0.0.2:true"}},
		{name: "one address in two subsets of one port set is mirrored once, not ready wins",
			objs: []runtime.Object{selectorless, newEndpoints("svc",
				subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...),
				subset(nil, []corev1.EndpointAddress{addr("10.0.0.1")}, web...))},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:false"}},
		{name: "an Endpoints without addresses has no slice",
			objs: []runtime.Object{selectorless, newEndpoints("svc")}},
		{name: "an irregular IP is written in canonical form",
			objs:   []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("fd00:0::0:1")}, nil, web...))},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv6 [http/80] fd00::1:true"}},
		{name: "addresses that are not IPs are skipped with a warning",
			objs:   []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1"), addr("not-an-ip"), addr("host.example")}, nil, web...))},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true"},
			events: []string{"Warning InvalidIPAddress Skipped 2 invalid IP addresses when mirroring to EndpointSlices"}},
		{name: "addresses beyond the limit are skipped with a warning, ready ones and lower IPs kept",
			opts: Options{MaxEndpointsPerSubset: 2},
			objs: []runtime.Object{selectorless, newEndpoints("svc", subset(
				[]corev1.EndpointAddress{addr("10.0.0.9"), addr("10.0.0.2")}, []corev1.EndpointAddress{addr("10.0.0.1")}, web...))},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.2:true 10.0.0.9:true"},
			events: []string{"Warning TooManyAddressesToMirror A max of 2 addresses can be mirrored to EndpointSlices per Endpoints subset. 1 addresses were skipped"}},
		{name: "the limit is per subset",
			opts: Options{MaxEndpointsPerSubset: 1},
			objs: []runtime.Object{selectorless, newEndpoints("svc",
				subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, port("a", 1)),
				subset([]corev1.EndpointAddress{addr("10.0.0.2")}, nil, port("b", 2)))},
			writes: []string{"create endpointslices", "create endpointslices"},
			slices: []string{"IPv4 [a/1] 10.0.0.1:true", "IPv4 [b/2] 10.0.0.2:true"}},
		{name: "slices that hold the Endpoints are left alone",
			objs:   []runtime.Object{selectorless, plain, plainSlice("s1")},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true 10.0.0.3:false"}},
		{name: "a hand edit of a mirrored slice is reverted in place",
			objs: []runtime.Object{selectorless, plain, mirrored("s1", plain, discoveryv1.AddressTypeIPv4, web,
				endpoint("10.0.0.1", false), endpoint("10.0.0.7", true))},
			writes: []string{"update endpointslices s1"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true 10.0.0.3:false"}},
		{name: "a label edit of a mirrored slice is reverted",
			objs: []runtime.Object{selectorless, plain, func() *discoveryv1.EndpointSlice {
				s := plainSlice("s1")
				s.Labels["extra"] = "x"
				return s
			}()},
			writes: []string{"update endpointslices s1"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true 10.0.0.3:false"}},
		{name: "a slice owned by an earlier Endpoints of the name is rewritten",
			objs: []runtime.Object{selectorless, plain, func() *discoveryv1.EndpointSlice {
				s := plainSlice("s1")
				s.OwnerReferences[0].UID = "uid-earlier"
				return s
			}()},
			writes: []string{"update endpointslices s1"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true 10.0.0.3:false"}},
		{name: "a second slice of one port set is deleted",
			objs:   []runtime.Object{selectorless, plain, plainSlice("s1"), plainSlice("s2")},
			oneOf:  [][]string{{"delete endpointslices s1"}, {"delete endpointslices s2"}},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true 10.0.0.2:true 10.0.0.3:false"}},
		{name: "a slice of a port set gone is recycled for the new one",
			objs: []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, port("http", 8080))),
				mirrored("s1", plain, discoveryv1.AddressTypeIPv4, web, endpoint("10.0.0.1", true))},
			writes: []string{"update endpointslices s1"},
			slices: []string{"IPv4 [http/8080] 10.0.0.1:true"}},
		{name: "slices of another manager are never touched",
			objs: []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...), epLabels(discoveryv1.LabelSkipMirror, "true")), other}},
		{name: "skip-mirror: the mirrored slices are deleted",
			objs:   []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...), epLabels(discoveryv1.LabelSkipMirror, "true")), plainSlice("s1")},
			writes: []string{"delete endpointslices s1"}},
		{name: "skip-mirror other than \"true\" is mirrored",
			objs:   []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...), epLabels(discoveryv1.LabelSkipMirror, "false"))},
			writes: []string{"create endpointslices"},
			slices: []string{"IPv4 [http/80] 10.0.0.1:true"}},
		{name: "a leader-election record: the mirrored slices are deleted",
			objs:   []runtime.Object{selectorless, newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...), epAnnotations(resourcelock.LeaderElectionRecordAnnotationKey, "{}")), plainSlice("s1")},
			writes: []string{"delete endpointslices s1"}},
		{name: "a Service with a selector: the mirrored slices are deleted",
			objs:  []runtime.Object{newService("svc", map[string]string{"app": "x"}), plain, plainSlice("s1"), plainSlice("s2")},
			oneOf: [][]string{{"delete endpointslices s1", "delete endpointslices s2"}, {"delete endpointslices s2", "delete endpointslices s1"}}},
		{name: "a Service with an empty selector is not mirrored either",
			objs:   []runtime.Object{newService("svc", map[string]string{}), plain},
			writes: nil},
		{name: "no Service: the mirrored slices are deleted",
			objs:   []runtime.Object{plain, plainSlice("s1")},
			writes: []string{"delete endpointslices s1"}},
		{name: "no Endpoints: the mirrored slices are deleted",
			objs:   []runtime.Object{selectorless, plainSlice("s1")},
			writes: []string{"delete endpointslices s1"}},
		{name: "an Endpoints being deleted gets no new slice",
			objs: []runtime.Object{selectorless, func() *corev1.Endpoints {
				ep := plain.DeepCopy()
				ep.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				ep.Finalizers = []string{"x"}
				return ep
			}()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.opts, tt.objs...)
			key := tt.key
			if key == "" {
				key = "ns/svc"
			}
			err := f.Sync(key)
			if (err != nil) != tt.wantErr {
				t.Fatalf("sync: %v, want error %v", err, tt.wantErr)
			}
			got := f.writes()
			if tt.oneOf != nil {
				if !slices.ContainsFunc(tt.oneOf, func(w []string) bool { return reflect.DeepEqual(got, w) }) {
					t.Errorf("writes %q, want one of %q", got, tt.oneOf)
				}
			} else if !reflect.DeepEqual(got, tt.writes) {
				t.Errorf("writes %q, want %q", got, tt.writes)
			}
			var mine []*discoveryv1.EndpointSlice
			for _, s := range f.slices() {
				if s.Name != "other" {
					mine = append(mine, s)
				}
			}
			want := tt.slices
			if want == nil {
				want = []string{}
			}
			if got := describeAll(mine); !reflect.DeepEqual(got, want) {
				t.Errorf("slices %q, want %q", got, want)
			}
			if got := f.Events(); !reflect.DeepEqual(got, tt.events) {
				t.Errorf("events %q, want %q", got, tt.events)
			}
		})
	}
}

// TestSliceMetadata: a mirrored slice is owned by its Endpoints, carries its labels plus
// the service name and manager, and its annotations but the trigger time and kubectl's
// last applied configuration; its ports are the subset's.
func TestSliceMetadata(t *testing.T) {
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil,
		corev1.EndpointPort{Name: "grpc", Port: 9000, Protocol: corev1.ProtocolUDP, AppProtocol: ptrTo("h2c")}),
		epLabels("team", "a"),
		epAnnotations("note", "n", corev1.EndpointsLastChangeTriggerTime, "2026-01-01T00:00:00Z", corev1.LastAppliedConfigAnnotation, "{}"))
	f := newFixture(t, Options{}, newService("svc", nil), ep)
	f.MustSync("ns/svc")
	ss := f.slices()
	if len(ss) != 1 {
		t.Fatalf("%d slices, want 1", len(ss))
	}
	s := ss[0]
	wantLabels := map[string]string{"team": "a", discoveryv1.LabelServiceName: "svc", discoveryv1.LabelManagedBy: ControllerName}
	if !reflect.DeepEqual(s.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", s.Labels, wantLabels)
	}
	if want := map[string]string{"note": "n"}; !reflect.DeepEqual(s.Annotations, want) {
		t.Errorf("annotations %v, want %v", s.Annotations, want)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Endpoints", Name: "svc", UID: ep.UID,
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
	if !reflect.DeepEqual(s.OwnerReferences, wantOwner) {
		t.Errorf("owner references %+v, want %+v", s.OwnerReferences, wantOwner)
	}
	wantPorts := []discoveryv1.EndpointPort{{Name: ptrTo("grpc"), Port: ptrTo[int32](9000), Protocol: ptrTo(corev1.ProtocolUDP), AppProtocol: ptrTo("h2c")}}
	if !equality.Semantic.DeepEqual(s.Ports, wantPorts) {
		t.Errorf("ports %+v, want %+v", s.Ports, wantPorts)
	}
	if s.GenerateName != "svc-" || s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("generateName %q, address type %s; want svc- and IPv4", s.GenerateName, s.AddressType)
	}
	// Mirrored again from its own cache entry, nothing changes.
	f.Cache(s)
	f.Client.ClearActions()
	f.MustSync("ns/svc")
	if got := f.writes(); len(got) != 0 {
		t.Errorf("second sync wrote %q, want nothing", got)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestStaleCache: until the cache shows the controller's own writes (the tracker's
// generations), a sync writes nothing and fails, so the key is retried; once it does,
// the sync succeeds without writing.
func TestStaleCache(t *testing.T) {
	web := []corev1.EndpointPort{port("http", 80)}
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...))
	f := newFixture(t, Options{}, newService("svc", nil), ep)
	f.MustSync("ns/svc")
	f.Client.ClearActions()
	// The create is not cached yet.
	if err := f.Sync("ns/svc"); !errors.As(err, &staleCacheError{}) {
		t.Fatalf("sync before the create is cached: %v, want the stale cache error", err)
	}
	if got := f.writes(); len(got) != 0 {
		t.Errorf("stale sync wrote %q", got)
	}
	f.cacheStored()
	f.MustSync("ns/svc")
	// A hand edit: the cache holds generation 2 after the controller's own generation 1,
	// so it is not stale, and the edit is reverted (generation 3).
	s := f.slices()[0]
	edited := s.DeepCopy()
	edited.Generation = 2
	edited.Endpoints[0].Addresses = []string{"10.9.9.9"}
	if err := f.Client.Tracker().Update(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), edited, "ns"); err != nil {
		t.Fatal(err)
	}
	f.Cache(edited)
	f.MustSync("ns/svc")
	if got := f.writes(); !reflect.DeepEqual(got, []string{"update endpointslices " + s.Name}) {
		t.Errorf("writes %q, want the edit reverted", got)
	}
	// An older generation than the controller's own update is stale.
	f.Client.ClearActions()
	if err := f.Sync("ns/svc"); !errors.As(err, &staleCacheError{}) {
		t.Errorf("sync with generation 2 cached after writing 3: %v, want the stale cache error", err)
	}
	// So is a slice the controller deleted and still cached.
	f.cacheStored()
	f.MustSync("ns/svc")
	extra := s.DeepCopy()
	extra.Name, extra.UID = "extra", "uid-extra"
	if err := f.Client.Tracker().Add(extra); err != nil {
		t.Fatal(err)
	}
	f.Cache(extra)
	f.MustSync("ns/svc") // one of the two is deleted
	if err := f.Sync("ns/svc"); !errors.As(err, &staleCacheError{}) {
		t.Errorf("sync with a deleted slice still cached: %v, want the stale cache error", err)
	}
	f.cacheExactlyStored()
	f.MustSync("ns/svc")
	if n := len(f.slices()); n != 1 {
		t.Errorf("%d slices left, want 1", n)
	}
}

// TestCreateInTerminatingNamespace: a create refused because the namespace is being
// deleted ends the sync quietly, as upstream drops it.
func TestCreateInTerminatingNamespace(t *testing.T) {
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, port("http", 80)))
	f := newFixture(t, Options{}, newService("svc", nil), ep)
	f.Client.PrependReactor("create", "endpointslices", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, controllertest.TerminatingNamespaceError(discoveryv1.Resource("endpointslices"), "ns")
	})
	if err := f.Sync("ns/svc"); err != nil {
		t.Errorf("sync: %v, want none", err)
	}
}

// TestWriteErrors: a failed write fails the sync, naming the Endpoints, so the key is
// retried; a failed delete of one slice does not stop the deletes of the others.
func TestWriteErrors(t *testing.T) {
	web := []corev1.EndpointPort{port("http", 80)}
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...))
	boom := func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, errors.New("boom") }
	t.Run("create", func(t *testing.T) {
		f := newFixture(t, Options{}, newService("svc", nil), ep)
		f.Client.PrependReactor("create", "endpointslices", boom)
		if err := f.Sync("ns/svc"); err == nil || err.Error() != "failed to create EndpointSlice for Endpoints ns/svc: boom" {
			t.Errorf("sync: %v", err)
		}
	})
	t.Run("deletes", func(t *testing.T) {
		a := mirrored("a", ep, discoveryv1.AddressTypeIPv4, web, endpoint("10.0.0.1", true))
		b := mirrored("b", ep, discoveryv1.AddressTypeIPv4, web, endpoint("10.0.0.1", true))
		f := newFixture(t, Options{}, a, b)
		f.Client.PrependReactor("delete", "endpointslices", func(act clienttesting.Action) (bool, runtime.Object, error) {
			if act.(clienttesting.DeleteAction).GetName() == "a" {
				return boom(act)
			}
			return false, nil, nil
		})
		err := f.Sync("ns/svc")
		if err == nil || err.Error() != "error(s) deleting 1/2 EndpointSlices for ns/svc Endpoints, including: boom" {
			t.Errorf("sync: %v", err)
		}
		got := f.writes()
		slices.Sort(got)
		if !reflect.DeepEqual(got, []string{"delete endpointslices a", "delete endpointslices b"}) {
			t.Errorf("writes %q, want both deletes tried", got)
		}
	})
}

// TestOwnerUIDChange: the slices of an Endpoints deleted and created again under its name
// keep their names and get the new owner, and the tracker keeps following them.
func TestOwnerUIDChange(t *testing.T) {
	web := []corev1.EndpointPort{port("http", 80)}
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1")}, nil, web...))
	f := newFixture(t, Options{}, newService("svc", nil), ep)
	f.MustSync("ns/svc")
	f.cacheStored()
	again := ep.DeepCopy()
	again.UID = types.UID("uid-again")
	f.Cache(again)
	f.Client.ClearActions()
	f.MustSync("ns/svc")
	ss := f.slices()
	if len(ss) != 1 || ss[0].OwnerReferences[0].UID != again.UID {
		t.Fatalf("slices %+v, want one owned by %s", ss, again.UID)
	}
	if got := f.writes(); !reflect.DeepEqual(got, []string{"update endpointslices " + ss[0].Name}) {
		t.Errorf("writes %q", got)
	}
}

package endpoint

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const key = "ns/web"

var endpointsResource = corev1.SchemeGroupVersion.WithResource("endpoints").GroupResource()

func TestSyncWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cached []runtime.Object
		api    []runtime.Object
		// wantActions are the writes; wantSubsets, wantLabels and wantAnnotations what the
		// written Endpoints holds (not checked when nil).
		wantActions     []string
		wantSubsets     []corev1.EndpointSubset
		wantLabels      map[string]string
		wantAnnotations []string
	}{
		{name: "no Service: its Endpoints deleted", cached: objs(storedEndpoints("5")),
			api: objs(storedEndpoints("5")), wantActions: []string{"delete endpoints web"}},
		{name: "no Service and no Endpoints: a delete answered NotFound is done",
			wantActions: []string{"delete endpoints web"}},
		{name: "ExternalName: nothing",
			cached: objs(newService(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }), newPod("a", "10.1.0.1"))},
		{name: "no selector: nothing (someone else's Endpoints)",
			cached: objs(newService(func(s *corev1.Service) { s.Spec.Selector = nil }), newPod("a", "10.1.0.1"), storedEndpoints("5"))},
		{name: "created with ready pods sorted by IP, the Service's labels and managed-by",
			cached:      objs(newService(), newPod("b", "10.1.0.2"), newPod("a", "10.1.0.10")),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.10"), addr("b", "10.1.0.2")},
				Ports: []corev1.EndpointPort{httpPort()}}},
			wantLabels: map[string]string{"tier": "front", LabelManagedBy: ControllerName}},
		{name: "an empty Service gets an empty Endpoints", cached: objs(newService()),
			wantActions: []string{"create endpoints web"}, wantSubsets: []corev1.EndpointSubset{}},
		{name: "a not-ready pod is a not-ready address",
			cached:      objs(newService(), newPod("a", "10.1.0.1"), newPod("b", "10.1.0.2", notReady())),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")},
				NotReadyAddresses: []corev1.EndpointAddress{addr("b", "10.1.0.2")}, Ports: []corev1.EndpointPort{httpPort()}}}},
		{name: "publishNotReadyAddresses: not-ready and terminating pods are ready addresses",
			cached:      objs(newService(publishNotReady()), newPod("a", "10.1.0.1", terminating()), newPod("b", "10.1.0.2", notReady())),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1"), addr("b", "10.1.0.2")},
				Ports: []corev1.EndpointPort{httpPort()}}}},
		{name: "terminating, terminal and IP-less pods are left out",
			cached: objs(newService(), newPod("a", "10.1.0.1", terminating()),
				newPod("b", "10.1.0.2", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
				newPod("c", "", func(p *corev1.Pod) { p.Status.PodIPs = nil }), newPod("d", "10.1.0.4")),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("d", "10.1.0.4")},
				Ports: []corev1.EndpointPort{httpPort()}}}},
		{name: "a pod of another label is not selected",
			cached:      objs(newService(), newPod("a", "10.1.0.1", labelled(map[string]string{"app": "db"}))),
			wantActions: []string{"create endpoints web"}, wantSubsets: []corev1.EndpointSubset{}},
		{name: "hostname only when the pod's subdomain is the Service",
			cached: objs(newService(), newPod("a", "10.1.0.1", hostname("a-host", "web")),
				newPod("b", "10.1.0.2", hostname("b-host", "other"))),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{
				func() corev1.EndpointAddress { a := addr("a", "10.1.0.1"); a.Hostname = "a-host"; return a }(),
				addr("b", "10.1.0.2")}, Ports: []corev1.EndpointPort{httpPort()}}}},
		{name: "a named target port resolves per pod; a pod without it is left out of that port",
			cached: objs(newService(ports(
				corev1.ServicePort{Name: "web", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http"),
					AppProtocol: ptr.To("http")})),
				newPod("a", "10.1.0.1"),
				newPod("b", "10.1.0.2", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 9090 }),
				newPod("c", "10.1.0.3", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Name = "metrics" })),
			wantActions: []string{"create endpoints web"},
			wantSubsets: sortSubsets([]corev1.EndpointSubset{
				{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")},
					Ports: []corev1.EndpointPort{{Name: "web", Port: 8080, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")}}},
				{Addresses: []corev1.EndpointAddress{addr("b", "10.1.0.2")},
					Ports: []corev1.EndpointPort{{Name: "web", Port: 9090, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")}}},
			})},
		{name: "headless without ports: addresses without ports, the headless label",
			cached:      objs(newService(headless(), noPorts()), newPod("a", "10.1.0.1"), newPod("b", "10.1.0.2", notReady())),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")},
				NotReadyAddresses: []corev1.EndpointAddress{addr("b", "10.1.0.2")}}},
			wantLabels: map[string]string{"tier": "front", LabelManagedBy: ControllerName, corev1.IsHeadlessService: ""}},
		{name: "a Service with a cluster IP and no ports lists nothing",
			cached:      objs(newService(noPorts()), newPod("a", "10.1.0.1")),
			wantActions: []string{"create endpoints web"}, wantSubsets: []corev1.EndpointSubset{}},
		{name: "the pod IP of the Service's family: an IPv6 Service of a dual-stack pod",
			cached: objs(newService(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.IPFamilies = "fd00::1", []corev1.IPFamily{corev1.IPv6Protocol}
			}), newPod("a", "10.1.0.1", func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00:0::5"}) }),
				newPod("b", "10.1.0.2")),
			wantActions: []string{"create endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("a", "fd00::5")},
				Ports: []corev1.EndpointPort{httpPort()}}}},
		{name: "up to date: nothing written",
			cached: objs(newService(), newPod("a", "10.1.0.1"), storedEndpoints("5",
				corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")}, Ports: []corev1.EndpointPort{httpPort()}}))},
		{name: "a target's resourceVersion alone is no change",
			cached: objs(newService(), newPod("a", "10.1.0.1"), storedEndpoints("5",
				corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{func() corev1.EndpointAddress {
					a := addr("a", "10.1.0.1")
					a.TargetRef.ResourceVersion = "77"
					return a
				}()}, Ports: []corev1.EndpointPort{httpPort()}}))},
		{name: "stored packed differently but equal once repacked: nothing written",
			cached: objs(newService(), newPod("a", "10.1.0.1"), newPod("b", "10.1.0.2"), storedEndpoints("5",
				corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{addr("b", "10.1.0.2")}, Ports: []corev1.EndpointPort{httpPort()}},
				corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")}, Ports: []corev1.EndpointPort{httpPort()}}))},
		{name: "edited by hand: updated back, keeping its other annotations",
			cached: objs(newService(), newPod("a", "10.1.0.1"), func() *corev1.Endpoints {
				e := storedEndpoints("5", corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{addr("x", "10.9.9.9")}, Ports: []corev1.EndpointPort{httpPort()}})
				e.Annotations = map[string]string{"note": "kept"}
				return e
			}()),
			wantActions: []string{"update endpoints web"},
			wantSubsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")},
				Ports: []corev1.EndpointPort{httpPort()}}},
			wantAnnotations: []string{"note"}},
		{name: "a changed Service label is written; a label of someone else's removed",
			cached: objs(newService(func(s *corev1.Service) { s.Labels = map[string]string{"tier": "back"} }), func() *corev1.Endpoints {
				e := storedEndpoints("5")
				e.Labels["extra"] = "x"
				return e
			}()),
			wantActions: []string{"update endpoints web"},
			wantLabels:  map[string]string{"tier": "back", LabelManagedBy: ControllerName}},
		{name: "an Endpoints without the managed-by label is taken over",
			cached: objs(newService(), func() *corev1.Endpoints {
				e := storedEndpoints("5")
				delete(e.Labels, LabelManagedBy)
				return e
			}()),
			wantActions: []string{"update endpoints web"},
			wantLabels:  map[string]string{"tier": "front", LabelManagedBy: ControllerName}},
		{name: "a stale over-capacity annotation is removed",
			cached: objs(newService(), func() *corev1.Endpoints {
				e := storedEndpoints("5")
				e.Annotations = map[string]string{corev1.EndpointsOverCapacity: truncatedValue}
				return e
			}()),
			wantActions: []string{"update endpoints web"}, wantAnnotations: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := tc.api
			for _, o := range tc.cached { // the API server holds what the cache holds
				if e, ok := o.(*corev1.Endpoints); ok && api == nil {
					api = append(api, e.DeepCopy())
				}
			}
			f := newFixture(t, Options{}, tc.cached, api...)
			f.MustSync(key)
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Fatalf("actions %v, want %v", got, tc.wantActions)
			}
			if tc.wantSubsets == nil && tc.wantLabels == nil && tc.wantAnnotations == nil {
				return
			}
			ep := f.written()
			if tc.wantSubsets != nil && !apiequality.Semantic.DeepEqual(ep.Subsets, tc.wantSubsets) {
				t.Errorf("subsets\n%v\nwant\n%v", ep.Subsets, tc.wantSubsets)
			}
			if tc.wantLabels != nil && !apiequality.Semantic.DeepEqual(ep.Labels, tc.wantLabels) {
				t.Errorf("labels %v, want %v", ep.Labels, tc.wantLabels)
			}
			if tc.wantAnnotations != nil {
				var got []string
				for k := range ep.Annotations {
					if k != corev1.EndpointsLastChangeTriggerTime {
						got = append(got, k)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, tc.wantAnnotations) && !(len(got) == 0 && len(tc.wantAnnotations) == 0) {
					t.Errorf("annotations %v, want %v", got, tc.wantAnnotations)
				}
			}
		})
	}
}

func TestSyncTriggerTime(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	svc := newService(func(s *corev1.Service) { s.CreationTimestamp = created })
	f := newFixture(t, Options{}, objs(svc))
	f.MustSync(key)
	// A new Service: its creation is the trigger.
	if got := f.written().Annotations[corev1.EndpointsLastChangeTriggerTime]; got != "2026-01-02T03:04:05Z" {
		t.Fatalf("trigger time %q, want the Service's creation", got)
	}
}

func TestSyncStaleCache(t *testing.T) {
	svc := newService()
	old := storedEndpoints("5")
	f := newFixture(t, Options{}, objs(svc, newPod("a", "10.1.0.1"), old), old)
	f.Client.PrependReactor("update", "endpoints", func(a core.Action) (bool, runtime.Object, error) {
		e := a.(core.UpdateAction).GetObject().(*corev1.Endpoints).DeepCopy()
		e.ResourceVersion = "6"
		return true, e, nil
	})
	f.MustSync(key)
	if got := f.actions(); !slices.Equal(got, []string{"update endpoints web"}) {
		t.Fatalf("actions %v", got)
	}
	// The cache still holds version 5, which this controller replaced: the sync fails
	// until the cache has the update, and writes nothing meanwhile.
	f.Client.ClearActions()
	f.Cache(newPod("b", "10.1.0.2"))
	if err := f.Sync(key); err == nil {
		t.Fatal("sync against the replaced version succeeded")
	}
	if got := f.actions(); len(got) != 0 {
		t.Fatalf("writes against a stale cache: %v", got)
	}
	newer := storedEndpoints("6", corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{addr("a", "10.1.0.1")}, Ports: []corev1.EndpointPort{httpPort()}})
	newer.Annotations = map[string]string{}
	f.Cache(newer)
	f.MustSync(key)
	if got := f.actions(); !slices.Equal(got, []string{"update endpoints web"}) {
		t.Fatalf("actions after the cache caught up %v", got)
	}
}

func TestSyncNoopUpdateNotMarkedStale(t *testing.T) {
	// An update answered with the same resourceVersion (nothing changed on the server)
	// must not make the cache look stale.
	old := storedEndpoints("5")
	f := newFixture(t, Options{}, objs(newService(), newPod("a", "10.1.0.1"), old), old)
	f.Client.PrependReactor("update", "endpoints", func(a core.Action) (bool, runtime.Object, error) {
		return true, old.DeepCopy(), nil
	})
	f.MustSync(key)
	f.MustSync(key)
	if n := controllertest.Count(f.Client, "update", "endpoints"); n != 2 {
		t.Fatalf("%d updates, want 2", n)
	}
	if f.ctrl.stale.len() != 0 {
		t.Fatal("a no-op update was recorded as stale")
	}
}

func TestSyncWriteErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		existing   bool
		err        error
		wantErr    bool
		wantEvents []string
	}{
		{name: "a create in a terminating namespace is dropped, no event", err: controllertest.TerminatingNamespaceError(endpointsResource, "ns")},
		{name: "another Forbidden create: an event, retried", err: apierrors.NewForbidden(endpointsResource, "web", errors.New("no")),
			wantErr:    true,
			wantEvents: []string{`Warning FailedToCreateEndpoint Failed to create endpoint for service ns/web: endpoints "web" is forbidden: no`}},
		{name: "a failed update: an event, retried", existing: true, err: errors.New("boom"), wantErr: true,
			wantEvents: []string{"Warning FailedToUpdateEndpoint Failed to update endpoint ns/web: boom"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := objs(newService(), newPod("a", "10.1.0.1"))
			if tc.existing {
				cached = append(cached, storedEndpoints("5"))
			}
			f := newFixture(t, Options{}, cached)
			f.Client.PrependReactor("*", "endpoints", func(core.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			if err := f.Sync(key); (err != nil) != tc.wantErr {
				t.Fatalf("sync error %v, want error %v", err, tc.wantErr)
			}
			if got := f.Events(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events %q, want %q", got, tc.wantEvents)
			}
		})
	}
}

func TestSyncOverCapacity(t *testing.T) {
	// 1,005 ready and 10 not-ready pods: the ready ones are kept (1,000 of them, lowest
	// IPs first), the not-ready ones dropped.
	cached := objs(newService())
	for i := range 1015 {
		var opts []podOpt
		if i >= 1005 {
			opts = append(opts, notReady())
		}
		cached = append(cached, newPod(fmt.Sprintf("p%04d", i), fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256), opts...))
	}
	f := newFixture(t, Options{}, cached)
	f.MustSync(key)
	ep := f.written()
	if ep.Annotations[corev1.EndpointsOverCapacity] != truncatedValue {
		t.Fatalf("annotations %v, want over-capacity", ep.Annotations)
	}
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != maxCapacity || len(ep.Subsets[0].NotReadyAddresses) != 0 {
		t.Fatalf("subsets hold %d subsets", len(ep.Subsets))
	}
	if got := ep.Subsets[0].Addresses[0].IP; got != "10.1.0.0" {
		t.Errorf("first kept address %s", got)
	}
	// Stored truncated, it is written again on every sync, as upstream writes it.
	stored := ep.DeepCopy()
	stored.Namespace, stored.ResourceVersion = "ns", "9"
	f.Cache(stored)
	f.Client.ClearActions()
	f.MustSync(key)
	if got := f.actions(); !slices.Equal(got, []string{"update endpoints web"}) {
		t.Fatalf("actions on the next sync %v", got)
	}
}

func TestResync(t *testing.T) {
	leader := storedEndpoints("3")
	leader.Name = "lock"
	leader.Annotations = map[string]string{"control-plane.alpha.kubernetes.io/leader": "{}"}
	other := storedEndpoints("4")
	other.Namespace, other.Name = "other", "gone"
	f := newFixture(t, Options{}, objs(storedEndpoints("5"), leader, other, newService()))
	f.Queue.Keys()
	f.ctrl.Resync(controllersScope("ns"))
	if got := f.Queue.Keys(); !slices.Equal(got, []string{"ns/web"}) {
		t.Fatalf("queued %v, want ns/web only (not the leader-election lock, not another namespace's)", got)
	}
}

package resourcequota

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// Quotas of the replenishment tests, synced (their status.hard is what replenishment
// matches).
var (
	podQuota     = newQuota("pods", list("requests.cpu", "4"), synced(list("requests.cpu", "1")))
	countQuota   = newQuota("podcount", list("count/pods", "4"), synced(list("count/pods", "1")))
	svcQuota     = newQuota("svcs", list("services.loadbalancers", "1"), synced(list("services.loadbalancers", "1")))
	pvcQuota     = newQuota("pvcs", list("gold.storageclass.storage.k8s.io/requests.storage", "1Gi"), synced(list()))
	widgetQuota  = newQuota("widgets", list("count/widgets.example.com", "4"), synced(list()))
	cmQuota      = newQuota("cms", list("configmaps", "4"), synced(list()))
	claimQuota   = newQuota("claims", list("gpu.deviceclass.resource.k8s.io/devices", "1"), synced(list()))
	otherQuota   = newQuota("other", list("requests.cpu", "4"), synced(list()), inNamespace("other"))
	pendingQuota = newQuota("pending", list("pods", "4")) // status.hard not yet written
)

func TestReplenish(t *testing.T) {
	all := []runtime.Object{podQuota, countQuota, svcQuota, pvcQuota, claimQuota, widgetQuota, cmQuota, otherQuota, pendingQuota}
	for _, tc := range []struct {
		name string
		// event runs the event on the fixture's handlers.
		event func(f *fixture)
		want  []string // replenishment queue
	}{
		{name: "a pod deleted: the namespace's quotas of pod resources",
			event: func(f *fixture) { f.ctrl.replenishHandler(pods.GroupResource()).OnDelete(newPod("a")) },
			want:  []string{"ns/podcount", "ns/pods"}},
		{name: "a pod's tombstone",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(pods.GroupResource()).OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/a", Obj: newPod("a")})
			},
			want: []string{"ns/podcount", "ns/pods"}},
		{name: "a pod of another namespace",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(pods.GroupResource()).OnDelete(newPod("a", podNamespace("other")))
			},
			want: []string{"other/other"}},
		{name: "a pod became terminal",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(pods.GroupResource()).OnUpdate(newPod("a"), newPod("a", phase(corev1.PodSucceeded)))
			},
			want: []string{"ns/podcount", "ns/pods"}},
		{name: "a pod updated in a way quota does not see",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(pods.GroupResource()).OnUpdate(newPod("a"), newPod("a", priorityClass("x")))
			}},
		{name: "a pod added: admission charged it",
			event: func(f *fixture) { f.ctrl.replenishHandler(pods.GroupResource()).OnAdd(newPod("a"), false) }},
		{name: "a service deleted",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(svcs.GroupResource()).OnDelete(newService("s", corev1.ServiceTypeClusterIP))
			},
			want: []string{"ns/svcs"}},
		{name: "a service's type changed",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(svcs.GroupResource()).OnUpdate(newService("s", corev1.ServiceTypeLoadBalancer),
					newService("s", corev1.ServiceTypeClusterIP))
			},
			want: []string{"ns/svcs"}},
		{name: "a PVC resized",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(pvcs.GroupResource()).OnUpdate(newPVC("p", "2Gi"), newPVC("p", "1Gi"))
			},
			want: []string{"ns/pvcs"}},
		{name: "a PVC deleted",
			event: func(f *fixture) { f.ctrl.replenishHandler(pvcs.GroupResource()).OnDelete(newPVC("p", "2Gi")) },
			want:  []string{"ns/pvcs"}},
		{name: "a claim deleted",
			event: func(f *fixture) { f.ctrl.replenishHandler(claims.GroupResource()).OnDelete(newClaim("c")) },
			want:  []string{"ns/claims"}},
		{name: "a claim updated: never",
			event: func(f *fixture) {
				f.ctrl.replenishHandler(claims.GroupResource()).OnUpdate(newClaim("c"), newClaim("c", exactly("gpu", "ExactCount", 1)))
			}},
		{name: "a served resource's object deleted",
			event: func(f *fixture) {
				inf := newFakeInformer(true)
				f.served.Add(widgets, inf)
				f.queued()
				inf.delete(widget("ns", "w"))
			},
			want: []string{"ns/widgets"}},
		{name: "a legacy-named resource's object deleted",
			event: func(f *fixture) {
				inf := newFakeInformer(true)
				f.served.Add(configmaps, inf)
				f.queued()
				inf.delete(toolscache.DeletedFinalStateUnknown{Key: "ns/c", Obj: configMap("c")})
			},
			want: []string{"ns/cms"}},
		{name: "a removed resource's handler is gone",
			event: func(f *fixture) {
				inf := newFakeInformer(true)
				f.served.Add(widgets, inf)
				f.served.Remove(widgets)
				f.queued()
				inf.delete(widget("ns", "w"))
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil, all...)
			tc.event(f)
			got := f.queued()
			want := map[string][]string{}
			if tc.want != nil {
				want[ReplenishmentQueue] = tc.want
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("queued %v, want %v", got, want)
			}
		})
	}
}

func TestAddedRemoved(t *testing.T) {
	for _, tc := range []struct {
		name         string
		res          controllers.ServedResource
		wantHandlers int
		wantCounted  bool
	}{
		{name: "a namespaced resource", res: widgets, wantHandlers: 1, wantCounted: true},
		{name: "a legacy-named resource: its evaluator was always there", res: configmaps, wantHandlers: 1, wantCounted: true},
		{name: "cluster-scoped: ignored", res: controllers.ServedResource{GroupVersionResource: widgets.GroupVersionResource}},
		{name: "an ignored resource", res: served("", "events")},
		{name: "pods are read typed: their served informer is not", res: served("", "pods"), wantCounted: true},
		{name: "claims are read typed too", res: served("resource.k8s.io", "resourceclaims"), wantCounted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			inf := newFakeInformer(true)
			f.served.Add(tc.res, inf)
			if len(inf.handlers) != tc.wantHandlers {
				t.Errorf("%d handlers, want %d", len(inf.handlers), tc.wantHandlers)
			}
			if got := f.ctrl.registry.Get(tc.res.GroupResource()) != nil; got != tc.wantCounted {
				t.Errorf("evaluator %v, want %v", got, tc.wantCounted)
			}
			// Handed over again (another version): one handler still.
			f.served.Add(tc.res, inf)
			if len(inf.handlers) != tc.wantHandlers {
				t.Errorf("%d handlers after a second Added, want %d", len(inf.handlers), tc.wantHandlers)
			}
			f.served.Remove(tc.res)
			if len(inf.handlers) != 0 {
				t.Errorf("%d handlers after Removed, want none", len(inf.handlers))
			}
			_, legacy := legacyCountNames[tc.res.GroupResource()]
			wantAfter := legacy || slices.Contains(typedResources, tc.res.GroupResource())
			if got := f.ctrl.registry.Get(tc.res.GroupResource()) != nil; got != wantAfter {
				t.Errorf("evaluator after Removed %v, want %v", got, wantAfter)
			}
		})
	}
}

// A resource handed over queues, on the priority queue, the quotas that name one of its
// counts and have no usage of it yet.
func TestAddedQueuesMissingUsage(t *testing.T) {
	missing := newQuota("missing", list("count/widgets.example.com", "4"), synced(list()))
	has := newQuota("has", list("count/widgets.example.com", "4"), synced(list("count/widgets.example.com", "1")))
	unrelated := newQuota("unrelated", list("pods", "4"), synced(list()))
	f := newFixture(t, nil, missing, has, unrelated)
	f.served.Add(widgets, newFakeInformer(true))
	want := map[string][]string{PriorityQueue: {"ns/missing"}}
	if got := f.queued(); !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("queued %v, want %v", got, want)
	}
}

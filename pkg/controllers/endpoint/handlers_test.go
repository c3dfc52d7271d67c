package endpoint

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

func controllersScope(ns ...string) controllers.Scope { return controllers.Scope{Namespaces: ns} }

func TestPodChanged(t *testing.T) {
	db := newService(func(s *corev1.Service) { s.Name, s.Spec.Selector = "db", map[string]string{"app": "db"} })
	all := newService(func(s *corev1.Service) { s.Name, s.Spec.Selector = "all", map[string]string{} })
	pod := newPod("a", "10.1.0.1")
	bumped := func(p *corev1.Pod) *corev1.Pod { p = p.DeepCopy(); p.ResourceVersion = "2"; return p }
	relabelled := bumped(pod)
	relabelled.Labels = map[string]string{"app": "db"}
	for _, tc := range []struct {
		name     string
		old, cur any
		want     map[string]time.Duration
	}{
		{name: "an added pod queues the Services it matches", cur: pod,
			want: map[string]time.Duration{"ns/web": time.Second, "ns/all": time.Second}},
		{name: "a deleted pod, as a tombstone", old: toolscache.DeletedFinalStateUnknown{Key: "ns/a", Obj: pod},
			want: map[string]time.Duration{"ns/web": time.Second, "ns/all": time.Second}},
		{name: "a resync (same resourceVersion) queues nothing", old: pod, cur: pod},
		{name: "an annotation change queues nothing", old: pod,
			cur: func() *corev1.Pod { p := bumped(pod); p.Annotations = map[string]string{"a": "b"}; return p }()},
		{name: "a readiness flip queues the Services",
			old: pod, cur: func() *corev1.Pod { p := bumped(pod); notReady()(p); return p }(),
			want: map[string]time.Duration{"ns/web": time.Second, "ns/all": time.Second}},
		{name: "a relabel alone queues the Services it left and joined, not the one it stays in",
			old: pod, cur: relabelled, want: map[string]time.Duration{"ns/web": time.Second, "ns/db": time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{BatchPeriod: time.Second}, objs(newService(), db, all))
			f.ctrl.podChanged(tc.old, tc.cur)
			if got := f.Queue.Delayed(); !maps.Equal(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

func TestServiceDeletedForgets(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stillThere bool
		wantForget bool
	}{
		{name: "gone from the cache: forgotten", wantForget: true},
		{name: "back in the cache (the namespace came back): kept", stillThere: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := newService()
			var cached = objs()
			if tc.stillThere {
				cached = append(cached, svc)
			}
			f := newFixture(t, Options{}, cached)
			f.ctrl.stale.markStale(storedEndpoints("5"))
			f.ctrl.serviceDeleted(toolscache.DeletedFinalStateUnknown{Key: key, Obj: svc})
			if got := f.Queue.Keys(); len(got) != 1 || got[0] != key {
				t.Errorf("queued %v, want %s", got, key)
			}
			if forgot := f.ctrl.stale.len() == 0; forgot != tc.wantForget {
				t.Errorf("forgotten %v, want %v", forgot, tc.wantForget)
			}
		})
	}
}

func TestEndpointsDeletedQueuesService(t *testing.T) {
	f := newFixture(t, Options{}, objs(newService()))
	f.ctrl.serviceChanged(toolscache.DeletedFinalStateUnknown{Key: key, Obj: storedEndpoints("5")})
	if got := f.Queue.Keys(); len(got) != 1 || got[0] != key {
		t.Errorf("queued %v", got)
	}
}

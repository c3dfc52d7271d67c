package replicaset

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
)

func TestPodHandlers(t *testing.T) {
	log := klog.Background()
	rsA := newRS("a", 1, withMinReady(15))
	rsB := newRS("b", 1, func(rs *appsv1.ReplicaSet) {
		rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}
	})
	rsC := newRS("c", 1, func(rs *appsv1.ReplicaSet) {
		rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	})
	gone := newRS("gone", 1) // not in the cache
	pod := func(name string, owner *appsv1.ReplicaSet, opts ...podOpt) *corev1.Pod {
		return newPodOf(name, owner, opts...)
	}
	update := func(old, cur *corev1.Pod) func(c *Controller) {
		return func(c *Controller) { c.updatePod(log, old, cur) }
	}
	tests := []struct {
		name      string
		event     func(c *Controller)
		wantKeys  []string
		wantAfter map[string]time.Duration
		// expectations primed before the event, and pending after it
		primeAdds int
		primeDels []string
		wantAdds  int
		wantDels  int
	}{
		{name: "add of a controlled pod: its ReplicaSet, one creation observed",
			event:     func(c *Controller) { c.addPod(log, pod("p", rsA)) },
			primeAdds: 2, wantAdds: 1, wantKeys: []string{"ns/a"}},
		{name: "add of a pod of a ReplicaSet not cached: nothing",
			event: func(c *Controller) { c.addPod(log, pod("p", gone)) }},
		{name: "add of a pod controlled by something else: nothing",
			event: func(c *Controller) {
				p := pod("p", nil)
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "a", UID: "uid-a", Controller: ptr.To(true)}}
				c.addPod(log, p)
			}},
		{name: "add of an orphan: every selecting ReplicaSet",
			event: func(c *Controller) { c.addPod(log, pod("p", nil)) }, wantKeys: []string{"ns/a", "ns/b"}},
		{name: "add of a pod already being deleted is a deletion, not a creation",
			// A creation counted too would leave adds at -1.
			event:     func(c *Controller) { c.addPod(log, pod("p", rsA, deleting())) },
			primeDels: []string{"ns/p"}, wantKeys: []string{"ns/a"}},
		{name: "resync (same resourceVersion): nothing",
			event: update(pod("p", rsA), pod("p", rsA))},
		{name: "update of a controlled pod: its ReplicaSet",
			event: update(pod("p", rsA), pod("p", rsA, rv("2"))), wantKeys: []string{"ns/a"}},
		{name: "turned ready: requeued after minReadySeconds",
			event:    update(pod("p", rsA), pod("p", rsA, rv("2"), ready(t0))),
			wantKeys: []string{"ns/a"}, wantAfter: map[string]time.Duration{"ns/a": 15 * time.Second}},
		{name: "turned ready without minReadySeconds: no delayed requeue",
			event:    update(pod("p", rsB), pod("p", rsB, rv("2"), ready(t0))),
			wantKeys: []string{"ns/b"}},
		{name: "graceful deletion begins: a deletion observed",
			event:     update(pod("p", rsA), pod("p", rsA, rv("2"), deleting())),
			primeDels: []string{"ns/p", "ns/q"}, wantDels: 1, wantKeys: []string{"ns/a"}},
		{name: "controllerRef changed: old and new ReplicaSets",
			event: update(pod("p", rsA), pod("p", rsB, rv("2"))), wantKeys: []string{"ns/a", "ns/b"}},
		{name: "released: the old ReplicaSet and the ones selecting the orphan",
			event:    update(pod("p", rsA), pod("p", nil, rv("2"), labelled(map[string]string{"app": "db"}))),
			wantKeys: []string{"ns/a", "ns/c"}},
		{name: "orphan relabelled: the ReplicaSets now selecting it",
			event:    update(pod("p", nil), pod("p", nil, rv("2"), labelled(map[string]string{"app": "db"}))),
			wantKeys: []string{"ns/c"}},
		{name: "orphan status change: nothing",
			event: update(pod("p", nil), pod("p", nil, rv("2"), ready(t0)))},
		{name: "delete of a controlled pod: a deletion observed",
			event:     func(c *Controller) { c.deletePod(log, pod("p", rsA)) },
			primeDels: []string{"ns/p"}, wantKeys: []string{"ns/a"}},
		{name: "delete tombstone",
			event: func(c *Controller) {
				c.deletePod(log, toolscache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod("p", rsA)})
			},
			primeDels: []string{"ns/p"}, wantKeys: []string{"ns/a"}},
		{name: "delete of an orphan: nothing",
			event: func(c *Controller) { c.deletePod(log, pod("p", nil)) }},
		{name: "a tombstone of something else: nothing",
			event: func(c *Controller) { c.deletePod(log, toolscache.DeletedFinalStateUnknown{Key: "x", Obj: rsA}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, rsA, rsB, rsC)
			if tc.primeAdds > 0 {
				f.ctrl.expectations.ExpectCreations("ns/a", tc.primeAdds)
			}
			if len(tc.primeDels) > 0 {
				f.ctrl.expectations.ExpectDeletionsOf("ns/a", tc.primeDels)
			}
			tc.event(f.ctrl)
			if got := f.Queue.Keys(); fmt.Sprint(got) != fmt.Sprint(tc.wantKeys) {
				t.Errorf("queued %v, want %v", got, tc.wantKeys)
			}
			for k, want := range tc.wantAfter {
				if d, ok := f.Queue.After(k); !ok || d != want {
					t.Errorf("%s requeued after %v (%v), want %v", k, d, ok, want)
				}
			}
			if delayed := f.Queue.Delayed(); len(tc.wantAfter) == 0 && len(delayed) > 0 {
				t.Errorf("delayed requeues %v, want none", delayed)
			}
			if adds, dels := f.ctrl.expectations.Pending("ns/a"); adds != tc.wantAdds || dels != tc.wantDels {
				t.Errorf("pending = %d adds, %d deletes; want %d, %d", adds, dels, tc.wantAdds, tc.wantDels)
			}
		})
	}
}

func TestReplicaSetHandlers(t *testing.T) {
	a, b := newRS("a", 1), newRS("b", 1)
	elsewhere := newRS("x", 1)
	elsewhere.Namespace = "other"
	f := newFixture(t, a, b, elsewhere)
	f.ctrl.addRS(a)
	cur := a.DeepCopy()
	cur.Spec.Replicas = ptr.To[int32](4)
	f.ctrl.updateRS(a, cur)
	if got := f.Queue.Keys(); fmt.Sprint(got) != "[ns/a]" {
		t.Errorf("after add and update: %v, want [ns/a]", got)
	}
}

// TestDeletePodLog: a pod deleted without a graceful deletion first (no
// deletionTimestamp) is logged without a panic in the log line (a nil *metav1.Time used to
// be formatted).
func TestDeletePodLog(t *testing.T) {
	rs := newRS("a", 1)
	f := newFixture(t, rs)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{name: "deleted at once", pod: newPodOf("p", rs)},
		{name: "deleted gracefully", pod: newPodOf("q", rs, deleting())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(4), textlogger.Output(&buf)))
			f.ctrl.deletePod(log, tc.pod)
			if out := buf.String(); !strings.Contains(out, "pod deleted") || strings.Contains(out, "panic") {
				t.Errorf("log %q: want the pod deleted line, without a panic", out)
			}
		})
	}
}

package podgc

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSync: what one sync of a pod does, per upstream pass.
func TestSync(t *testing.T) {
	for _, tc := range []struct {
		name        string
		threshold   int
		cachedPods  []*corev1.Pod // the shard's pods; terminated ones are also in the whole-cluster view
		otherPods   []*corev1.Pod // terminated pods of other shards' namespaces (whole-cluster view only)
		nodes       []*corev1.Node
		api         []runtime.Object
		key         string
		wantActions []string
		wantReason  string // metric reason counted, "" for none
	}{
		{name: "a pod not cached: nothing", key: "ns/gone"},
		{name: "a running pod on an existing node: nothing", key: "ns/p",
			cachedPods: []*corev1.Pod{newPod("p", onNode("n1"))}, nodes: []*corev1.Node{newNode("n1")}},
		{name: "unscheduled and terminating: marked Failed and deleted", key: "ns/p",
			cachedPods:  []*corev1.Pod{newPod("p", terminating())},
			api:         []runtime.Object{newPod("p", terminating())},
			wantActions: []string{"patch pods/status p", "delete pods p"}, wantReason: reasonUnscheduled},
		{name: "unscheduled, terminating and already Succeeded: deleted without a patch", key: "ns/p",
			cachedPods:  []*corev1.Pod{newPod("p", terminating(), phase(corev1.PodSucceeded))},
			api:         []runtime.Object{newPod("p", terminating(), phase(corev1.PodSucceeded))},
			wantActions: []string{"delete pods p"}, wantReason: reasonUnscheduled},
		{name: "unscheduled, not terminating: nothing", key: "ns/p", cachedPods: []*corev1.Pod{newPod("p", phase(corev1.PodPending))}},
		{name: "terminating on a not ready, out-of-service node: deleted", key: "ns/p",
			cachedPods:  []*corev1.Pod{newPod("p", onNode("n1"), terminating())},
			nodes:       []*corev1.Node{newNode("n1", notReady(), outOfServiceTaint())},
			api:         []runtime.Object{newPod("p", onNode("n1"), terminating())},
			wantActions: []string{"patch pods/status p", "delete pods p"}, wantReason: reasonOutOfService},
		{name: "terminating on a ready out-of-service node: nothing", key: "ns/p",
			cachedPods: []*corev1.Pod{newPod("p", onNode("n1"), terminating())},
			nodes:      []*corev1.Node{newNode("n1", outOfServiceTaint())}},
		{name: "terminating on a not ready node without the taint: nothing", key: "ns/p",
			cachedPods: []*corev1.Pod{newPod("p", onNode("n1"), terminating())},
			nodes:      []*corev1.Node{newNode("n1", notReady())}},
		{name: "not terminating on an out-of-service node: nothing", key: "ns/p",
			cachedPods: []*corev1.Pod{newPod("p", onNode("n1"))},
			nodes:      []*corev1.Node{newNode("n1", notReady(), outOfServiceTaint())}},
		{name: "threshold: the oldest terminated pods above it, evicted first, are deleted", threshold: 2, key: "ns/evicted",
			cachedPods: []*corev1.Pod{
				newPod("old", phase(corev1.PodSucceeded), created(t0.Add(-3*time.Hour))),
				newPod("evicted", evictedPod(), created(t0.Add(-time.Minute))),
				newPod("new", phase(corev1.PodFailed), created(t0.Add(-time.Minute))),
			},
			otherPods:   []*corev1.Pod{newPod("other", inNamespace("elsewhere"), phase(corev1.PodSucceeded), created(t0.Add(-2*time.Hour)))},
			api:         []runtime.Object{newPod("evicted", evictedPod())},
			wantActions: []string{"delete pods evicted"}, wantReason: reasonTerminated},
		{name: "threshold: a pod below it is kept", threshold: 2, key: "ns/new",
			cachedPods: []*corev1.Pod{
				newPod("old", phase(corev1.PodSucceeded), created(t0.Add(-3*time.Hour))),
				newPod("evicted", evictedPod(), created(t0.Add(-time.Minute))),
				newPod("new", phase(corev1.PodFailed), created(t0.Add(-time.Minute))),
			},
			otherPods: []*corev1.Pod{newPod("other", inNamespace("elsewhere"), phase(corev1.PodSucceeded), created(t0.Add(-2*time.Hour)))}},
		{name: "threshold: another shard's pods count (the cluster's threshold)", threshold: 2, key: "ns/old",
			cachedPods: []*corev1.Pod{newPod("old", phase(corev1.PodSucceeded), created(t0.Add(-3*time.Hour)))},
			otherPods: []*corev1.Pod{
				newPod("a", inNamespace("elsewhere"), phase(corev1.PodSucceeded)),
				newPod("b", inNamespace("elsewhere"), phase(corev1.PodSucceeded)),
			},
			api:         []runtime.Object{newPod("old", phase(corev1.PodSucceeded))},
			wantActions: []string{"delete pods old"}, wantReason: reasonTerminated},
		{name: "threshold 0 is off", threshold: 0, key: "ns/old",
			cachedPods: []*corev1.Pod{newPod("old", phase(corev1.PodSucceeded))}},
		{name: "threshold: equal names and times ordered by name", threshold: 1, key: "ns/a",
			cachedPods: []*corev1.Pod{newPod("b", phase(corev1.PodSucceeded)), newPod("a", phase(corev1.PodSucceeded))},
			api:        []runtime.Object{newPod("a", phase(corev1.PodSucceeded))}, wantActions: []string{"delete pods a"}, wantReason: reasonTerminated},
		{name: "a pod already gone from the API server is not retried", key: "ns/p",
			cachedPods:  []*corev1.Pod{newPod("p", terminating())},
			wantActions: []string{"patch pods/status p"}, wantReason: reasonUnscheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{Threshold: tc.threshold}, tc.api...)
			for _, p := range tc.cachedPods {
				f.Cache(p)
			}
			for _, p := range tc.otherPods {
				f.Cache(p) // the pod informer of a fixture is the whole cluster's; only keys matter
			}
			for _, n := range tc.nodes {
				f.Cache(n)
			}
			if tc.threshold > 0 {
				f.ctrl.count(f.ctrl.log)
			}
			f.Client.ClearActions()
			if err := f.Sync(tc.key); err != nil {
				t.Fatalf("sync: %v", err)
			}
			if got := f.actions(); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions %v, want %v", got, tc.wantActions)
			}
			for _, reason := range []string{reasonTerminated, reasonOutOfService, reasonOrphaned, reasonUnscheduled} {
				want := 0.0
				if reason == tc.wantReason {
					want = 1
				}
				ns := "ns"
				if got := testutil.ToFloat64(f.ctrl.gcMetrics.Deleting.WithLabelValues(ns, reason)); got != want {
					t.Errorf("force_delete_pods_total{%s} = %v, want %v", reason, got, want)
				}
			}
		})
	}
}

// TestMarkFailed: the status patch of a pod not yet finished is upstream's: phase Failed,
// observedGeneration, the UID as a precondition, and the orphan's DisruptionTarget
// condition; the delete has a grace period of 0.
func TestOrphan(t *testing.T) {
	pod := newPod("p", onNode("gone"))
	f := newFixture(t, Options{}, pod)
	f.Cache(pod)
	// First sight: quarantined, queued for its end, no read.
	f.MustSync("ns/p")
	if got := f.actions(); len(got) != 0 {
		t.Fatalf("actions during the quarantine: %v", got)
	}
	if d, ok := f.Queue.After("ns/p"); !ok || d != defaultQuarantine {
		t.Fatalf("queued after %v (%v), want %v", d, ok, defaultQuarantine)
	}
	f.clock.Step(defaultQuarantine - time.Second)
	f.MustSync("ns/p")
	if d, _ := f.Queue.After("ns/p"); d != defaultQuarantine {
		t.Logf("still quarantined (shortest delay recorded %v)", d)
	}
	if got := f.actions(); len(got) != 0 {
		t.Fatalf("actions before the quarantine ended: %v", got)
	}
	f.clock.Step(time.Second)
	f.MustSync("ns/p")
	if got, want := f.actions(), []string{"get nodes gone", "patch pods/status p", "delete pods p"}; !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	var patch map[string]any
	for _, a := range f.Client.Actions() {
		if pa, ok := a.(core.PatchAction); ok {
			if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
				t.Fatal(err)
			}
		}
		if d, ok := a.(core.DeleteAction); ok {
			if g := d.GetDeleteOptions().GracePeriodSeconds; g == nil || *g != 0 {
				t.Errorf("delete with grace period %v, want 0", g)
			}
		}
	}
	status := patch["status"].(map[string]any)
	if status["phase"] != "Failed" || status["observedGeneration"] != 1.0 {
		t.Errorf("status patch %v", status)
	}
	conds := status["conditions"].([]any)
	c := conds[0].(map[string]any)
	if c["type"] != "DisruptionTarget" || c["status"] != "True" || c["reason"] != "DeletionByPodGC" ||
		c["message"] != "PodGC: node no longer exists" || c["observedGeneration"] != 1.0 {
		t.Errorf("condition %v", c)
	}
	if patch["metadata"].(map[string]any)["uid"] != "uid-p" {
		t.Errorf("patch without the UID precondition: %v", patch)
	}
	if got := testutil.ToFloat64(f.ctrl.gcMetrics.Deleting.WithLabelValues("ns", reasonOrphaned)); got != 1 {
		t.Errorf("orphaned deletes counted %v, want 1", got)
	}
}

// A node the cache lacks but the API server has is not an orphan's: nothing is deleted,
// and the quarantine starts again.
func TestOrphanNodeExists(t *testing.T) {
	pod := newPod("p", onNode("late"))
	f := newFixture(t, Options{}, pod, newNode("late"))
	f.Cache(pod)
	f.MustSync("ns/p")
	f.clock.Step(defaultQuarantine)
	f.MustSync("ns/p")
	if got, want := f.actions(), []string{"get nodes late"}; !slices.Equal(got, want) {
		t.Fatalf("actions %v, want %v", got, want)
	}
	if _, ok := f.ctrl.missing["late"]; ok {
		t.Error("the quarantine was kept after the node was found")
	}
}

// The verdict "node gone" serves the node's other pods for one period: one read, not one
// per pod.
func TestOrphanVerdictShared(t *testing.T) {
	a, b := newPod("a", onNode("gone")), newPod("b", onNode("gone"))
	f := newFixture(t, Options{}, a, b)
	f.Cache(a, b)
	f.MustSync("ns/a")
	f.MustSync("ns/b")
	f.clock.Step(defaultQuarantine)
	f.MustSync("ns/a")
	f.MustSync("ns/b")
	if n := 0; true {
		for _, s := range f.actions() {
			if s == "get nodes gone" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d reads of the node, want 1: %v", n, f.actions())
		}
	}
}

// The handlers and the pass queue what may need collecting: a deleted node's pods, the
// terminating pods of a node that turns out-of-service, the pass's candidates and the
// threshold's excess.
func TestQueueing(t *testing.T) {
	f := newFixture(t, Options{Threshold: 1})
	on := newPod("on", onNode("n1"))
	dying := newPod("dying", onNode("n2"), terminating())
	calm := newPod("calm", onNode("n2"))
	f.Cache(on, dying, calm, newNode("n1"), newNode("n2"))
	f.Queue.Keys()
	f.ctrl.nodeDeleted(newNode("n1"))
	if got := f.Queue.Keys(); !slices.Equal(got, []string{"ns/on"}) {
		t.Errorf("after n1's deletion: %v", got)
	}
	f.ctrl.nodeChanged(newNode("n2", notReady(), outOfServiceTaint()))
	if got := f.Queue.Keys(); !slices.Equal(got, []string{"ns/dying"}) {
		t.Errorf("after n2 turned out-of-service: %v", got)
	}
	f.Cache(newPod("done1", phase(corev1.PodSucceeded), created(t0.Add(-2*time.Hour))),
		newPod("done2", phase(corev1.PodSucceeded), created(t0.Add(-time.Hour))))
	f.ctrl.tick(f.TestContext())
	if got, want := f.Queue.Keys(), []string{"ns/done1", "ns/dying"}; !slices.Equal(got, want) {
		t.Errorf("the pass queued %v, want %v", got, want)
	}
}

package daemonset

import (
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func testLogger(t *testing.T) klog.Logger { return ktesting.NewLogger(t, ktesting.NewConfig()) }

func TestComputeCounts(t *testing.T) {
	ds := newDS("ds", withNodeSelector(map[string]string{"role": "edge"}), withMinReady(10))
	h := hashOf(ds)
	edge := nodeLabels(map[string]string{"role": "edge"})
	nodes := []*corev1.Node{newNode("a", edge), newNode("b", edge), newNode("c", edge), newNode("d", edge), newNode("e")}
	byNode := map[string][]*corev1.Pod{
		"a": {newPodOf("p-a", ds, "a", h)},                                         // ready, available, updated
		"b": {newPodOf("p-b", ds, "b", "old", readySince(t0.Add(-5*time.Second)))}, // ready, not yet available, old
		"c": {newPodOf("p-c", ds, "c", h, notReady())},                             // scheduled only
		"e": {newPodOf("p-e", ds, "e", h)},                                         // misscheduled
		// d: none
	}
	got := computeCounts(testLogger(t), ds, nodes, byNode, h, t0)
	want := counts{desired: 4, current: 3, misscheduled: 1, ready: 2, updated: 2, available: 1, unavailable: 3}
	if got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
}

// TestStatusRequeueAndNoop: an unchanged status is not written; a ready pod not yet
// available queues the DaemonSet after minReadySeconds.
func TestStatusRequeueAndNoop(t *testing.T) {
	ds := newDS("ds", withMinReady(10))
	h := hashOf(ds)
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
		NumberReady: 1, UpdatedNumberScheduled: 1, NumberAvailable: 0, NumberUnavailable: 1}
	f := newFixture(t, ds, currentRevision(t, ds, 1), newNode("a"), newPodOf("p-a", ds, "a", h, readySince(t0.Add(-5*time.Second))))
	f.MustSync("ns/ds")
	if _, ok := f.lastStatus(); ok {
		t.Error("an unchanged status was written")
	}
	if d, ok := f.Queue.After("ns/ds"); !ok || d != 10*time.Second {
		t.Errorf("requeued after %v (%v), want 10s", d, ok)
	}
}

package daemonset

import (
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRollingUpdate: one sync of a DaemonSet whose template changed from img:1 to img:2
// on four nodes.
func TestRollingUpdate(t *testing.T) {
	v1 := newDS("ds")
	oldHash := hashOf(v1)
	tests := []struct {
		name       string
		ds         *appsv1.DaemonSet
		pods       func(ds *appsv1.DaemonSet) []*corev1.Pod
		wantCreate []string
		wantDelete []string
	}{
		{name: "maxUnavailable 1: one old pod deleted",
			ds: newDS("ds", withImage("img:2")),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("p-b", ds, "b", oldHash),
					newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			wantDelete: []string{"p-a"}},
		{name: "maxUnavailable 2: two old pods deleted",
			ds: newDS("ds", withImage("img:2"), withSurge(intstr.FromInt32(0), intstr.FromInt32(2))),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("p-b", ds, "b", oldHash),
					newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			wantDelete: []string{"p-a", "p-b"}},
		{name: "maxUnavailable 1 used up by a new pod not ready yet: nothing deleted",
			ds: newDS("ds", withImage("img:2")),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", hashOf(ds), notReady()), newPodOf("p-b", ds, "b", oldHash),
					newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			}},
		{name: "an old pod that is not available is replaced whatever maxUnavailable",
			ds: newDS("ds", withImage("img:2")),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", hashOf(ds), notReady()), newPodOf("p-b", ds, "b", oldHash, notReady()),
					newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			wantDelete: []string{"p-b"}},
		{name: "minReadySeconds: a new pod ready for less is not available",
			ds: newDS("ds", withImage("img:2"), withMinReady(30)),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", hashOf(ds), readySince(t0.Add(-10*time.Second))),
					newPodOf("p-b", ds, "b", oldHash), newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			}},
		{name: "maxSurge 2: new pods beside two old ones",
			ds: newDS("ds", withImage("img:2"), withSurge(intstr.FromInt32(2), intstr.FromInt32(0))),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("p-b", ds, "b", oldHash),
					newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			wantCreate: []string{"a", "b"}},
		{name: "maxSurge 25% of 4 is 1; a surging node not yet available uses it",
			ds: newDS("ds", withImage("img:2"), withSurge(intstr.FromString("25%"), intstr.FromInt32(0))),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("n-a", ds, "a", hashOf(ds), notReady()),
					newPodOf("p-b", ds, "b", oldHash), newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			}},
		{name: "maxSurge: the old pod goes once the new one is available, and the next node surges",
			ds: newDS("ds", withImage("img:2"), withSurge(intstr.FromInt32(1), intstr.FromInt32(0))),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("n-a", ds, "a", hashOf(ds)),
					newPodOf("p-b", ds, "b", oldHash), newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			// manage deletes p-a (its node's new pod is available); the rolling update
			// waits for that deletion to be observed.
			wantDelete: []string{"p-a"}},
		{name: "maxSurge: an old pod not available is replaced beyond the surge",
			ds: newDS("ds", withImage("img:2"), withSurge(intstr.FromInt32(1), intstr.FromInt32(0))),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("n-a", ds, "a", hashOf(ds), notReady()),
					newPodOf("p-b", ds, "b", oldHash, notReady()), newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			wantCreate: []string{"b"}},
		{name: "OnDelete: old pods stay",
			ds: newDS("ds", withImage("img:2"), onDelete()),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-a", ds, "a", oldHash), newPodOf("p-b", ds, "b", oldHash),
					newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			}},
		{name: "OnDelete: a deleted old pod is replaced by a new one",
			ds: newDS("ds", withImage("img:2"), onDelete()),
			pods: func(ds *appsv1.DaemonSet) []*corev1.Pod {
				return []*corev1.Pod{newPodOf("p-b", ds, "b", oldHash), newPodOf("p-c", ds, "c", oldHash), newPodOf("p-d", ds, "d", oldHash)}
			},
			wantCreate: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os := []runtime.Object{tt.ds, currentRevision(t, v1, 1), currentRevision(t, tt.ds, 2),
				newNode("a"), newNode("b"), newNode("c"), newNode("d")}
			for _, p := range tt.pods(tt.ds) {
				os = append(os, p)
			}
			f := newFixture(t, os...)
			f.MustSync("ns/ds")
			if got := f.createdNodes(); !equalSets(got, tt.wantCreate) {
				t.Errorf("created on %v, want %v", got, tt.wantCreate)
			}
			if got := f.deletedPods(); !equalSets(got, tt.wantDelete) {
				t.Errorf("deleted %v, want %v", got, tt.wantDelete)
			}
			for _, p := range f.createdPods() {
				if p.Labels[hashLabel] != hashOf(tt.ds) {
					t.Errorf("created pod with hash %q, want the new %q", p.Labels[hashLabel], hashOf(tt.ds))
				}
			}
		})
	}
}

func TestCounts(t *testing.T) {
	tests := []struct {
		name                             string
		ds                               *appsv1.DaemonSet
		nodes                            int
		wantSurge, wantUnav, wantDesired int
	}{
		{name: "ints", ds: newDS("ds", withSurge(intstr.FromInt32(2), intstr.FromInt32(0))), nodes: 10, wantSurge: 2, wantDesired: 10},
		{name: "percentages round up", ds: newDS("ds", withSurge(intstr.FromString("0%"), intstr.FromString("15%"))), nodes: 10, wantUnav: 2, wantDesired: 10},
		{name: "both zero: one unavailable", ds: newDS("ds", withSurge(intstr.FromString("0%"), intstr.FromString("0%"))), nodes: 3, wantUnav: 1, wantDesired: 3},
		{name: "OnDelete", ds: newDS("ds", onDelete()), nodes: 3, wantUnav: 1, wantDesired: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var nodes []*corev1.Node
			for i := range tt.nodes {
				nodes = append(nodes, newNode(string(rune('a'+i))))
			}
			byNode := map[string][]*corev1.Pod{}
			s, u, d, err := updatedDesiredNodeCounts(testLogger(t), tt.ds, nodes, byNode, placementOf(tt.ds))
			if err != nil || s != tt.wantSurge || u != tt.wantUnav || d != tt.wantDesired {
				t.Errorf("surge %d, unavailable %d, desired %d, %v; want %d, %d, %d", s, u, d, err, tt.wantSurge, tt.wantUnav, tt.wantDesired)
			}
			if len(byNode) != tt.nodes {
				t.Errorf("byNode has %d nodes, want every eligible one", len(byNode))
			}
		})
	}
	if !reflect.DeepEqual(allowsSurge(newDS("ds", withSurge(intstr.FromInt32(1), intstr.FromInt32(0)))), true) ||
		allowsSurge(newDS("ds")) {
		t.Error("allowsSurge")
	}
}

package daemonset

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// TestNodeEvents: a node's arrival, change or removal queues the shard's DaemonSets it
// may affect, as upstream's node update worker decides.
func TestNodeEvents(t *testing.T) {
	edgeDS := newDS("edge", withNodeSelector(map[string]string{"role": "edge"}), func(ds *appsv1.DaemonSet) {
		ds.Spec.Selector.MatchLabels = map[string]string{"app": "edge"}
		ds.Spec.Template.Labels = map[string]string{"app": "edge"}
	})
	allDS := newDS("all")
	edge := newNode("n", nodeLabels(map[string]string{"role": "edge"}))
	plain := newNode("n")
	log := klog.Background()
	tests := []struct {
		name  string
		pods  []*corev1.Pod
		event func(c *Controller)
		want  []string
	}{
		{name: "an edge node arrives: both need a pod", event: func(c *Controller) { c.addNode(log, edge) },
			want: []string{"ns/all", "ns/edge"}},
		{name: "a plain node arrives: one needs a pod", event: func(c *Controller) { c.addNode(log, plain) },
			want: []string{"ns/all"}},
		{name: "a node that runs every pod it should changes nothing", pods: []*corev1.Pod{newPodOf("p", allDS, "n", "h")},
			event: func(c *Controller) { c.addNode(log, plain) }},
		{name: "a status-only update is ignored", event: func(c *Controller) {
			cur := plain.DeepCopy()
			cur.Status.Phase = corev1.NodeRunning
			c.updateNode(log, plain, cur)
		}},
		{name: "the label goes: the edge pod must go", pods: []*corev1.Pod{newPodOf("p", edgeDS, "n", "h"), newPodOf("q", allDS, "n", "h")},
			event: func(c *Controller) { c.updateNode(log, edge, plain) }, want: []string{"ns/edge"}},
		{name: "a NoExecute taint: every pod must go", pods: []*corev1.Pod{newPodOf("p", edgeDS, "n", "h"), newPodOf("q", allDS, "n", "h")},
			event: func(c *Controller) {
				c.updateNode(log, edge, newNode("n", nodeLabels(map[string]string{"role": "edge"}), taint("x", corev1.TaintEffectNoExecute)))
			},
			want: []string{"ns/all", "ns/edge"}},
		{name: "a node removed: the DaemonSets that counted it", pods: []*corev1.Pod{newPodOf("p", edgeDS, "n", "h")},
			event: func(c *Controller) { c.deleteNode(log, plain) }, want: []string{"ns/all", "ns/edge"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, edgeDS, allDS)
			for _, p := range tt.pods {
				f.Cache(p)
			}
			tt.event(f.ctrl)
			if got := f.Queue.Keys(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPodEvents: creations and deletions of a DaemonSet's pods are observed for its
// expectations, and orphans queue the DaemonSets selecting them.
func TestPodEvents(t *testing.T) {
	ds := newDS("ds")
	f := newFixture(t, ds)
	log := klog.Background()
	f.ctrl.expectations.Expect("ns/ds", 1, []string{"ns/old"})
	f.ctrl.addPod(log, newPodOf("new", ds, "a", "h"))
	f.ctrl.deletePodEvent(log, newPodOf("old", ds, "b", "h"))
	if !f.ctrl.expectations.Satisfied("ns/ds") {
		t.Error("expectations not satisfied after the creation and deletion were observed")
	}
	if got := f.Queue.Keys(); !reflect.DeepEqual(got, []string{"ns/ds"}) {
		t.Errorf("queued %v", got)
	}
	f.ctrl.addPod(log, newPodOf("orphan", nil, "a", "h"))
	if got := f.Queue.Keys(); !reflect.DeepEqual(got, []string{"ns/ds"}) {
		t.Errorf("an orphan queued %v, want the DaemonSet selecting it", got)
	}
}

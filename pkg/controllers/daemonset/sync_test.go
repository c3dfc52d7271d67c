package daemonset

import (
	"errors"
	"reflect"
	"sort"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
)

// TestNewDaemonSet: a new DaemonSet gets its first revision and one pod per eligible
// node, pinned to it as upstream pins it, with upstream's labels and tolerations.
func TestNewDaemonSet(t *testing.T) {
	ds := newDS("ds", withNodeSelector(map[string]string{"role": "edge"}))
	hash := hashOf(ds)
	f := newFixture(t, ds,
		newNode("a", nodeLabels(map[string]string{"role": "edge"})),
		newNode("b", nodeLabels(map[string]string{"role": "edge"})),
		newNode("c"))
	f.MustSync("ns/ds")

	if got := f.createdNodes(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("pods created on %v, want [a b]", got)
	}
	pod := f.createdPods()[0]
	if pod.GenerateName != "ds-" || pod.Spec.NodeName != "" {
		t.Errorf("generateName %q, nodeName %q; want ds- and none (the scheduler binds it)", pod.GenerateName, pod.Spec.NodeName)
	}
	wantLabels := map[string]string{"app": "agent", hashLabel: hash, templateGenerationLabel: "1"}
	if !reflect.DeepEqual(pod.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", pod.Labels, wantLabels)
	}
	if !metav1.IsControlledBy(pod, ds) || !*pod.OwnerReferences[0].BlockOwnerDeletion {
		t.Errorf("owner references %+v", pod.OwnerReferences)
	}
	if !reflect.DeepEqual(pod.Spec.Tolerations, defaultTolerations) {
		t.Errorf("tolerations %+v, want the defaults", pod.Spec.Tolerations)
	}
	if !reflect.DeepEqual(pod.Spec.NodeSelector, map[string]string{"role": "edge"}) {
		t.Errorf("node selector %v not kept", pod.Spec.NodeSelector)
	}

	revs := f.revisions()
	if len(revs) != 1 {
		t.Fatalf("%d revisions, want 1", len(revs))
	}
	rev := revs[0]
	if rev.Name != "ds-"+hash || rev.Revision != 1 || rev.Labels[hashLabel] != hash || rev.Labels["app"] != "agent" ||
		!metav1.IsControlledBy(rev, ds) || rev.Annotations[appsv1.DeprecatedTemplateGeneration] != "1" {
		t.Errorf("revision %s #%d labels %v annotations %v", rev.Name, rev.Revision, rev.Labels, rev.Annotations)
	}
	if ok, _ := matches(ds, rev); !ok {
		t.Errorf("revision data %s does not match the template", rev.Data.Raw)
	}
	if got := f.EventReasons(); !reflect.DeepEqual(got, map[string]int{"Normal SuccessfulCreate": 2}) {
		t.Errorf("events %v", got)
	}
	st, ok := f.lastStatus()
	want := appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, NumberUnavailable: 2}
	if !ok || !reflect.DeepEqual(st, want) {
		t.Errorf("status %+v, want %+v", st, want)
	}
	if adds, _ := f.ctrl.expectations.Pending("ns/ds"); adds != 2 {
		t.Errorf("pending creations %d, want 2", adds)
	}

	// Until both creations are observed nothing is created again, and the generation is
	// not observed.
	f.Client.ClearActions()
	ds2 := ds.DeepCopy()
	ds2.Generation = 2
	f.Cache(ds2)
	f.MustSync("ns/ds")
	if n := len(f.createdPods()); n != 0 {
		t.Errorf("%d pods created while creations are unobserved", n)
	}
	if st, _ := f.lastStatus(); st.ObservedGeneration != 0 {
		t.Errorf("observedGeneration %d written while creations are unobserved", st.ObservedGeneration)
	}
}

// revisions returns the ControllerRevisions the fake API server holds.
func (f *fixture) revisions() []*appsv1.ControllerRevision {
	revs, err := f.Client.AppsV1().ControllerRevisions("ns").List(f.TestContext(), metav1.ListOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	out := make([]*appsv1.ControllerRevision, len(revs.Items))
	for i := range revs.Items {
		out[i] = &revs.Items[i]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// currentRevision returns ds's revision of its current template, for seeding caches.
func currentRevision(t *testing.T, ds *appsv1.DaemonSet, number int64) *appsv1.ControllerRevision {
	t.Helper()
	data, err := revisionData(ds)
	if err != nil {
		t.Fatal(err)
	}
	h := hashOf(ds)
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + h, Namespace: ds.Namespace, ResourceVersion: "1",
			UID:    types.UID("uid-rev-" + ds.Name + "-" + ds.Spec.Template.Spec.Containers[0].Image),
			Labels: map[string]string{"app": "agent", hashLabel: h}, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)}},
		Data: runtime.RawExtension{Raw: data}, Revision: number,
	}
}

func TestManage(t *testing.T) {
	ds := newDS("ds", withNodeSelector(map[string]string{"role": "edge"}))
	h := hashOf(ds)
	edge := nodeLabels(map[string]string{"role": "edge"})
	tests := []struct {
		name        string
		nodes       []*corev1.Node
		pods        []*corev1.Pod
		wantCreate  []string
		wantDelete  []string
		wantEvents  map[string]int
		wantStatus  appsv1.DaemonSetStatus
		wantRequeue bool
	}{
		{name: "every eligible node runs its pod: nothing to do",
			nodes: []*corev1.Node{newNode("a", edge), newNode("b", edge)},
			pods:  []*corev1.Pod{newPodOf("p-a", ds, "a", h), newPodOf("p-b", ds, "b", h)},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
				NumberReady: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}},
		{name: "a pod on a node that no longer matches is deleted (misscheduled)",
			nodes:      []*corev1.Node{newNode("a", edge), newNode("b")},
			pods:       []*corev1.Pod{newPodOf("p-a", ds, "a", h), newPodOf("p-b", ds, "b", h)},
			wantDelete: []string{"p-b"}, wantEvents: map[string]int{"Normal SuccessfulDelete": 1},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				NumberMisscheduled: 1, NumberReady: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}},
		{name: "an untolerated NoSchedule taint keeps a running pod, NoExecute evicts it",
			nodes:      []*corev1.Node{newNode("a", edge, taint("x", corev1.TaintEffectNoSchedule)), newNode("b", edge, taint("y", corev1.TaintEffectNoExecute))},
			pods:       []*corev1.Pod{newPodOf("p-a", ds, "a", h), newPodOf("p-b", ds, "b", h)},
			wantDelete: []string{"p-b"}, wantEvents: map[string]int{"Normal SuccessfulDelete": 1},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, NumberMisscheduled: 2}},
		{name: "surplus pods on a node: the oldest stays",
			nodes: []*corev1.Node{newNode("a", edge)},
			pods: []*corev1.Pod{newPodOf("p-new", ds, "a", h, created(t0.Add(-time.Minute))),
				newPodOf("p-old", ds, "a", h, created(t0.Add(-2*time.Minute)))},
			wantDelete: []string{"p-new"}, wantEvents: map[string]int{"Normal SuccessfulDelete": 1},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				NumberReady: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}},
		{name: "a failed pod is deleted with FailedDaemonPod",
			nodes:      []*corev1.Node{newNode("a", edge)},
			pods:       []*corev1.Pod{newPodOf("p-a", ds, "a", h, phase(corev1.PodFailed), notReady())},
			wantDelete: []string{"p-a"}, wantEvents: map[string]int{"Warning FailedDaemonPod": 1, "Normal SuccessfulDelete": 1},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				UpdatedNumberScheduled: 1, NumberUnavailable: 1}},
		{name: "a succeeded pod is deleted with SucceededDaemonPod",
			nodes:      []*corev1.Node{newNode("a", edge)},
			pods:       []*corev1.Pod{newPodOf("p-a", ds, "a", h, phase(corev1.PodSucceeded), notReady())},
			wantDelete: []string{"p-a"}, wantEvents: map[string]int{"Normal SucceededDaemonPod": 1, "Normal SuccessfulDelete": 1},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				UpdatedNumberScheduled: 1, NumberUnavailable: 1}},
		{name: "a pod being deleted counts as scheduled and is not replaced yet",
			nodes: []*corev1.Node{newNode("a", edge)},
			pods:  []*corev1.Pod{newPodOf("p-a", ds, "a", h, deleting())},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				NumberReady: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}},
		{name: "an unbound pod pinned to a node that is gone is deleted",
			nodes: []*corev1.Node{newNode("a", edge)},
			pods: []*corev1.Pod{newPodOf("p-a", ds, "a", h), newPodOf("p-gone", ds, "", h, func(p *corev1.Pod) {
				p.Spec.Affinity = pinToNode(nil, "gone")
			})},
			wantDelete: []string{"p-gone"}, wantEvents: map[string]int{"Normal SuccessfulDelete": 1},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				NumberReady: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}},
		{name: "an orphan pod the selector matches is adopted, not duplicated",
			nodes: []*corev1.Node{newNode("a", edge)},
			pods:  []*corev1.Pod{newPodOf("p-a", nil, "a", h)},
			wantStatus: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
				NumberReady: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os := []runtime.Object{ds, currentRevision(t, ds, 1)}
			for _, n := range tt.nodes {
				os = append(os, n)
			}
			for _, p := range tt.pods {
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
			if tt.wantEvents == nil {
				tt.wantEvents = map[string]int{}
			}
			if got := f.EventReasons(); !reflect.DeepEqual(got, tt.wantEvents) {
				t.Errorf("events %v, want %v", got, tt.wantEvents)
			}
			st, _ := f.lastStatus()
			if !reflect.DeepEqual(st, tt.wantStatus) {
				t.Errorf("status %+v\nwant %+v", st, tt.wantStatus)
			}
		})
	}
}

func equalSets(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return reflect.DeepEqual(a, b)
}

// TestFailedPodBackoff: a node whose daemon pod keeps failing gets its failed pod deleted
// once, then not again until the backoff (1 s, doubling) has passed; the DaemonSet is
// queued for then.
func TestFailedPodBackoff(t *testing.T) {
	ds := newDS("ds")
	h := hashOf(ds)
	failed := newPodOf("p1", ds, "a", h, phase(corev1.PodFailed), notReady())
	f := newFixture(t, ds, currentRevision(t, ds, 1), newNode("a"), failed)
	f.MustSync("ns/ds")
	if got := f.deletedPods(); !reflect.DeepEqual(got, []string{"p1"}) {
		t.Fatalf("deleted %v, want [p1]", got)
	}
	// The deletion observed, the replacement created and failed again at once.
	f.Uncache(failed)
	f.ctrl.expectations.Forget("ns/ds")
	f.Cache(newPodOf("p2", ds, "a", h, phase(corev1.PodFailed), notReady()))
	f.Client.ClearActions()
	f.Events()
	f.clock.Step(500 * time.Millisecond)
	f.MustSync("ns/ds")
	if got := f.deletedPods(); len(got) != 0 {
		t.Errorf("deleted %v within the backoff", got)
	}
	if d, ok := f.Queue.After("ns/ds"); !ok || d != time.Second {
		t.Errorf("requeued after %v (%v), want 1s", d, ok)
	}
	f.clock.Step(time.Second)
	f.MustSync("ns/ds")
	if got := f.deletedPods(); !reflect.DeepEqual(got, []string{"p2"}) {
		t.Errorf("deleted %v after the backoff, want [p2]", got)
	}
}

// TestCreateFailures: a failing create is reported as upstream reports it and the
// remaining creates are skipped (slow start); expectations do not wait for them.
func TestCreateFailures(t *testing.T) {
	ds := newDS("ds")
	f := newFixture(t, ds, currentRevision(t, ds, 1), newNode("a"), newNode("b"), newNode("c"), newNode("d"))
	quota := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("exceeded quota"))
	f.Client.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, quota
	})
	if err := f.Sync("ns/ds"); err == nil {
		t.Fatal("sync succeeded with every create failing")
	}
	if n := controllerCount(f, "create", "pods"); n != 1 {
		t.Errorf("%d creates attempted, want 1 (slow start stops after the first batch)", n)
	}
	if got := f.EventReasons(); got["Warning FailedCreate"] != 1 {
		t.Errorf("events %v, want one FailedCreate", got)
	}
	if !f.ctrl.expectations.Satisfied("ns/ds") {
		t.Error("expectations wait for creates that failed or were skipped")
	}
	// The status is still written.
	if st, ok := f.lastStatus(); !ok || st.DesiredNumberScheduled != 4 {
		t.Errorf("status %+v (%v)", st, ok)
	}
}

func controllerCount(f *fixture, verb, resource string) int {
	n := 0
	for _, a := range f.Client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// TestDeletedDaemonSet: a DaemonSet being deleted is left to the garbage collector, one
// gone forgets its expectations.
func TestDeletedDaemonSet(t *testing.T) {
	ds := newDS("ds", func(ds *appsv1.DaemonSet) { ds.DeletionTimestamp = &metav1.Time{Time: t0} })
	f := newFixture(t, ds, newNode("a"))
	f.MustSync("ns/ds")
	if got := f.actions(); len(got) != 0 {
		t.Errorf("writes for a DaemonSet being deleted: %v", got)
	}
	f.ctrl.expectations.Expect("ns/gone", 3, nil)
	f.MustSync("ns/gone")
	if !f.ctrl.expectations.Satisfied("ns/gone") {
		t.Error("a DaemonSet gone keeps its expectations")
	}
}

// TestSelectingAll: an empty selector is refused with upstream's event.
func TestSelectingAll(t *testing.T) {
	ds := newDS("ds", func(ds *appsv1.DaemonSet) { ds.Spec.Selector = &metav1.LabelSelector{} })
	f := newFixture(t, ds, newNode("a"))
	f.MustSync("ns/ds")
	if got := f.Events(); len(got) != 1 || got[0] != "Warning SelectingAll This daemon set is selecting all pods. A non-empty selector is required." {
		t.Errorf("events %v", got)
	}
	if got := f.actions(); len(got) != 0 {
		t.Errorf("writes %v", got)
	}
}

package replicaset

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose informer caches the test fills by
// hand (sample-controller style): the informers never run, so "informer lag" is simply
// not adding an object to an indexer.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	ctrl     *Controller
	queue    *controllertest.Queue
	recorder *record.FakeRecorder
	clock    *clocktesting.FakeClock
	created  atomic.Int32
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: fake.NewClientset(objs...), recorder: record.NewFakeRecorder(1000),
		clock: clocktesting.NewFakeClock(t0)}
	f.client.PrependReactor("create", "pods", nameGenerator(f))
	f.factory = informers.NewSharedInformerFactory(f.client, 0)
	f.queue = controllertest.NewQueue()
	t.Cleanup(f.queue.ShutDown)
	log, _ := ktesting.NewTestContext(t)
	c := controllertest.Context(Descriptor(), f.factory, f.queue)
	c.Client, c.Recorder, c.Logger = f.client, f.recorder, log
	ctrl, err := newController(c, ReplicaSets(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	for _, o := range objs {
		f.cache(o)
	}
	f.queue.Keys() // the fixture's own adds are not what tests look at
	f.client.ClearActions()
	return f
}

// cache puts obj into the controller's informer cache without running handlers.
func (f *fixture) cache(o runtime.Object) {
	f.t.Helper()
	if err := f.indexerOf(o).Add(o); err != nil {
		f.t.Fatal(err)
	}
}

// uncache removes obj from the cache without running handlers.
func (f *fixture) uncache(o runtime.Object) {
	f.t.Helper()
	if err := f.indexerOf(o).Delete(o); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) indexerOf(o runtime.Object) toolscache.Indexer {
	f.t.Helper()
	idx, err := controllertest.Informers{SharedInformerFactory: f.factory}.Indexer(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return idx
}

func (f *fixture) sync(key string) error {
	_, ctx := ktesting.NewTestContext(f.t)
	return f.ctrl.sync(ctx, key)
}

func (f *fixture) mustSync(key string) {
	f.t.Helper()
	if err := f.sync(key); err != nil {
		f.t.Fatalf("sync %s: %v", key, err)
	}
}

// actions returns the fake client's actions as "verb resource[/subresource] [name]",
// reads left out unless withReads.
func (f *fixture) actions(withReads bool) []string {
	var out []string
	for _, a := range f.client.Actions() {
		verb := a.GetVerb()
		if !withReads && (verb == "get" || verb == "list" || verb == "watch") {
			continue
		}
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		s := verb + " " + res
		switch a := a.(type) {
		case core.DeleteAction:
			s += " " + a.GetName()
		case core.PatchAction:
			s += " " + a.GetName()
		case core.GetAction:
			s += " " + a.GetName()
		}
		out = append(out, s)
	}
	return out
}

// count returns how many actions are "verb resource".
func (f *fixture) count(verb, resource string) int {
	n := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			n++
		}
	}
	return n
}

// createdPods returns the pods the controller created.
func (f *fixture) createdPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, a := range f.client.Actions() {
		if c, ok := a.(core.CreateAction); ok && a.GetResource().Resource == "pods" {
			out = append(out, c.GetObject().(*corev1.Pod))
		}
	}
	return out
}

// lastStatus returns the status of the last UpdateStatus, and false without one.
func (f *fixture) lastStatus() (appsv1.ReplicaSetStatus, bool) {
	acts := f.client.Actions()
	for i := len(acts) - 1; i >= 0; i-- {
		if u, ok := acts[i].(core.UpdateAction); ok && acts[i].GetSubresource() == "status" {
			return u.GetObject().(*appsv1.ReplicaSet).Status, true
		}
	}
	return appsv1.ReplicaSetStatus{}, false
}

// events drains the recorded events.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// eventReasons counts the drained events by "type reason".
func (f *fixture) eventReasons() map[string]int {
	out := map[string]int{}
	for _, e := range f.events() {
		parts := strings.SplitN(e, " ", 3)
		out[parts[0]+" "+parts[1]]++
	}
	return out
}

// --- object builders ---

var selectorLabels = map[string]string{"app": "web"}

type rsOpt func(*appsv1.ReplicaSet)

func newRS(name string, replicas int32, opts ...rsOpt) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1,
			ResourceVersion: "1"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
	for _, o := range opts {
		o(rs)
	}
	return rs
}

func withMinReady(s int32) rsOpt { return func(rs *appsv1.ReplicaSet) { rs.Spec.MinReadySeconds = s } }

func withStatus(st appsv1.ReplicaSetStatus) rsOpt {
	return func(rs *appsv1.ReplicaSet) { rs.Status = st }
}

func ownedBy(owner metav1.Object, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

type podOpt func(*corev1.Pod)

func newPodOf(name string, rs *appsv1.ReplicaSet, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			ResourceVersion: "1", Labels: map[string]string{"app": "web", "tier": "front"},
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if rs != nil {
		p.OwnerReferences = []metav1.OwnerReference{ownedBy(rs, "ReplicaSet")}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func ready(since time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(since)}}
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deleting() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }
}

func labelled(l map[string]string) podOpt { return func(p *corev1.Pod) { p.Labels = l } }

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func created(t time.Time) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t) }
}

func restarts(n int32) podOpt {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: n}}
	}
}

func cost(v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[DeletionCostAnnotation] = v
	}
}

func rv(v string) podOpt { return func(p *corev1.Pod) { p.ResourceVersion = v } }

func objs(rs *appsv1.ReplicaSet, pods ...*corev1.Pod) []runtime.Object {
	out := []runtime.Object{rs}
	for _, p := range pods {
		out = append(out, p)
	}
	return out
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// apiPods returns the pods the fake API server holds, by name.
func (f *fixture) apiPods() []*corev1.Pod {
	f.t.Helper()
	l, err := f.client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "ns")
	if err != nil {
		f.t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range l.(*corev1.PodList).Items {
		out = append(out, &l.(*corev1.PodList).Items[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// nameGenerator is a reactor that does what the fake clientset does not: generate the
// names of pods created with generateName.
func nameGenerator(f *fixture) core.ReactionFunc {
	return func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod)
		if pod.Name == "" {
			pod.Name = fmt.Sprintf("%s%05d", pod.GenerateName, f.created.Add(1))
		}
		return false, nil, nil
	}
}

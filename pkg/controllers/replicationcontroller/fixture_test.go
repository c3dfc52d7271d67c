package replicationcontroller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// fixture runs the controller on a fake clientset with running informers (the
// ReplicaSet package's own fixtures test the shared logic in depth; these test what the
// ReplicationController kind changes: the objects read and written, the pods' owner,
// the selector and the events).
type fixture struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	recorder *recorder
}

// newFixture starts the controller with objs on the fake API server and waits until
// its caches hold them.
func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	return newFixtureWith(t, nil, objs...)
}

// newFixtureWith is newFixture with setup run on the fixture before the controller
// starts (to install reactors).
func newFixtureWith(t *testing.T, setup func(*fixture), objs ...runtime.Object) *fixture {
	t.Helper()
	log, ctx := ktesting.NewTestContext(t)
	f := &fixture{t: t, ctx: ctx, client: fake.NewClientset(objs...),
		recorder: &recorder{}}
	controllertest.GenerateNames(f.client, "pods")
	controllertest.StatusSubresource(f.client, corev1.SchemeGroupVersion.WithResource("replicationcontrollers"))
	watches := controllertest.TrackWatches(f.client)
	if setup != nil {
		setup(f)
	}
	factory := informers.NewSharedInformerFactory(f.client, 0)
	// A real queue: retries after a failed sync happen (controllertest.Queue records them).
	c := controllertest.Context(Descriptor(), factory, workqueue.NewTypedRateLimitingQueue(
		workqueue.DefaultTypedControllerRateLimiter[string]()))
	c.Client, c.Recorder, c.Logger = f.client, f.recorder, log
	ctrl, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	controllertest.Run(t, ctx, ctrl, 2, c.Queue, factory, watches, "pods", "replicationcontrollers")
	return f
}

// rc returns the ReplicationController name as the fake API server holds it.
func (f *fixture) rc(name string) *corev1.ReplicationController {
	return controllertest.Get[*corev1.ReplicationController](f.t, f.client, "ns", name)
}

// events returns the recorded events ("type reason message @kind/apiVersion").
func (f *fixture) events() []string {
	f.recorder.mu.Lock()
	defer f.recorder.mu.Unlock()
	return slices.Clone(f.recorder.events)
}

// recorder records events as "type reason message @kind/apiVersion", the involved
// object's reference made as the real recorder makes it (from the scheme, not TypeMeta).
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	ref, err := reference.GetReference(scheme.Scheme, obj)
	where := "@?"
	if err == nil {
		where = "@" + ref.Kind + "/" + ref.APIVersion
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, strings.Join([]string{eventtype, reason, message, where}, " "))
}

func (r *recorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	r.Eventf(obj, eventtype, reason, format, args...)
}

// eventsWith returns the drained events whose text starts with prefix.
func eventsWith(events []string, prefix string) []string {
	var out []string
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// --- object builders ---

var selector = map[string]string{"app": "web"}

func newRC(name string, replicas int32, opts ...func(*corev1.ReplicationController)) *corev1.ReplicationController {
	rc := &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Generation: 1},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To(replicas),
			Selector: selector,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "front"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
	for _, o := range opts {
		o(rc)
	}
	return rc
}

func controlledBy(owner metav1.Object, apiVersion, kind string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func newPod(name string, labels map[string]string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

func readyPod(p *corev1.Pod) *corev1.Pod {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}
	return p
}

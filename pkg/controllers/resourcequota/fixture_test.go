package resourcequota

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose caches the test fills by hand, with
// the shard's served resources played by served.
type fixture struct {
	*controllertest.Fixture
	ctrl   *Controller
	served *controllertest.Served
	clock  *clocktesting.FakeClock
}

// newFixture serves api from the fake API server (whose resourcequotas/status updates
// behave as the API server's) and caches cached.
func newFixture(t *testing.T, api []runtime.Object, cached ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{
		Fixture: controllertest.NewFixture(t, Descriptor(), api...),
		served:  &controllertest.Served{},
		clock:   clocktesting.NewFakeClock(t0),
	}
	controllertest.StatusSubresource(f.Client, corev1.SchemeGroupVersion.WithResource("resourcequotas"))
	c := f.ControllerContext()
	c.Served = f.served
	ctrl, err := newController(c, Options{SyncPeriod: 5 * time.Minute}, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Cache(cached...)
	return f
}

// queue returns one of the controller's queues: Name (primary), PriorityQueue or
// ReplenishmentQueue.
func (f *fixture) queue(name string) *controllertest.Queue {
	switch name {
	case PriorityQueue:
		return f.ctrl.priority.(*controllertest.Queue)
	case ReplenishmentQueue:
		return f.ctrl.replenishment.(*controllertest.Queue)
	}
	return f.ctrl.queue.(*controllertest.Queue)
}

// queued drains every queue and returns the keys by queue name (queues without keys left
// out).
func (f *fixture) queued() map[string][]string {
	out := map[string][]string{}
	for _, n := range []string{Name, PriorityQueue, ReplenishmentQueue} {
		if k := f.queue(n).Keys(); len(k) > 0 {
			out[n] = k
		}
	}
	return out
}

// status returns the quota's status as the fake API server holds it.
func (f *fixture) status(name string) corev1.ResourceQuotaStatus {
	f.T.Helper()
	return controllertest.Get[*corev1.ResourceQuota](f.T, f.Client, "ns", name).Status
}

// writes returns the fake client's writes.
func (f *fixture) writes() []string { return controllertest.Actions(f.Client, controllertest.Writes) }

// list is a ResourceList from name=quantity pairs.
func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

type quotaOpt func(*corev1.ResourceQuota)

// newQuota is quota name of namespace ns with spec.hard hard.
func newQuota(name string, hard corev1.ResourceList, opts ...quotaOpt) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "1"},
		Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	for _, o := range opts {
		o(q)
	}
	return q
}

// synced sets the quota's status: hard as spec, and used.
func synced(used corev1.ResourceList) quotaOpt {
	return func(q *corev1.ResourceQuota) {
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard.DeepCopy(), Used: used}
	}
}

func inNamespace(ns string) quotaOpt { return func(q *corev1.ResourceQuota) { q.Namespace = ns } }

func scopes(s ...corev1.ResourceQuotaScope) quotaOpt {
	return func(q *corev1.ResourceQuota) { q.Spec.Scopes = s }
}

func selector(reqs ...corev1.ScopedResourceSelectorRequirement) quotaOpt {
	return func(q *corev1.ResourceQuota) {
		q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: reqs}
	}
}

type podOpt func(*corev1.Pod)

// newPod is a running pod of namespace ns with one container "c".
func newPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// resources sets the first container's requests and limits.
func resources(requests, limits corev1.ResourceList) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: requests, Limits: limits}
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func deadline(s int64) podOpt {
	return func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To(s) }
}

func priorityClass(c string) podOpt { return func(p *corev1.Pod) { p.Spec.PriorityClassName = c } }

func podNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }

// deletedAt marks the pod deleted at t with a grace period of grace seconds.
func deletedAt(t time.Time, grace int64) podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(t))
		p.DeletionGracePeriodSeconds = ptr.To(grace)
	}
}

// fakeInformer is a served resource's informer: a store the test fills, HasSynced as the
// test says, and event handlers the test calls.
type fakeInformer struct {
	toolscache.SharedIndexInformer // nil: anything else the controller calls panics
	indexer                        toolscache.Indexer
	synced                         bool
	handlers                       map[*fakeRegistration]toolscache.ResourceEventHandler
}

// fakeRegistration is a handler's registration (nil embedded: only HasSynced is asked).
type fakeRegistration struct {
	toolscache.ResourceEventHandlerRegistration
}

func (*fakeRegistration) HasSynced() bool { return true }

func newFakeInformer(synced bool, objs ...runtime.Object) *fakeInformer {
	i := &fakeInformer{
		indexer: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc,
			toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}),
		synced:   synced,
		handlers: map[*fakeRegistration]toolscache.ResourceEventHandler{},
	}
	for _, o := range objs {
		if err := i.indexer.Add(o); err != nil {
			panic(err)
		}
	}
	return i
}

func (i *fakeInformer) GetIndexer() toolscache.Indexer { return i.indexer }
func (i *fakeInformer) GetStore() toolscache.Store     { return i.indexer }
func (i *fakeInformer) HasSynced() bool                { return i.synced }

func (i *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	r := &fakeRegistration{}
	i.handlers[r] = h
	return r, nil
}

func (i *fakeInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	delete(i.handlers, r.(*fakeRegistration))
	return nil
}

// delete runs the delete handlers on obj.
func (i *fakeInformer) delete(obj any) {
	for _, h := range i.handlers {
		h.OnDelete(obj)
	}
}

// served is a served namespaced resource of group, version v1.
func served(group, res string) controllers.ServedResource {
	return controllers.ServedResource{GroupVersionResource: schema.GroupVersionResource{Group: group, Version: "v1", Resource: res},
		Namespaced: true}
}

// partial is an object as a metadata-only informer holds it.
func partial(apiVersion, kind, namespace, name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func labelSet(m map[string]string) labels.Set { return labels.Set(m) }

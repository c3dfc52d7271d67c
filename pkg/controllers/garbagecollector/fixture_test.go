package garbagecollector

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// The served resources of the fixture: namespaced pods, replicasets and deployments,
// and cluster-scoped nodes.
var (
	pods        = controllers.ServedResource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod", Namespaced: true}
	replicaSets = controllers.ServedResource{GroupVersionResource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, Kind: "ReplicaSet", Namespaced: true}
	deployments = controllers.ServedResource{GroupVersionResource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Kind: "Deployment", Namespaced: true}
	nodes       = controllers.ServedResource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, Kind: "Node"}
	allServed   = []controllers.ServedResource{pods, replicaSets, deployments, nodes}
)

// fixture runs the controller by hand: informers whose stores the test fills (they never
// run), graph events applied synchronously, the gated queues as controllertest.Queues,
// and a fake metadata client as the API server.
type fixture struct {
	t         testing.TB
	ctrl      *Controller
	meta      *metadatafake.FakeMetadataClient
	served    *controllertest.Served
	informers map[schema.GroupVersionResource]toolscache.SharedIndexInformer
	deleteQ   *controllertest.Queue
	orphanQ   *controllertest.Queue
	recorder  *record.FakeRecorder
}

func newFixture(t *testing.T, remote RemoteDependents) *fixture {
	t.Helper()
	if remote == nil {
		remote = conservativeRemote{}
	}
	return buildFixture(t, remote, nil)
}

// newShard is a fixture standing for one shard whose barrier is the controller's own
// sweep through its metadata client. meta, when not nil, is the API server it shares
// with other shards' fixtures; objects only there and not observed are the "remote"
// ones, in namespaces other shards work.
func newShard(t *testing.T, meta *metadatafake.FakeMetadataClient) *fixture {
	t.Helper()
	return buildFixture(t, nil, meta)
}

func buildFixture(t testing.TB, remote RemoteDependents, meta *metadatafake.FakeMetadataClient) *fixture {
	t.Helper()
	if meta == nil {
		meta = metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	}
	f := &fixture{
		t:         t,
		meta:      meta,
		served:    &controllertest.Served{},
		informers: map[schema.GroupVersionResource]toolscache.SharedIndexInformer{},
		deleteQ:   controllertest.NewQueue(),
		orphanQ:   controllertest.NewQueue(),
		recorder:  record.NewFakeRecorder(100),
	}
	t.Cleanup(f.deleteQ.ShutDown)
	t.Cleanup(f.orphanQ.ShutDown)
	c := controllers.Context{
		Metadata: f.meta,
		Queues: map[string]workqueue.TypedRateLimitingInterface[string]{
			attemptToDeleteQueue: f.deleteQ,
			attemptToOrphanQueue: f.orphanQ,
		},
		Recorder:   f.recorder,
		Logger:     controllertest.Logger(t),
		Registerer: prometheus.NewRegistry(),
		Served:     f.served,
	}
	ctrl, err := newController(c, remote)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.graphChanges.ShutDown)
	if s, ok := ctrl.remote.(*sweeper); ok {
		s.minGap = 0 // sweeps a few microseconds long, at most that apart
		ctrl.resynced.Store(true)
	}
	f.ctrl = ctrl
	for _, r := range allServed {
		inf := toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0,
			toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
		f.informers[r.GroupVersionResource] = inf
		f.served.Add(r, inf)
	}
	return f
}

// object builds an object's metadata; opts change it.
func object(r controllers.ServedResource, namespace, name, uid string, opts ...func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: r.GroupVersion().String(), Kind: r.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid), ResourceVersion: "1"},
	}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// ownedBy adds a reference to owner, blocking or not.
func ownedBy(owner *metav1.PartialObjectMetadata, block bool) func(*metav1.PartialObjectMetadata) {
	return func(o *metav1.PartialObjectMetadata) {
		o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{
			APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID,
			BlockOwnerDeletion: ptr.To(block),
		})
	}
}

// ref adds a reference with the coordinates given.
func ref(apiVersion, kind, name, uid string) func(*metav1.PartialObjectMetadata) {
	return func(o *metav1.PartialObjectMetadata) {
		o.OwnerReferences = append(o.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid)})
	}
}

// deleting sets a deletionTimestamp and finalizers.
func deleting(finalizers ...string) func(*metav1.PartialObjectMetadata) {
	return func(o *metav1.PartialObjectMetadata) {
		o.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		o.Finalizers = finalizers
	}
}

func resourceOf(o *metav1.PartialObjectMetadata) controllers.ServedResource {
	for _, r := range allServed {
		if r.Kind == o.Kind {
			return r
		}
	}
	panic("no served resource of kind " + o.Kind)
}

// live stores objs in the fake API server only.
func (f *fixture) live(objs ...*metav1.PartialObjectMetadata) {
	f.t.Helper()
	for _, o := range objs {
		if err := f.meta.Tracker().Create(resourceOf(o).GroupVersionResource, o.DeepCopy(), o.Namespace); err != nil {
			f.t.Fatal(err)
		}
	}
}

// observe puts objs into the informers' stores and applies their add (or update) events.
func (f *fixture) observe(objs ...*metav1.PartialObjectMetadata) {
	f.t.Helper()
	for _, o := range objs {
		r := resourceOf(o)
		store := f.informers[r.GroupVersionResource].GetStore()
		old, exists, _ := store.Get(o)
		if err := store.Add(o.DeepCopy()); err != nil {
			f.t.Fatal(err)
		}
		e := &event{typ: addEvent, obj: o.DeepCopy(), kind: newKindInfo(r.GroupVersionResource, r.GroupVersion().WithKind(r.Kind))}
		if exists {
			e.typ, e.oldObj = updateEvent, old
		}
		f.ctrl.graphChanges.Add(e)
	}
	f.drainGraph()
}

// exists stores objs in the API server and observes them.
func (f *fixture) exists(objs ...*metav1.PartialObjectMetadata) {
	f.t.Helper()
	f.live(objs...)
	f.observe(objs...)
}

// gone removes obj from the store and applies its delete event.
func (f *fixture) gone(o *metav1.PartialObjectMetadata) {
	f.t.Helper()
	r := resourceOf(o)
	_ = f.informers[r.GroupVersionResource].GetStore().Delete(o)
	f.ctrl.graphChanges.Add(&event{typ: deleteEvent, obj: o.DeepCopy(), kind: newKindInfo(r.GroupVersionResource, r.GroupVersion().WithKind(r.Kind))})
	f.drainGraph()
}

// drainGraph applies every queued graph change.
func (f *fixture) drainGraph() {
	log := controllertest.Logger(f.t)
	for f.ctrl.graphChanges.Len() > 0 {
		e, _ := f.ctrl.graphChanges.Get()
		f.ctrl.processGraphChange(log, e)
		f.ctrl.graphChanges.Done(e)
	}
}

func (f *fixture) ctx() context.Context {
	return context.Background()
}

// syncDelete runs attemptToDelete on key, then applies the graph changes it made.
func (f *fixture) syncDelete(key string) error {
	err := f.ctrl.syncDelete(f.ctx(), key)
	f.drainGraph()
	return err
}

func (f *fixture) syncOrphan(key string) error {
	err := f.ctrl.syncOrphan(f.ctx(), key)
	f.drainGraph()
	return err
}

// settle works both queues until they are empty (at most 50 keys), failing on an
// error other than a wait.
func (f *fixture) settle() {
	f.t.Helper()
	for range 50 {
		if keys := f.orphanQ.Keys(); len(keys) > 0 {
			for _, k := range keys {
				if err := f.syncOrphan(k); err != nil {
					f.t.Logf("orphan %s: %v", k, err)
				}
			}
			continue
		}
		keys := f.deleteQ.Keys()
		if len(keys) == 0 {
			return
		}
		for _, k := range keys {
			if err := f.syncDelete(k); err != nil {
				f.t.Logf("delete %s: %v", k, err)
			}
		}
	}
	f.t.Fatal("queues did not settle")
}

// writes describes the writes sent to the API server: "delete pods ns/name Background",
// "patch pods ns/name strategic-merge-patch+json {…}".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.meta.Actions() {
		switch a := a.(type) {
		case clienttesting.DeleteActionImpl:
			s := "delete " + a.GetResource().Resource + " " + path(a.GetNamespace(), a.GetName())
			if p := a.DeleteOptions.PropagationPolicy; p != nil {
				s += " " + string(*p)
			}
			if pre := a.DeleteOptions.Preconditions; pre == nil || pre.UID == nil {
				s += " (no UID precondition)"
			}
			out = append(out, s)
		case clienttesting.PatchActionImpl:
			out = append(out, "patch "+a.GetResource().Resource+" "+path(a.GetNamespace(), a.GetName())+" "+
				strings.TrimPrefix(string(a.GetPatchType()), "application/")+" "+string(a.GetPatch()))
		}
	}
	return out
}

// reads lists the GETs sent, "resource ns/name".
func (f *fixture) reads() []string {
	var out []string
	for _, a := range f.meta.Actions() {
		if g, ok := a.(clienttesting.GetActionImpl); ok {
			out = append(out, g.GetResource().Resource+" "+path(g.GetNamespace(), g.GetName()))
		}
	}
	return out
}

func path(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// stored returns the object of o's coordinates in the fake API server, or nil.
func (f *fixture) stored(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	got, err := f.meta.Tracker().Get(resourceOf(o).GroupVersionResource, o.Namespace, o.Name)
	if err != nil {
		return nil
	}
	return got.(*metav1.PartialObjectMetadata)
}

// inGraph reports whether uid has a node, and whether it is virtual.
func (f *fixture) inGraph(uid string) (found, virtual bool) {
	f.ctrl.graph.mu.RLock()
	defer f.ctrl.graph.mu.RUnlock()
	n, ok := f.ctrl.graph.nodes[types.UID(uid)]
	if !ok {
		return false, false
	}
	return true, n.virtual
}

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

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// remoteAnswer is a RemoteDependents that answers pending as told and records the
// owners asked about.
type remoteAnswer struct {
	pending bool
	asked   []string
}

func (r *remoteAnswer) Pending(_ context.Context, owner metav1.OwnerReference, finalizer string) (bool, error) {
	r.asked = append(r.asked, owner.Name+" "+finalizer)
	return r.pending, nil
}

var _ runtime.Object = (*metav1.PartialObjectMetadata)(nil)

// conservativeRemote is a RemoteDependents that always answers pending, so that a
// cluster-scoped owner never loses foregroundDeletion or orphan.
type conservativeRemote struct{}

// Pending always reports pending.
func (conservativeRemote) Pending(context.Context, metav1.OwnerReference, string) (bool, error) {
	return true, nil
}

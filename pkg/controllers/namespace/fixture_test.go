package namespace

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	core "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// tenant is the fixtures' namespace.
const tenant = "tenant"

var (
	configMapsGVR = corev1.SchemeGroupVersion.WithResource("configmaps")
	widgetsGVR    = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

// every verb a resource usually supports.
var allVerbs = metav1.Verbs{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

// serverResources is what the fixtures' discovery serves by default: pods, configmaps and
// a CRD's widgets.
func serverResources() []*metav1.APIResourceList {
	return []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: allVerbs},
			{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: allVerbs},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Namespaced: true, Kind: "Widget", Verbs: allVerbs},
		}},
	}
}

// fixture is a controller on fake clients: the typed clientset holds the Namespace and
// the pods (for the grace-period estimate), a small in-memory API behind the metadata
// client holds the namespace's content and deletes it as the API server does (an object
// with finalizers only gets a deletionTimestamp).
type fixture struct {
	*controllertest.Fixture
	md   *metadatafake.FakeMetadataClient
	ctrl *Controller

	mu sync.Mutex
	// content holds the namespace's objects by resource and name.
	content map[schema.GroupVersionResource]map[string]*metav1.PartialObjectMetadata
	// fail makes "verb resource" requests of the metadata client fail with the error.
	fail map[string]error
	// discovery is what the discovery function returns.
	discovery    []*metav1.APIResourceList
	discoveryErr error
}

func newNamespace(deleting bool, finalizers ...corev1.FinalizerName) *corev1.Namespace {
	ns := &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: tenant, UID: "ns-uid", ResourceVersion: "1"},
		Spec:       corev1.NamespaceSpec{Finalizers: finalizers},
		Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
	}
	if deleting {
		ns.DeletionTimestamp = &metav1.Time{Time: time.Now().Add(-time.Minute)}
		ns.Status.Phase = corev1.NamespaceTerminating
	}
	return ns
}

func object(name string, finalizers ...string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant, Finalizers: finalizers}}
}

// newFixture caches and serves ns.
func newFixture(t *testing.T, ns *corev1.Namespace, pods ...*corev1.Pod) *fixture {
	t.Helper()
	objs := append([]runtime.Object{ns}, controllertest.Objects(pods...)...)
	f := &fixture{
		Fixture: controllertest.NewFixture(t, Descriptor(), objs...),
		md:      metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()),
		content: map[schema.GroupVersionResource]map[string]*metav1.PartialObjectMetadata{},
		fail:    map[string]error{}, discovery: serverResources(),
	}
	controllertest.StatusSubresource(f.Client, corev1.SchemeGroupVersion.WithResource("namespaces"))
	f.Client.PrependReactor("create", "namespaces", f.finalizeReactor)
	f.md.PrependReactor("*", "*", f.metadataReactor)
	c := f.ControllerContext()
	c.Metadata = f.md
	ctrl, err := newController(c, Options{SyncPeriod: time.Minute}, f.discover)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Cache(ns)
	return f
}

func (f *fixture) discover() ([]*metav1.APIResourceList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.discovery, f.discoveryErr
}

// add puts objects of gvr into the namespace.
func (f *fixture) add(gvr schema.GroupVersionResource, objs ...*metav1.PartialObjectMetadata) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.content[gvr] == nil {
		f.content[gvr] = map[string]*metav1.PartialObjectMetadata{}
	}
	for _, o := range objs {
		f.content[gvr][o.Name] = o
	}
}

// left returns the names of gvr's objects still in the namespace, sorted.
func (f *fixture) left(gvr schema.GroupVersionResource) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.content[gvr] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// removeFinalizers takes every finalizer off gvr's object name, which goes if deleted.
func (f *fixture) removeFinalizers(gvr schema.GroupVersionResource, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.content[gvr][name]
	o.Finalizers = nil
	if o.DeletionTimestamp != nil {
		delete(f.content[gvr], name)
	}
}

// deleteLocked deletes gvr's object name as the API server does.
func (f *fixture) deleteLocked(gvr schema.GroupVersionResource, name string) {
	o := f.content[gvr][name]
	if len(o.Finalizers) == 0 {
		delete(f.content[gvr], name)
		return
	}
	if o.DeletionTimestamp == nil {
		o.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
}

func (f *fixture) metadataReactor(a core.Action) (bool, runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gvr := a.GetResource()
	if err := f.fail[a.GetVerb()+" "+gvr.Resource]; err != nil {
		return true, nil, err
	}
	switch a.GetVerb() {
	case "list":
		// The fake metadata client wants a metav1.List of PartialObjectMetadata.
		list := &metav1.List{}
		for _, o := range f.content[gvr] {
			list.Items = append(list.Items, runtime.RawExtension{Object: o.DeepCopy()})
		}
		return true, list, nil
	case "delete-collection":
		for n := range f.content[gvr] {
			f.deleteLocked(gvr, n)
		}
		return true, nil, nil
	case "delete":
		name := a.(core.DeleteAction).GetName()
		if _, ok := f.content[gvr][name]; !ok {
			return true, nil, apierrors.NewNotFound(gvr.GroupResource(), name)
		}
		f.deleteLocked(gvr, name)
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("fixture: unexpected metadata request %s %s", a.GetVerb(), gvr)
}

// finalizeReactor serves the finalize subresource: the spec's finalizers are replaced, and
// a deleted namespace without finalizers is removed.
func (f *fixture) finalizeReactor(a core.Action) (bool, runtime.Object, error) {
	ca, ok := a.(core.CreateAction)
	if !ok || ca.GetSubresource() != "finalize" {
		return false, nil, nil
	}
	in := ca.GetObject().(*corev1.Namespace)
	gvr := corev1.SchemeGroupVersion.WithResource("namespaces")
	obj, err := f.Client.Tracker().Get(gvr, "", in.Name)
	if err != nil {
		return true, nil, err
	}
	stored := obj.(*corev1.Namespace).DeepCopy()
	stored.Spec.Finalizers = in.Spec.Finalizers
	if len(stored.Spec.Finalizers) == 0 && stored.DeletionTimestamp != nil {
		return true, stored, f.Client.Tracker().Delete(gvr, "", in.Name)
	}
	return true, stored, f.Client.Tracker().Update(gvr, stored, "")
}

// namespace returns the stored Namespace, or nil once it is gone.
func (f *fixture) namespace() *corev1.Namespace {
	obj, err := f.Client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("namespaces"), "", tenant)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.T.Fatal(err)
	}
	return obj.(*corev1.Namespace)
}

// sync runs one sync of the fixtures' namespace.
func (f *fixture) sync() error { return f.Sync(tenant) }

// conditions returns the stored namespace's conditions as "Type=Status Reason: Message".
func (f *fixture) conditions() map[corev1.NamespaceConditionType]string {
	ns := f.namespace()
	if ns == nil {
		return nil
	}
	out := map[corev1.NamespaceConditionType]string{}
	for _, c := range ns.Status.Conditions {
		out[c.Type] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return out
}

// restart builds the controller's deleter again, as at a start, from what discovery
// serves now.
func (f *fixture) restart() {
	d, err := newDeleter(controllertest.Logger(f.T), f.Client.CoreV1(), f.md, f.discover)
	if err != nil {
		f.T.Fatal(err)
	}
	f.ctrl.deleter = d
}

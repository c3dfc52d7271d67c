package controllertest

// Field-selected informers (controllers.Resource.FieldSelector) in unit tests. A shard
// serves such a resource with a separate informer cached whole that holds only the objects
// the selector selects; the harness does the same beside a SharedInformerFactory: one
// informer per resource and selector, kept with the factory it was asked of. A fixture
// fills it through Informers.Add (and Fixture.Cache), which puts each object the selector
// selects in it and takes out one it no longer selects. For a test whose informers run
// (Run), it is a view of the factory's informer of the same type: it lists that
// informer's store and watches its events, both filtered by the selector (the fake
// clientset ignores field selectors, so the harness applies them itself).

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
)

// selectedInformers are the field-selected informers asked of one factory.
type selectedInformers struct {
	mu        sync.Mutex
	informers map[controllers.Resource]*selectedInformer
	running   map[*selectedInformer]bool
}

var (
	selectedMu sync.Mutex
	// selectedByFactory keeps each factory's field-selected informers: Informers is a
	// value that tests build again and again over one factory.
	selectedByFactory = map[informers.SharedInformerFactory]*selectedInformers{}
)

func selectedOf(factory informers.SharedInformerFactory) *selectedInformers {
	selectedMu.Lock()
	defer selectedMu.Unlock()
	s := selectedByFactory[factory]
	if s == nil {
		s = &selectedInformers{informers: map[controllers.Resource]*selectedInformer{}, running: map[*selectedInformer]bool{}}
		selectedByFactory[factory] = s
	}
	return s
}

// forgetSelected drops factory's field-selected informers (a fixture's cleanup).
func forgetSelected(factory informers.SharedInformerFactory) {
	selectedMu.Lock()
	defer selectedMu.Unlock()
	delete(selectedByFactory, factory)
}

// informerFor returns the informer of r (which has a FieldSelector), made on first ask.
func (s *selectedInformers) informerFor(factory informers.SharedInformerFactory, r controllers.Resource) (toolscache.SharedIndexInformer, error) {
	sel, err := fields.ParseSelector(r.FieldSelector)
	if err != nil {
		return nil, fmt.Errorf("controllertest: %s: %w", r, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if si := s.informers[r]; si != nil {
		return si.informer, nil
	}
	example, err := exampleOf(r.GroupVersionResource)
	if err != nil {
		return nil, err
	}
	gi, err := factory.ForResource(r.GroupVersionResource)
	if err != nil {
		return nil, err
	}
	si := &selectedInformer{selector: sel, whole: gi.Informer()}
	if _, err := si.whole.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { si.observe(nil, obj) },
		UpdateFunc: func(old, cur any) { si.observe(old, cur) },
		DeleteFunc: func(obj any) { si.observe(obj, nil) },
	}); err != nil {
		return nil, err
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: si.list,
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return si.nextWatch(), nil
		},
	}
	si.informer = toolscache.NewSharedIndexInformer(listThenWatch{lw}, example, 0,
		toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	s.informers[r] = si
	return si.informer, nil
}

// start runs every field-selected informer of the factory not yet running until ctx
// ends, and waits for their first lists.
func (s *selectedInformers) start(ctx context.Context) bool {
	s.mu.Lock()
	var synced []toolscache.InformerSynced
	for _, si := range s.informers {
		if !s.running[si] {
			s.running[si] = true
			go si.informer.RunWithContext(ctx)
		}
		synced = append(synced, si.informer.HasSynced)
	}
	s.mu.Unlock()
	return toolscache.WaitForCacheSync(ctx.Done(), synced...)
}

// ofResource returns the field-selected informers of gvr.
func (s *selectedInformers) ofResource(gvr schema.GroupVersionResource) []*selectedInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*selectedInformer
	for r, si := range s.informers {
		if r.GroupVersionResource == gvr {
			out = append(out, si)
		}
	}
	return out
}

// exampleOf returns an empty object of the built-in type served as gvr.
func exampleOf(gvr schema.GroupVersionResource) (runtime.Object, error) {
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if plural, _ := meta.UnsafeGuessKindToResource(gvk); plural == gvr {
			return scheme.Scheme.New(gvk)
		}
	}
	return nil, fmt.Errorf("controllertest: no built-in type is served as %s", gvr)
}

// listThenWatch makes the reflector list, then watch: the view streams no initial events.
type listThenWatch struct{ *toolscache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// selectedInformer is one field-selected informer: the informer the controller gets, and
// what it is a view of when it runs.
type selectedInformer struct {
	selector fields.Selector
	informer toolscache.SharedIndexInformer
	whole    toolscache.SharedIndexInformer

	mu sync.Mutex
	// next is the watch the informer's next Watch returns, opened by its List so that no
	// event between the two is lost.
	next *watch.RaceFreeFakeWatcher
}

// list returns what the selector selects of the whole informer's store, once it synced,
// and opens the watch that follows.
func (si *selectedInformer) list(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	if err := wait.PollUntilContextCancel(ctx, 5*time.Millisecond, true, func(context.Context) (bool, error) {
		return si.whole.HasSynced(), nil
	}); err != nil {
		return nil, err
	}
	si.mu.Lock()
	defer si.mu.Unlock()
	out := &metav1.List{}
	for _, o := range si.whole.GetStore().List() {
		obj := o.(runtime.Object)
		if ok, err := matches(si.selector, obj); err != nil {
			return nil, err
		} else if ok {
			out.Items = append(out.Items, runtime.RawExtension{Object: obj})
		}
	}
	if si.next != nil {
		si.next.Stop()
	}
	si.next = watch.NewRaceFreeFake()
	return out, nil
}

func (si *selectedInformer) nextWatch() watch.Interface {
	si.mu.Lock()
	defer si.mu.Unlock()
	if si.next == nil {
		si.next = watch.NewRaceFreeFake()
	}
	return si.next
}

// observe passes a change of the whole informer on as the selected view sees it: an
// object that becomes selected is added, one that stops being selected is deleted.
func (si *selectedInformer) observe(old, cur any) {
	if d, ok := old.(toolscache.DeletedFinalStateUnknown); ok {
		old = d.Obj
	}
	was, is := false, false
	if o, ok := old.(runtime.Object); ok {
		was, _ = matches(si.selector, o)
	}
	if c, ok := cur.(runtime.Object); ok {
		is, _ = matches(si.selector, c)
	}
	si.mu.Lock()
	defer si.mu.Unlock()
	if si.next == nil {
		return
	}
	switch {
	case is && !was:
		si.next.Add(cur.(runtime.Object))
	case is && was:
		si.next.Modify(cur.(runtime.Object))
	case was:
		si.next.Delete(old.(runtime.Object))
	}
}

// put stores obj in the informer if the selector selects it, and takes out the object of
// its key otherwise (what the watch of an updated object does).
func (si *selectedInformer) put(t testing.TB, obj runtime.Object) {
	t.Helper()
	ok, err := matches(si.selector, obj)
	if err != nil {
		t.Fatal(err)
	}
	store := si.informer.GetIndexer()
	if ok {
		err = store.Add(obj)
	} else if _, exists, _ := store.Get(obj); exists {
		err = store.Delete(obj)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// remove takes obj out of the informer.
func (si *selectedInformer) remove(t testing.TB, obj runtime.Object) {
	t.Helper()
	if _, exists, _ := si.informer.GetIndexer().Get(obj); exists {
		if err := si.informer.GetIndexer().Delete(obj); err != nil {
			t.Fatal(err)
		}
	}
}

// matches reports whether sel selects obj, from its selectable fields (FieldsOf); a field
// its type cannot be selected by is an error, as the API server's.
func matches(sel fields.Selector, obj runtime.Object) (bool, error) {
	set, err := FieldsOf(obj)
	if err != nil {
		return false, err
	}
	for _, req := range sel.Requirements() {
		if _, ok := set[req.Field]; !ok {
			return false, fmt.Errorf("controllertest: field selector %q: %T is not selectable by %s", sel, obj, req.Field)
		}
	}
	return sel.Matches(set), nil
}

// FieldsOf returns the fields the API server lets obj be selected by: metadata.name and
// metadata.namespace of every object, and for pods also the pod's own (spec.nodeName,
// status.phase, …).
func FieldsOf(obj runtime.Object) (fields.Set, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	if p, ok := obj.(*corev1.Pod); ok {
		set["spec.nodeName"] = p.Spec.NodeName
		set["spec.restartPolicy"] = string(p.Spec.RestartPolicy)
		set["spec.schedulerName"] = p.Spec.SchedulerName
		set["spec.serviceAccountName"] = p.Spec.ServiceAccountName
		set["spec.hostNetwork"] = fmt.Sprint(p.Spec.HostNetwork)
		set["status.phase"] = string(p.Status.Phase)
		set["status.podIP"] = p.Status.PodIP
		set["status.nominatedNodeName"] = p.Status.NominatedNodeName
	}
	return set, nil
}

package controllertest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/controllers"
)

// Informers serves a controller the informers of a SharedInformerFactory, typed, in place
// of the shard's; wrap it with controllers.Declared to check a descriptor's reads as the
// shard does. Metadata-only informers are not served. A field-selected resource
// (controllers.Resource.FieldSelector) is served a separate informer kept with the
// factory, holding what the selector selects (selected.go).
type Informers struct {
	informers.SharedInformerFactory
}

var _ controllers.Informers = Informers{}

// InformerFor returns the factory's informer of r.
func (i Informers) InformerFor(r controllers.Resource) (toolscache.SharedIndexInformer, error) {
	if r.Metadata {
		return nil, fmt.Errorf("controllertest: no metadata-only informers (%s)", r)
	}
	if r.FieldSelector != "" {
		return selectedOf(i.SharedInformerFactory).informerFor(i.SharedInformerFactory, r)
	}
	gi, err := i.ForResource(r.GroupVersionResource)
	if err != nil {
		return nil, err
	}
	return gi.Informer(), nil
}

// Indexer returns the cache of obj's type, so a test can add or remove it without
// running event handlers.
func (i Informers) Indexer(obj runtime.Object) (toolscache.Indexer, error) {
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	inf, err := i.InformerFor(controllers.Typed(gvr))
	if err != nil {
		return nil, fmt.Errorf("no informer for %T: %w", obj, err)
	}
	return inf.GetIndexer(), nil
}

// Add puts objs in the caches of their types, without running event handlers, and fails
// the test if one has no cache: what a fixture does to say what its controller has seen.
// An object also goes into each field-selected informer of its type whose selector
// selects it, and out of each that no longer does.
func (i Informers) Add(t testing.TB, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		idx, err := i.Indexer(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
		for _, si := range i.selected(t, o) {
			si.put(t, o)
		}
	}
}

// Delete takes objs out of the caches of their types, field-selected ones included,
// without running event handlers.
func (i Informers) Delete(t testing.TB, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		idx, err := i.Indexer(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Delete(o); err != nil {
			t.Fatal(err)
		}
		for _, si := range i.selected(t, o) {
			si.remove(t, o)
		}
	}
}

// selected returns the field-selected informers of obj's type.
func (i Informers) selected(t testing.TB, obj runtime.Object) []*selectedInformer {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	return selectedOf(i.SharedInformerFactory).ofResource(gvr)
}

// TerminatingNamespaceError is the error the API server's NamespaceLifecycle admission
// returns for a create of resource in a namespace that is being deleted; controllers
// recognise it by its cause and neither retry nor record an event for it.
func TerminatingNamespaceError(resource schema.GroupResource, namespace string) *apierrors.StatusError {
	err := apierrors.NewForbidden(resource, "",
		fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause,
		Message: fmt.Sprintf("namespace %s is being terminated", namespace), Field: "metadata.namespace"}}
	return err
}

// Context returns a controllers.Context for d's controller over factory and queue, with
// the informers checked against d's declared reads as in a shard, and a Queue (NewQueue)
// for each of d's further queues (Context.Queues); the test sets the other fields
// (Client, Recorder, Logger, …) it needs.
func Context(d controllers.Descriptor, factory informers.SharedInformerFactory, queue workqueue.TypedRateLimitingInterface[string]) controllers.Context {
	c := controllers.Context{
		Informers: controllers.Declared(d, Informers{SharedInformerFactory: factory}),
		Queue:     queue,
	}
	for _, q := range d.Queues {
		if c.Queues == nil {
			c.Queues = map[string]workqueue.TypedRateLimitingInterface[string]{}
		}
		c.Queues[q.Name] = NewQueue()
	}
	return c
}

// Queue is a real rate-limited queue that records AddAfter and AddRateLimited instead of
// waiting, so a test sees requeues (e.g. after minReadySeconds) at once.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu          sync.Mutex
	after       map[string]time.Duration
	rateLimited []string
}

// NewQueue returns an empty Queue.
func NewQueue() *Queue {
	return &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		after:                      map[string]time.Duration{},
	}
}

// AddAfter records the shortest delay asked for key.
func (q *Queue) AddAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if prev, ok := q.after[key]; !ok || d < prev {
		q.after[key] = d
	}
}

// AddRateLimited records key.
func (q *Queue) AddRateLimited(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rateLimited = append(q.rateLimited, key)
}

// After returns the shortest delay asked for key, if any.
func (q *Queue) After(key string) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.after[key]
	return d, ok
}

// Delayed returns every key added with a delay, with its shortest delay.
func (q *Queue) Delayed() map[string]time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]time.Duration, len(q.after))
	for k, d := range q.after {
		out[k] = d
	}
	return out
}

// RateLimited returns the keys added rate-limited, in order.
func (q *Queue) RateLimited() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.rateLimited...)
}

// Keys drains the keys available now and returns them sorted.
func (q *Queue) Keys() []string {
	var out []string
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
		q.Forget(k)
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// StatusSubresource makes client's updates of resource's status subresource behave as the
// API server's do: only the status of the object sent is stored; its spec and metadata are
// the stored object's. Without it the fake clientset stores the whole object, so a
// controller's status update from a stale copy silently reverts a spec change the test
// made meanwhile.
func StatusSubresource(client *fake.Clientset, resource schema.GroupVersionResource) {
	client.PrependReactor("update", resource.Resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
		ua, ok := a.(clienttesting.UpdateAction)
		if !ok || ua.GetSubresource() != "status" || ua.GetResource() != resource {
			return false, nil, nil
		}
		in, err := meta.Accessor(ua.GetObject())
		if err != nil {
			return true, nil, err
		}
		stored, err := client.Tracker().Get(resource, ua.GetNamespace(), in.GetName())
		if err != nil {
			return true, nil, err
		}
		sent, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ua.GetObject())
		if err != nil {
			return true, nil, err
		}
		merged, err := runtime.DefaultUnstructuredConverter.ToUnstructured(stored)
		if err != nil {
			return true, nil, err
		}
		merged["status"] = sent["status"]
		out := stored.DeepCopyObject()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(merged, out); err != nil {
			return true, nil, err
		}
		if err := client.Tracker().Update(resource, out, ua.GetNamespace()); err != nil {
			return true, nil, err
		}
		got, err := client.Tracker().Get(resource, ua.GetNamespace(), in.GetName())
		return true, got, err
	})
}

// Watches records the watches client's informers open, so that a test starts its
// controller only once they are open: the fake API server sends a watch what is stored
// past the list's resourceVersion but never a deletion made between the list and the
// watch, so a pod the controller deletes in that gap never leaves the informer's cache
// and the controller waits for ever for the deletion it expects.
type Watches struct {
	mu     sync.Mutex
	opened map[string]bool // by resource
}

// TrackWatches makes client record the watches opened on it.
func TrackWatches(client *fake.Clientset) *Watches {
	w := &Watches{opened: map[string]bool{}}
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(clienttesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		ch, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		w.mu.Lock()
		w.opened[a.GetResource().Resource] = true
		w.mu.Unlock()
		return true, ch, nil
	})
	return w
}

// Wait waits until a watch of each resource (plural, e.g. "pods") is open, failing t
// after 10 s.
func (w *Watches) Wait(t testing.TB, resources ...string) {
	t.Helper()
	open := func(context.Context) (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !slices.ContainsFunc(resources, func(r string) bool { return !w.opened[r] }), nil
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, open); err != nil {
		t.Fatalf("watches of %v not all opened in 10s: %v", resources, err)
	}
}

package controllertest

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kshard/kshard/pkg/controllers"
)

// Fixture is what a controller's unit-test fixture is built on: a fake API server
// (Client), informer caches the test fills by hand (Cache; the informers never run, so
// "informer lag" is an object not yet cached), a Queue and an event Recorder. A
// controller's fixture embeds it, builds its controller from ControllerContext and sets
// SyncFunc to the controller's sync; it keeps only what is its controller's own (reactors,
// objects, what it reads back).
type Fixture struct {
	T        testing.TB
	Client   *fake.Clientset
	Factory  informers.SharedInformerFactory
	Queue    *Queue
	Recorder *record.FakeRecorder
	// SyncFunc is the controller's sync, which Sync and MustSync run.
	SyncFunc controllers.SyncFunc

	descriptor controllers.Descriptor
}

// NewFixture returns a Fixture for d's controller whose fake API server holds objs (its
// caches are empty: see Cache and Seed).
func NewFixture(t testing.TB, d controllers.Descriptor, objs ...runtime.Object) *Fixture {
	t.Helper()
	f := &Fixture{T: t, Client: fake.NewClientset(objs...), descriptor: d}
	f.Restart()
	return f
}

// Restart gives the fixture empty caches, a new queue and a new recorder on the same fake
// API server, as a restarted process (or a namespace's next owner) starts; the fixture
// then builds its controller again from ControllerContext.
func (f *Fixture) Restart() {
	f.Recorder = record.NewFakeRecorder(1000)
	f.Factory = informers.NewSharedInformerFactory(f.Client, 0)
	factory := f.Factory
	f.T.Cleanup(func() { forgetSelected(factory) })
	f.Queue = NewQueue()
	f.T.Cleanup(f.Queue.ShutDown)
	f.SyncFunc = nil
}

// ControllerContext returns what to build the controller with: the fixture's informers
// (checked against the descriptor's reads, as in a shard), queue, client and recorder, a
// logger of the test's, and writes always allowed. The fixture sets the other fields
// (Metadata, …) its controller needs.
func (f *Fixture) ControllerContext() controllers.Context {
	c := Context(f.descriptor, f.Factory, f.Queue)
	c.Client, c.Recorder, c.Logger = f.Client, f.Recorder, Logger(f.T)
	return c
}

// TestContext returns a context whose logger writes to the test's log.
func (f *Fixture) TestContext() context.Context {
	_, ctx := ktesting.NewTestContext(f.T)
	return ctx
}

// Logger returns a logger that writes to t's log.
func Logger(t testing.TB) klog.Logger {
	log, _ := ktesting.NewTestContext(t)
	return log
}

// Indexer returns the cache of obj's type, failing the test if there is none.
func (f *Fixture) Indexer(obj runtime.Object) toolscache.Indexer {
	f.T.Helper()
	idx, err := Informers{SharedInformerFactory: f.Factory}.Indexer(obj)
	if err != nil {
		f.T.Fatal(err)
	}
	return idx
}

// Cache puts objs into the controller's caches (or replaces them there) without running
// event handlers.
func (f *Fixture) Cache(objs ...runtime.Object) {
	f.T.Helper()
	Informers{SharedInformerFactory: f.Factory}.Add(f.T, objs...)
}

// Uncache removes objs from the controller's caches without running event handlers.
func (f *Fixture) Uncache(objs ...runtime.Object) {
	f.T.Helper()
	Informers{SharedInformerFactory: f.Factory}.Delete(f.T, objs...)
}

// Seed caches objs, then forgets what building the fixture did: the keys queued and the
// requests recorded so far are not what a test looks at.
func (f *Fixture) Seed(objs ...runtime.Object) {
	f.T.Helper()
	f.Cache(objs...)
	f.Queue.Keys()
	f.Client.ClearActions()
}

// Sync runs one sync of key, logging to the test's log.
func (f *Fixture) Sync(key string) error {
	return f.SyncFunc(f.TestContext(), key)
}

// MustSync runs one sync of key and fails the test if it fails.
func (f *Fixture) MustSync(key string) {
	f.T.Helper()
	if err := f.Sync(key); err != nil {
		f.T.Fatalf("sync %s: %v", key, err)
	}
}

// Events drains the recorded events ("Type Reason Message").
func (f *Fixture) Events() []string {
	var out []string
	for {
		select {
		case e := <-f.Recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// EventReasons drains the recorded events and counts them by "Type Reason".
func (f *Fixture) EventReasons() map[string]int {
	out := map[string]int{}
	for _, e := range f.Events() {
		parts := strings.SplitN(e, " ", 3)
		out[parts[0]+" "+parts[1]]++
	}
	return out
}

// ActionFormat says how Actions describes a request.
type ActionFormat uint

// Writes lists the requests that change something (not get, list or watch), named where
// the request names an object (a delete or a patch).
const Writes ActionFormat = 0

// What Actions adds to Writes; combine them with |.
const (
	// Reads lists get, list and watch requests too (a get named).
	Reads ActionFormat = 1 << iota
	// ObjectNames names creates and updates by the object they carry.
	ObjectNames
	// Namespaced writes names as namespace/name (the request's namespace).
	Namespaced
)

// Actions describes the requests client recorded, in order, as "verb resource[/subresource]
// [name]", as format says.
func Actions(client *fake.Clientset, format ActionFormat) []string {
	var out []string
	for _, a := range client.Actions() {
		verb := a.GetVerb()
		if format&Reads == 0 && (verb == "get" || verb == "list" || verb == "watch") {
			continue
		}
		s := verb + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		name := ""
		switch a := a.(type) {
		case interface{ GetName() string }: // get, delete, patch
			name = a.GetName()
		case interface{ GetObject() runtime.Object }: // create, update
			if m, ok := a.GetObject().(metav1.Object); ok && format&ObjectNames != 0 {
				name = m.GetName()
			}
		}
		if name != "" {
			if format&Namespaced != 0 {
				name = a.GetNamespace() + "/" + name
			}
			s += " " + name
		}
		out = append(out, s)
	}
	return out
}

// Count returns how many of the requests client recorded are verb on resource (not on a
// subresource).
func Count(client *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			n++
		}
	}
	return n
}

package app

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/placement"
)

// fakeSource is a namespaceSource whose events the test sends by hand.
type fakeSource struct {
	store   cache.Store
	synced  bool
	mu      sync.Mutex
	handler cache.ResourceEventHandler
}

func (f *fakeSource) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler = h
	return nil, nil
}
func (f *fakeSource) HasSynced() bool       { f.mu.Lock(); defer f.mu.Unlock(); return f.synced }
func (f *fakeSource) GetStore() cache.Store { return f.store }

func namespaceMeta(name string, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

func (f *fakeSource) add(t *testing.T, obj runtime.Object) {
	t.Helper()
	if err := f.store.Add(obj); err != nil {
		t.Fatal(err)
	}
	f.handler.OnAdd(obj, false)
}

func (f *fakeSource) update(t *testing.T, old, cur runtime.Object) {
	t.Helper()
	if err := f.store.Update(cur); err != nil {
		t.Fatal(err)
	}
	f.handler.OnUpdate(old, cur)
}

// TestNamespaceWatch: nothing is published before the informer synced; then at once;
// then a burst of changes gives one update per placementDebounce, with what the informer
// holds at that time; updates that do not touch the pin annotation publish nothing.
func TestNamespaceWatch(t *testing.T) {
	pm, err := partition.NewMap(8)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	got := make(chan placement.Inputs, 100)
	w, err := newNamespaceWatch(src, pm, placement.Rules{AnnotationGroups: []string{"hot"}}, func(in placement.Inputs) { got <- in }, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	w.clock = clk
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()

	total := func(in placement.Inputs) (n uint32) {
		for _, c := range in.Namespaces {
			n += c
		}
		return n
	}
	next := func(what string) placement.Inputs {
		t.Helper()
		select {
		case in := <-got:
			return in
		case <-time.After(10 * time.Second):
			t.Fatalf("no update: %s", what)
		}
		return placement.Inputs{}
	}
	none := func(what string) {
		t.Helper()
		// The loop waits on the clock only after it published or found nothing to do:
		// once it waits there, no update is under way.
		waitUntil(t, "the watch waiting on its clock", clk.HasWaiters)
		select {
		case in := <-got:
			t.Fatalf("%s: unexpected update with %d namespaces", what, total(in))
		default:
		}
	}

	src.add(t, namespaceMeta("ns-0", nil))
	select {
	case <-got:
		t.Fatal("published before the informer synced")
	case <-time.After(150 * time.Millisecond): // WaitForCacheSync polls every 100ms
	}
	src.mu.Lock()
	src.synced = true
	src.mu.Unlock()
	if in := next("after the sync"); total(in) != 1 {
		t.Fatalf("first update counts %d namespaces, want 1", total(in))
	}

	// A burst: nothing before the debounce has passed, then one update with all of it.
	for i := 1; i <= 20; i++ {
		src.add(t, namespaceMeta(fmt.Sprintf("ns-%d", i), nil))
	}
	none("within the debounce")
	clk.Step(placementDebounce)
	if in := next("after the debounce"); total(in) != 21 {
		t.Fatalf("update counts %d namespaces, want 21", total(in))
	}
	// Published, the loop waits on the clock again, the burst's pokes all taken: no
	// second update for it.
	waitUntil(t, "the watch waiting on its clock", clk.HasWaiters)
	if n := len(w.changed); n != 0 {
		t.Fatalf("%d changes pending after the burst was published, want 0", n)
	}

	// An update that leaves the annotation alone (labels, status) is no change.
	old := namespaceMeta("ns-1", nil)
	labelled := namespaceMeta("ns-1", nil)
	labelled.Labels = map[string]string{"a": "b"}
	src.update(t, old, labelled)
	if n := len(w.changed); n != 0 {
		t.Fatalf("%d changes pending after an update of labels, want 0", n)
	}

	// The annotation changes: its partition is pinned at the next update.
	annotated := namespaceMeta("ns-1", map[string]string{placement.Annotation: "hot"})
	src.update(t, labelled, annotated)
	none("within the debounce")
	clk.Step(placementDebounce)
	in := next("after the annotation")
	if pin := in.Pins[pm.For("ns-1")]; pin.Group != "hot" || pin.Source != "annotation: ns-1" {
		t.Fatalf("pin of ns-1's partition = %+v, want hot from its annotation", pin)
	}
	cancel()
	<-done
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

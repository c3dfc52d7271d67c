package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/sharding/served"
)

// changingDiscovery serves the resource lists the test sets.
type changingDiscovery struct {
	discovery.ServerResourcesInterface
	mu    sync.Mutex
	lists []*metav1.APIResourceList
}

func (d *changingDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lists, nil
}

func (d *changingDiscovery) set(lists ...*metav1.APIResourceList) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists = lists
}

// plainInformers hands out unstarted informers.
type plainInformers struct{}

func (plainInformers) Informer(served.Resource) (toolscache.SharedIndexInformer, error) {
	return toolscache.NewSharedIndexInformer(&toolscache.ListWatch{}, &metav1.PartialObjectMetadata{}, 0, nil), nil
}
func (plainInformers) Remove(served.Resource) error { return nil }

// added sends the resource of every Added call.
type added chan string

func (a added) Added(r controllers.ServedResource, _ toolscache.SharedIndexInformer) { a <- r.Resource }
func (a added) Removed(controllers.ServedResource)                                   {}

// TestRunDiscovery: the first round runs before runDiscovery returns, and later rounds
// pick up a resource served afterwards (a CRD created while the shard runs).
func TestRunDiscovery(t *testing.T) {
	verbs := metav1.Verbs{"delete", "list", "watch"}
	d := &changingDiscovery{}
	d.set(&metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: verbs}}})
	hub := &servedHub{}
	got := make(added, 4)
	hub.forController(controllers.Descriptor{Name: "gc", Served: &controllers.ServedResources{Verbs: []string{"delete", "list", "watch"}}}).Subscribe(got)
	loop, err := served.NewLoop(d, plainInformers{}, logr.Discard(), hub.consumers...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDiscovery(ctx, loop, 10*time.Millisecond, logr.Discard())
	select {
	case r := <-got:
		if r != "pods" {
			t.Fatalf("first round added %s, want pods", r)
		}
	default:
		t.Fatal("runDiscovery returned before its first round")
	}
	d.set(&metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: verbs}}},
		&metav1.APIResourceList{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: verbs}}})
	select {
	case r := <-got:
		if r != "widgets" {
			t.Fatalf("a later round added %s, want widgets", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a resource served after the first round was never added")
	}
}

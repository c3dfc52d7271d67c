package app

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/served"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
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

// TestServedInformersShareTyped: a served resource the cache holds typed is handed out
// as that typed informer, not cached a second time as metadata. Namespaces are always
// among them (the cache maps namespaces to partitions with them), whatever the enabled
// controllers read.
func TestServedInformersShareTyped(t *testing.T) {
	namespaces := corev1.SchemeGroupVersion.WithResource("namespaces")
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	secrets := corev1.SchemeGroupVersion.WithResource("secrets")
	withTypedPods := controllers.Descriptor{Name: "quota", Reads: []controllers.Resource{controllers.Typed(pods), controllers.MetadataOnly(secrets)}}
	tests := []struct {
		name    string
		enabled []controllers.Descriptor
		r       served.Resource
		typed   bool
	}{
		{name: "namespaces with no controller reading them", r: served.Resource{GroupVersionResource: namespaces, Kind: "Namespace"}, typed: true},
		{name: "namespaces with controllers enabled", enabled: []controllers.Descriptor{withTypedPods}, r: served.Resource{GroupVersionResource: namespaces, Kind: "Namespace"}, typed: true},
		{name: "pods a controller reads typed", enabled: []controllers.Descriptor{withTypedPods}, r: served.Resource{GroupVersionResource: pods, Kind: "Pod", Namespaced: true}, typed: true},
		{name: "pods nobody reads typed", r: served.Resource{GroupVersionResource: pods, Kind: "Pod", Namespaced: true}},
		{name: "secrets read as metadata", enabled: []controllers.Descriptor{withTypedPods}, r: served.Resource{GroupVersionResource: secrets, Kind: "Secret", Namespaced: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mc := metadatafake.NewSimpleMetadataClient(runtime.NewScheme())
			c, err := shardcache.New(fake.NewClientset(), func(string) partition.ID { return 0 }, shardcache.Options{MetadataClient: mc})
			if err != nil {
				t.Fatal(err)
			}
			inf, err := servedInformers{cache: c, metadata: mc, typed: typedResources(tt.enabled)}.Informer(tt.r)
			if err != nil {
				t.Fatal(err)
			}
			typedInf, err := c.Informer(shardcache.Key{Resource: tt.r.GroupVersionResource})
			if err != nil {
				t.Fatal(err)
			}
			if got := inf == typedInf; got != tt.typed {
				t.Errorf("shares the typed informer: %t, want %t", got, tt.typed)
			}
		})
	}
}

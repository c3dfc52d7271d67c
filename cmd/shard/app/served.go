package app

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/sharding/served"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
)

// Serving the controllers that act on every resource the API server serves (the garbage
// collector, ResourceQuota): one discovery loop per shard for all of them, whose informers
// come from the shard's cache.

// discoveryPeriod is --served-discovery-period's default: how often the shard discovers
// served resources again (a CRD created or deleted, an aggregated API registered),
// kube-controller-manager's garbage collector and quota controller's period.
const discoveryPeriod = 30 * time.Second

// firstDiscoveryTimeout bounds the first round, run before the cache starts so that the
// served informers are filled by the first assignment's lists: a shard whose API server's
// discovery is slow still starts, and the next round adds what this one missed.
const firstDiscoveryTimeout = 10 * time.Second

// servedHub collects, while controllers are built, the consumers of served resources: one
// per controller whose Descriptor asks for Served.
type servedHub struct {
	// failing reports an optional informer whose lists fail (Cache.ListsFailing).
	failing   func(gvr schema.GroupVersionResource) bool
	consumers []*served.Consumer
	// counters count failed discovery rounds (controllers.DiscoveryFailureCounter).
	counters []controllers.DiscoveryFailureCounter
}

// forController returns d's Context.Served (nil when d asks for none).
func (h *servedHub) forController(d controllers.Descriptor) controllers.ServedInformers {
	if d.Served == nil {
		return nil
	}
	f := &subscribers{failing: h.failing}
	h.consumers = append(h.consumers, &served.Consumer{
		Name:       d.Name,
		Spec:       served.Spec{Verbs: d.Served.Verbs, NamespacedOnly: d.Served.NamespacedOnly, Ignore: d.Served.Ignore},
		Subscriber: f,
	})
	return f
}

// loop returns the discovery loop over the hub's consumers, nil when there are none.
func (h *servedHub) loop(d discovery.ServerResourcesInterface, c *shardcache.Cache, mc metadata.Interface, typed map[schema.GroupVersionResource]bool, log logr.Logger) (*served.Loop, error) {
	if len(h.consumers) == 0 {
		return nil, nil
	}
	loop, err := served.NewLoop(d, servedInformers{cache: c, metadata: mc, typed: typed}, log.WithName("served"), h.consumers...)
	if err != nil {
		return nil, err
	}
	loop.OnDiscoveryFailure(func() {
		for _, c := range h.counters {
			c.DiscoveryFailed()
		}
	})
	return loop, nil
}

// runDiscovery runs loop's first round, bounded by firstDiscoveryTimeout, then a round
// every period until ctx ends, in the background.
func runDiscovery(ctx context.Context, loop *served.Loop, period time.Duration, log logr.Logger) {
	first := make(chan struct{})
	go func() {
		defer close(first)
		if err := loop.Sync(); err != nil {
			log.Error(err, "First discovery of served resources incomplete; the next round tries again", "period", period)
		}
	}()
	select {
	case <-first:
	case <-time.After(firstDiscoveryTimeout):
		log.Info("First discovery of served resources still running; the controllers that need them start without some", "timeout", firstDiscoveryTimeout)
	}
	go func() {
		<-first
		select {
		case <-time.After(period):
		case <-ctx.Done():
			return
		}
		loop.Run(ctx, period)
	}()
}

// subscribers is one controller's Context.Served: what its constructor subscribed, told of
// each change in order.
type subscribers struct {
	mu      sync.Mutex
	subs    []controllers.ServedSubscriber
	failing func(gvr schema.GroupVersionResource) bool
}

// Failing reports whether r's lists fail now.
func (f *subscribers) Failing(r controllers.ServedResource) bool {
	return f.failing != nil && f.failing(r.GroupVersionResource)
}

// Subscribe registers s.
func (f *subscribers) Subscribe(s controllers.ServedSubscriber) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, s)
}

// Added tells every subscriber that r is served.
func (f *subscribers) Added(r served.Resource, inf toolscache.SharedIndexInformer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		s.Added(servedResource(r), inf)
	}
}

// Removed tells every subscriber that r is gone.
func (f *subscribers) Removed(r served.Resource) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subs {
		s.Removed(servedResource(r))
	}
}

func servedResource(r served.Resource) controllers.ServedResource {
	return controllers.ServedResource{GroupVersionResource: r.GroupVersionResource, Kind: r.Kind, Namespaced: r.Namespaced}
}

// servedInformers are served.Informers from the shard's cache: the typed informer of a
// resource another enabled controller reads typed (shared, as kube-controller-manager's
// informer factory shares it), otherwise an optional metadata-only one, which nothing
// waits for while its lists fail (an aggregated API that is down).
type servedInformers struct {
	cache    *shardcache.Cache
	metadata metadata.Interface
	typed    map[schema.GroupVersionResource]bool
}

func (s servedInformers) Informer(r served.Resource) (toolscache.SharedIndexInformer, error) {
	if s.typed[r.GroupVersionResource] {
		return s.cache.Informer(shardcache.Key{Resource: r.GroupVersionResource})
	}
	rt := shardcache.MetadataType(r.GroupVersionResource, !r.Namespaced, s.metadata)
	// A resource of the API server's own groups lists as reliably as the typed ones: it
	// is waited for, so that a controller counting it (ResourceQuota's count/secrets)
	// never reads a partial store. CRDs and aggregated APIs are optional.
	rt.Optional = !builtinGroup(r.Group)
	return s.cache.InformerFor(rt), nil
}

func (s servedInformers) Remove(r served.Resource) error {
	if s.typed[r.GroupVersionResource] {
		return nil // other controllers read it
	}
	return s.cache.Remove(shardcache.Key{Resource: r.GroupVersionResource, Metadata: true})
}

// builtinGroup reports whether group is one of kube-apiserver's own (client-go's scheme
// knows it).
func builtinGroup(group string) bool {
	return scheme.Scheme.IsGroupRegistered(group)
}

// typedResources returns the resources the shard's cache holds typed: those the enabled
// controllers read typed, and Namespaces, which the cache always holds typed to map
// namespaces to partitions. A controller asking for every served resource shares those
// informers rather than caching the same objects a second time as metadata, as
// kube-controller-manager's garbage collector shares its typed informers.
func typedResources(enabled []controllers.Descriptor) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{shardcache.NamespacesResource: true}
	for _, d := range enabled {
		for _, r := range d.Resources() {
			if !r.Metadata {
				out[r.GroupVersionResource] = true
			}
		}
	}
	return out
}

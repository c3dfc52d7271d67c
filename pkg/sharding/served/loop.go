package served

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	toolscache "k8s.io/client-go/tools/cache"
)

// The discovery loop of a shard: one discovery per round, shared by every consumer (the
// garbage collector and ResourceQuota ask for different Specs of the same resources). It
// keeps:
//   - A consumer hears Added for a resource before any Removed of it, and Removed only for
//     a resource it heard Added for; both from the loop's goroutine, in round order.
//   - An informer is asked for once while any consumer wants its resource, and removed
//     once none does (counted per resource): consumers share informers.
//   - A round whose discovery fails as a whole changes nothing; a group whose discovery
//     fails keeps its resources (Tracker).

// Informers is what the loop needs of the shard's cache: a metadata-only informer of a
// served resource, started at once and sharded like every other (namespaced: only the
// shard's partitions), and its removal once no consumer wants it.
type Informers interface {
	Informer(r Resource) (toolscache.SharedIndexInformer, error)
	Remove(r Resource) error
}

// Subscriber is a consumer of served resources: a controller that acts on each of them.
type Subscriber interface {
	// Added hands it a resource that is now served and wanted, with its informer.
	Added(r Resource, informer toolscache.SharedIndexInformer)
	// Removed says a resource it was handed is no longer served: drop its informer.
	Removed(r Resource)
}

// Consumer is one Spec and whom to tell of its changes.
type Consumer struct {
	Name       string
	Spec       Spec
	Subscriber Subscriber
	tracker    Tracker
}

// Loop runs discovery rounds for its consumers.
type Loop struct {
	discovery discovery.ServerResourcesInterface
	informers Informers
	consumers []*Consumer
	log       logr.Logger
	// wanted counts, per resource, the consumers that want it now, and have holds its
	// informer meanwhile.
	wanted map[schema.GroupVersionResource]int
	have   map[schema.GroupVersionResource]toolscache.SharedIndexInformer
	// onFailure is called for each round whose discovery failed, wholly or for some
	// groups, or found nothing (OnDiscoveryFailure).
	onFailure func()
}

// OnDiscoveryFailure has f called, from the loop's goroutine, for each round whose
// discovery failed wholly or for some groups, or found no resource: for a controller
// that counts them (the garbage collector's
// garbagecollector_controller_resources_sync_error_total). Call it before the first round.
func (l *Loop) OnDiscoveryFailure(f func()) { l.onFailure = f }

func (l *Loop) failed() {
	if l.onFailure != nil {
		l.onFailure()
	}
}

// NewLoop returns a loop over d for consumers, whose informers come from informers.
func NewLoop(d discovery.ServerResourcesInterface, informers Informers, log logr.Logger, consumers ...*Consumer) (*Loop, error) {
	if d == nil || informers == nil {
		return nil, fmt.Errorf("served: NewLoop needs a discovery client and informers")
	}
	for _, c := range consumers {
		if c.Subscriber == nil {
			return nil, fmt.Errorf("served: consumer %q has no Subscriber", c.Name)
		}
		if err := c.Spec.Validate(); err != nil {
			return nil, fmt.Errorf("served: consumer %q: %w", c.Name, err)
		}
	}
	return &Loop{discovery: d, informers: informers, consumers: consumers, log: log,
		wanted: map[schema.GroupVersionResource]int{}, have: map[schema.GroupVersionResource]toolscache.SharedIndexInformer{}}, nil
}

// Sync runs one round: one discovery, then, for each consumer, the resources that appeared
// (informer asked for, Added) and those that are gone (Removed, informer removed once no
// consumer wants it). It returns the discovery's error, or the first informer error (the
// resource is then left out and tried again next round).
func (l *Loop) Sync() error {
	lists, failed, err := Preferred(l.discovery)
	if err != nil {
		l.failed()
		return err
	}
	if len(failed) > 0 || len(lists) == 0 {
		l.failed()
	}
	if len(lists) == 0 {
		// Upstream skips such a round too: an empty answer would remove every resource.
		return fmt.Errorf("served: discovery found no resource; the served resources stay as they were")
	}
	for gv, gerr := range failed {
		l.log.Info("Discovery failed for a group; its resources are kept as they were", "groupVersion", gv.String(), "err", gerr.Error())
	}
	var firstErr error
	for _, c := range l.consumers {
		added, removed := c.tracker.Update(c.Spec.Select(lists), failed)
		for _, r := range removed {
			c.Subscriber.Removed(r)
			if err := l.release(r); err != nil && firstErr == nil {
				firstErr = err
			}
			l.log.Info("Served resource gone", "consumer", c.Name, "resource", r.GroupVersionResource.String())
		}
		for _, r := range added {
			inf, err := l.informerOf(r)
			if err != nil {
				// Left out of the tracker so that the next round tries again.
				c.tracker.forget(r)
				if firstErr == nil {
					firstErr = fmt.Errorf("served: informer of %s: %w", r.GroupVersionResource, err)
				}
				continue
			}
			l.wanted[r.GroupVersionResource]++
			c.Subscriber.Added(r, inf)
			l.log.V(2).Info("Served resource found", "consumer", c.Name, "resource", r.GroupVersionResource.String())
		}
	}
	return firstErr
}

// informerOf returns r's informer, asking the cache only if no consumer has it yet.
func (l *Loop) informerOf(r Resource) (toolscache.SharedIndexInformer, error) {
	if inf := l.have[r.GroupVersionResource]; inf != nil {
		return inf, nil
	}
	inf, err := l.informers.Informer(r)
	if err != nil {
		return nil, err
	}
	l.have[r.GroupVersionResource] = inf
	return inf, nil
}

// release counts one consumer less for r and removes its informer when none is left.
func (l *Loop) release(r Resource) error {
	gvr := r.GroupVersionResource
	if l.wanted[gvr]--; l.wanted[gvr] > 0 {
		return nil
	}
	delete(l.wanted, gvr)
	delete(l.have, gvr)
	return l.informers.Remove(r)
}

// Run runs a round now and then every period until ctx ends (upstream's discovery period
// is 30 s); a round that fails is logged and the next one tries again.
func (l *Loop) Run(ctx context.Context, period time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) {
		if err := l.Sync(); err != nil {
			l.log.Error(err, "Discovery round failed; the served resources stay as they were")
		}
	}, period)
}

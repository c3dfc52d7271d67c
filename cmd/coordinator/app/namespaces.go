package app

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/placement"
)

// placementDebounce is the least time between two placement updates: each costs a pass
// over every Namespace in the informer and O(partitions) under the lock every heartbeat
// needs, while a burst of namespace creations (a test suite, a tenant onboarding) would
// otherwise ask for one per namespace. The balancer plans at most once a
// --membership-debounce or a --balance-interval anyway.
const placementDebounce = time.Second

// namespaceSource is what namespaceWatch needs of a Namespace informer (a
// cache.SharedIndexInformer of metadata: the owner labeler's with --shard-fence, else
// one of the coordinator's own).
type namespaceSource interface {
	AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	HasSynced() bool
	GetStore() cache.Store
}

// namespaceWatch feeds coordinatorrpc.Server.SetPlacement from a Namespace informer:
// every partition's namespace count and the pins of the flags and of the namespaces'
// placement.Annotation (placement.Resolve), once when the informer has synced and then
// after every change that matters (a namespace added or deleted, its annotation changed),
// at most once per placementDebounce. It runs in every replica, so that a follower that
// takes over has its counts at once.
type namespaceWatch struct {
	source  namespaceSource
	pm      partition.Map
	rules   placement.Rules
	set     func(placement.Inputs)
	clock   clock.Clock
	every   time.Duration
	log     logr.Logger
	changed chan struct{} // one pending change at most

	// What was last logged: new and resolved conflicts and changed counts of ignored
	// annotations are logged once, not on every update.
	conflicts map[partition.ID]string
	ignored   map[string]int
}

// newNamespaceWatch registers the watch's handler on source.
func newNamespaceWatch(source namespaceSource, pm partition.Map, rules placement.Rules, set func(placement.Inputs), log logr.Logger) (*namespaceWatch, error) {
	w := &namespaceWatch{source: source, pm: pm, rules: rules, set: set, clock: clock.RealClock{}, every: placementDebounce,
		log: log.WithName("placement"), changed: make(chan struct{}, 1), conflicts: map[partition.ID]string{}}
	_, err := source.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { w.poke() },
		UpdateFunc: func(old, cur any) {
			if annotationOf(old) != annotationOf(cur) {
				w.poke()
			}
		},
		DeleteFunc: func(any) { w.poke() },
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (w *namespaceWatch) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// pinAnnotation is a namespace's placement.Annotation, and whether it has one.
type pinAnnotation struct {
	value   string
	present bool
}

func annotationOf(obj any) pinAnnotation {
	m, ok := obj.(metav1.Object)
	if !ok {
		return pinAnnotation{}
	}
	v, present := m.GetAnnotations()[placement.Annotation]
	return pinAnnotation{value: v, present: present}
}

// run publishes until ctx ends; nothing before the informer has synced (a count from a
// partial list would place partitions as if the rest were empty).
func (w *namespaceWatch) run(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), w.source.HasSynced) {
		return
	}
	for {
		w.publish()
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(w.every):
		}
		select {
		case <-ctx.Done():
			return
		case <-w.changed:
		}
	}
}

// publish resolves what the informer holds now and hands it on.
func (w *namespaceWatch) publish() {
	objs := w.source.GetStore().List()
	nss := make([]placement.Namespace, 0, len(objs))
	for _, o := range objs {
		m, ok := o.(metav1.Object)
		if !ok {
			continue
		}
		a := annotationOf(o)
		nss = append(nss, placement.Namespace{Name: m.GetName(), Group: a.value, Annotated: a.present})
	}
	in := placement.Resolve(w.pm, w.rules, nss)
	w.logChanges(in, len(nss))
	w.set(in)
}

// logChanges logs what changed since the last publish that an operator must see: a pin
// conflict (the partition is unpinned while it lasts), its end, and annotations ignored.
func (w *namespaceWatch) logChanges(in placement.Inputs, namespaces int) {
	if w.ignored == nil {
		w.log.Info("namespace counts and pins ready", "namespaces", namespaces, "pinnedPartitions", len(in.Pins))
	}
	now := map[partition.ID]string{}
	for _, p := range in.Conflicts() {
		src := in.Pins[p].Source
		now[p] = src
		if w.conflicts[p] != src {
			w.log.Info("WARNING: pins of one partition name different shard groups: the partition is unpinned while they do",
				"partition", p, "pins", src)
		}
	}
	for p := range w.conflicts {
		if _, still := now[p]; !still {
			w.log.Info("pin conflict resolved", "partition", p, "pin", in.Pins[p].Group, "source", in.Pins[p].Source)
		}
	}
	w.conflicts = now
	if w.ignored == nil || w.ignored[placement.IgnoredInvalid] != in.Ignored[placement.IgnoredInvalid] ||
		w.ignored[placement.IgnoredNotAllowed] != in.Ignored[placement.IgnoredNotAllowed] {
		if in.Ignored[placement.IgnoredInvalid]+in.Ignored[placement.IgnoredNotAllowed] > 0 {
			w.log.Info("ignoring "+placement.Annotation+" annotations: not a DNS-1123 label, or a group not in --pin-annotation-groups",
				"invalid", in.Ignored[placement.IgnoredInvalid], "notAllowed", in.Ignored[placement.IgnoredNotAllowed],
				"allowedGroups", w.rules.AnnotationGroups)
		}
	}
	w.ignored = in.Ignored
}

// start runs the namespace watch that placement by load needs (nothing with placement
// by count), on the owner labeler's Namespace informer when the fence runs one, else on
// a metadata informer of its own; both run until ctx ends.
func (o PlacementOptions) start(ctx context.Context, cfg *rest.Config, pm partition.Map, labeler *ownerrecord.Labeler,
	set func(placement.Inputs), log logr.Logger) error {
	if o.Mode != PlacementLoad {
		return nil
	}
	rules, err := o.rules(pm.Count)
	if err != nil {
		return err
	}
	var source cache.SharedIndexInformer
	if labeler != nil {
		source = labeler.NamespaceInformer() // started by the labeler's Run
	} else {
		meta, err := metadata.NewForConfig(cfg)
		if err != nil {
			return err
		}
		source = metadatainformer.NewFilteredMetadataInformer(meta, corev1.SchemeGroupVersion.WithResource("namespaces"), metav1.NamespaceAll, 0,
			cache.Indexers{}, nil).Informer()
		go source.RunWithContext(ctx)
	}
	w, err := newNamespaceWatch(source, pm, rules, set, log)
	if err != nil {
		return err
	}
	go w.run(ctx)
	log.Info("placement by load", "balance", o.Balance, "interval", o.Interval.String(), "warmup", o.Warmup.String(), "cooldown", o.Cooldown.String(),
		"namespaceInformer", map[bool]string{true: "owner labeler's", false: "own"}[labeler != nil],
		"pinnedNamespaces", len(rules.Namespaces), "pinnedPartitions", len(rules.Partitions), "annotationGroups", rules.AnnotationGroups)
	return nil
}

package ownerrecord

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// partitionIndex indexes namespaces by the partition their name hashes to (not by
// their label, which may be missing or wrong until the Labeler has fixed it).
const partitionIndex = "kshard.io/partition-of-name"

// LabelerOptions tune a Labeler.
type LabelerOptions struct {
	// Selector is a label selector restricting the namespaces labelled; empty means all,
	// which is what production wants (the fence refuses shard writes in an unlabelled
	// namespace). Tests use it to keep their hands off the rest of a shared cluster.
	Selector string
	// Workers is the number of concurrent patchers (default 2). A patch is one cheap
	// request; more workers only matter for the first pass over a large cluster.
	Workers int
	// Resync re-examines every namespace this often (default 10 minutes), a safety net
	// for a patch lost in a way the workqueue's retries did not catch.
	Resync time.Duration
}

// Labeler keeps the label kshard.io/partition=<partition.Map.For(name)> on every
// Namespace. The fence policy reads a namespace's partition from this label (CEL cannot
// hash a name), so a namespace without it refuses every shard write and one with a wrong
// value would be fenced by the wrong partition's owner; the Labeler puts it right.
//
// It is a sample-controller-style loop: a metadata-only Namespace informer (labels are
// all it needs, so it caches no spec or status), a typed rate-limited workqueue of names,
// and a JSON merge patch of the one label only when it is missing or wrong. It runs in
// the coordinator's leader, which owns the partition map. A label is stable: it only
// changes if the partition count changed, which a running deployment never does.
type Labeler struct {
	client   metadata.Interface
	pm       partition.Map
	opts     LabelerOptions
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	patches  atomic.Int64
}

// NewLabeler returns a Labeler of the namespaces client sees, for the partitions of pm.
// Call Run to start it.
func NewLabeler(client metadata.Interface, pm partition.Map, opts LabelerOptions) (*Labeler, error) {
	if err := pm.Validate(); err != nil {
		return nil, err
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Minute
	}
	l := &Labeler{
		client: client,
		pm:     pm,
		opts:   opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kshard_partition_labeler"},
		),
	}
	l.informer = metadatainformer.NewFilteredMetadataInformer(client, corev1.SchemeGroupVersion.WithResource("namespaces"),
		metav1.NamespaceAll, opts.Resync,
		cache.Indexers{partitionIndex: l.indexByPartition},
		func(o *metav1.ListOptions) { o.LabelSelector = opts.Selector },
	).Informer()
	if _, err := l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.enqueue,
		UpdateFunc: func(_, obj any) { l.enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// Run starts the informer and the workers and blocks until ctx is done. It returns an
// error only when the informer cannot sync.
func (l *Labeler) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer l.queue.ShutDown()
	logger := klog.FromContext(ctx).WithName("partition-labeler")
	go l.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return fmt.Errorf("partition labeler: namespace informer did not sync: %w", context.Cause(ctx))
	}
	logger.Info("partition labeler started", "namespaces", len(l.informer.GetStore().ListKeys()), "workers", l.opts.Workers)
	for range l.opts.Workers {
		go wait.UntilWithContext(ctx, l.runWorker, time.Second)
	}
	<-ctx.Done()
	return nil
}

// HasSynced reports whether the informer has listed every namespace once.
func (l *Labeler) HasSynced() bool { return l.informer.HasSynced() }

// Patches counts the label patches that succeeded: zero in steady state, one per new
// namespace.
func (l *Labeler) Patches() int64 { return l.patches.Load() }

// NamespacesOf returns the names of the namespaces (known to the informer) whose name
// hashes to partition p, sorted: where a Prober can probe p's owner.
func (l *Labeler) NamespacesOf(p partition.ID) []string {
	objs, err := l.informer.GetIndexer().ByIndex(partitionIndex, Key(p))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			out = append(out, m.GetName())
		}
	}
	sort.Strings(out)
	return out
}

// Labeled reports whether the informer's copy of namespace name carries the right
// partition label.
func (l *Labeler) Labeled(name string) bool {
	o, ok, err := l.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return false
	}
	m, ok := o.(metav1.Object)
	return ok && m.GetLabels()[PartitionLabel] == l.want(name)
}

// Probeable reports whether namespace name can host a fence probe now: it is labelled
// for its partition and not terminating (a terminating namespace refuses every create).
func (l *Labeler) Probeable(name string) bool {
	o, ok, err := l.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return false
	}
	m, ok := o.(metav1.Object)
	return ok && m.GetDeletionTimestamp() == nil && m.GetLabels()[PartitionLabel] == l.want(name)
}

func (l *Labeler) want(name string) string { return Key(l.pm.For(name)) }

func (l *Labeler) indexByPartition(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	return []string{l.want(m.GetName())}, nil
}

// enqueue queues a namespace whose label is not what it should be.
func (l *Labeler) enqueue(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	if m.GetLabels()[PartitionLabel] != l.want(m.GetName()) {
		l.queue.Add(m.GetName())
	}
}

func (l *Labeler) runWorker(ctx context.Context) {
	for l.processNext(ctx) {
	}
}

func (l *Labeler) processNext(ctx context.Context) bool {
	name, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(name)
	if err := l.sync(ctx, name); err != nil {
		klog.FromContext(ctx).V(2).Info("labelling namespace failed; retrying", "namespace", name, "err", err)
		l.queue.AddRateLimited(name)
		return true
	}
	l.queue.Forget(name)
	return true
}

// sync patches the label of one namespace if the informer says it is missing or wrong.
func (l *Labeler) sync(ctx context.Context, name string) error {
	o, ok, err := l.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return err // deleted: nothing to do
	}
	m, err := metaOf(o)
	if err != nil {
		return err
	}
	want := l.want(name)
	if m.GetLabels()[PartitionLabel] == want {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{PartitionLabel: want}}})
	if err != nil {
		return err
	}
	_, err = l.client.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).
		Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kshard-partition-labeler"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	l.patches.Add(1)
	return nil
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("partition labeler: unexpected object %T", obj)
	}
	return m, nil
}

package ownerrecord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
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
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// partitionIndex indexes namespaces by the partition their name hashes to.
const partitionIndex = "kshard.io/partition-of-name"

// ErrNotCertain is returned by a write while the writer's Tenure is not valid: it may
// no longer lead (its Lease may have run out while it was stopped), so it writes nothing
// until the Lease is renewed or its leadership ends.
var ErrNotCertain = errors.New("owner record: leadership not certain (Lease not renewed in time); not writing")

// Tenure says whether the writer certainly still leads, by its own clock
// (leader.Tenure): while it does, no other coordinator can be writing the record.
type Tenure interface {
	Valid() bool
}

var namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")

// LabelerOptions tune a Labeler.
type LabelerOptions struct {
	// Workers is the number of concurrent label writers of the background loop (default
	// 2) and WriteConcurrency those of one Set (default 16): a handoff batch of a
	// partition with many namespaces must not wait for one patch after another.
	Workers, WriteConcurrency int
	// Resync re-examines every namespace this often (default 10 minutes), a safety net
	// for a write lost in a way the workqueue's retries did not catch.
	Resync time.Duration
	// RequestTimeout bounds each label PATCH and each re-read after a conflict (default
	// DefaultRequestTimeout). Without it one request the API server never answers holds
	// its Set, and with it every Acquire of the batch, until the leadership ends; timed
	// out, the batch fails and the coordinator retries it.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is LabelerOptions.RequestTimeout: a label patch is one small
// write that takes milliseconds; ten seconds is an API server in trouble.
const DefaultRequestTimeout = 10 * time.Second

// Labeler is the owner record: it keeps the owner label (PolicyParams.OwnerLabel) of every
// Namespace equal to the coordinator leader's owner table, partition → shard, so that the
// fence policy lets only that shard write there. Each label write carries the writer's
// term in the term annotation and the namespace's resourceVersion as precondition, and is
// sent only while the writer's Tenure is valid: a deposed leader writes nothing once its
// Lease may have run out, and a write of it still in flight when a successor writes the
// namespace fails on the precondition, so it can neither land over the successor's
// write nor undo it.
//
// What a namespace says is never a reason to stop writing. A term annotation above the
// writer's own cannot come from a live leader while the writer's tenure is valid: it is
// what an earlier installation left (the term Lease deleted, a reinstall, an etcd restore,
// leader election switched off and on) or a forgery, and it is written over. Activate
// reports the highest plausible such term, so that a new leader can take a term above it
// (coordinatorrpc.TermBehindError), and counts the forged ones.
//
// Set writes the namespaces of a batch of partitions at once, for a handoff; a
// sample-controller-style loop (a metadata-only Namespace informer, a typed rate-limited
// queue) labels namespaces created later and puts back a label somebody changed. Until
// Activate (a follower, or a leader before it claimed its term) it writes nothing.
type Labeler struct {
	client   metadata.Interface
	pm       partition.Map
	params   PolicyParams
	opts     LabelerOptions
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]

	mu     sync.RWMutex
	active bool
	term   uint32
	tenure Tenure
	owners map[partition.ID]string // known owners; a partition absent is left as it is

	// wroteMu guards wrote: what each of this Labeler's own writes returned (the fields
	// write reads), kept until the informer's copy of that namespace is as new. The
	// informer lags the API server; without it a namespace moved A → B → A and back to B
	// before the informer saw the second write would look labelled B already, and Set
	// would skip it while the API server still names A. At most one entry per namespace
	// the informer holds.
	wroteMu sync.Mutex
	wrote   map[string]metav1.Object
}

// NewLabeler returns a Labeler of the namespaces client sees, for the partitions of pm.
// Call Run to start it.
func NewLabeler(client metadata.Interface, pm partition.Map, params PolicyParams, opts LabelerOptions) (*Labeler, error) {
	if err := pm.Validate(); err != nil {
		return nil, err
	}
	params = params.withDefaults()
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.WriteConcurrency <= 0 {
		opts.WriteConcurrency = 16
	}
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	l := &Labeler{
		client: client,
		pm:     pm,
		params: params,
		opts:   opts,
		owners: map[partition.ID]string{},
		wrote:  map[string]metav1.Object{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kshard_owner_labeler"},
		),
	}
	l.informer = metadatainformer.NewFilteredMetadataInformer(client, namespacesGVR, metav1.NamespaceAll, opts.Resync,
		cache.Indexers{partitionIndex: l.indexByPartition}, nil).Informer()
	if _, err := l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.enqueue,
		UpdateFunc: func(_, obj any) { l.enqueue(obj) },
		DeleteFunc: l.forget,
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
	logger := klog.FromContext(ctx).WithName("owner-labeler")
	go l.informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return fmt.Errorf("owner labeler: namespace informer did not sync: %w", context.Cause(ctx))
	}
	logger.Info("owner labeler started", "namespaces", len(l.informer.GetStore().ListKeys()), "workers", l.opts.Workers, "label", l.params.OwnerLabel)
	for range l.opts.Workers {
		go wait.UntilWithContext(ctx, l.runWorker, time.Second)
	}
	<-ctx.Done()
	return nil
}

// HasSynced reports whether the informer has listed every namespace once.
func (l *Labeler) HasSynced() bool { return l.informer.HasSynced() }

// Claimed is what the namespaces say when a leader activates the record.
type Claimed struct {
	// Owners holds the owner of each partition whose namespaces all agree on one (a
	// partition with no namespaces, or with disagreeing ones, is absent).
	Owners map[partition.ID]string
	// HighestTerm is the highest plausible term (leader.PlausibleTerm) annotated on any
	// namespace, and HighestIn a namespace that carries it ("" when none carries one).
	HighestTerm uint32
	HighestIn   string
	// Above counts the namespaces whose plausible term annotation is above the
	// activating term.
	Above int
	// Forged counts the namespaces whose term annotation no coordinator can have led
	// yet, and ForgedIn names one of them: a leader must not advance past such a term
	// (see leader.PlausibleTerm); the Labeler writes over it.
	Forged   int
	ForgedIn string
}

// Activate makes the Labeler the record of term, written while tenure is valid: it reads
// what the namespaces say, takes that as its owner table, and from then on writes. A
// namespace term above term is not an error (see Labeler): Claimed reports the highest,
// and when a plausible one is above term the Labeler stays inactive (the leader must take
// a term above it first, and write nothing at this one).
func (l *Labeler) Activate(term uint32, tenure Tenure) (Claimed, error) {
	if !l.HasSynced() {
		return Claimed{}, errors.New("owner labeler: the namespace informer has not synced")
	}
	if tenure == nil {
		return Claimed{}, errors.New("owner labeler: Activate needs the leadership's tenure")
	}
	c := Claimed{Owners: map[partition.ID]string{}}
	split := map[partition.ID]bool{}
	now := time.Now()
	for _, o := range l.informer.GetStore().List() {
		m, err := metaOf(o)
		if err != nil {
			continue
		}
		m = l.newest(m) // a leader again: its own last writes may be ahead of the informer
		switch t := l.termOf(m); {
		case !leader.PlausibleTerm(uint64(t), now):
			c.Forged++
			if c.ForgedIn == "" || m.GetName() < c.ForgedIn {
				c.ForgedIn = m.GetName()
			}
		case t > c.HighestTerm || (t > 0 && t == c.HighestTerm && m.GetName() < c.HighestIn):
			c.HighestTerm, c.HighestIn = t, m.GetName()
			fallthrough
		default:
			if t > term {
				c.Above++
			}
		}
		p := l.pm.For(m.GetName())
		owner := m.GetLabels()[l.params.OwnerLabel]
		if prev, ok := c.Owners[p]; (ok && prev != owner) || split[p] {
			split[p] = true
			delete(c.Owners, p)
			continue
		}
		c.Owners[p] = owner
	}
	for p, s := range c.Owners {
		if s == "" {
			delete(c.Owners, p)
		}
	}
	if c.HighestTerm > term {
		return c, nil // the leader takes a term above it first: nothing is written at this one
	}
	l.mu.Lock()
	l.active, l.term, l.tenure = true, term, tenure
	l.owners = maps.Clone(c.Owners)
	l.mu.Unlock()
	return c, nil
}

// StampTerm writes the active term into the term annotation of namespace name, whatever
// its owner label, unless it already carries that term or a higher one. Only the owner
// record's terms outlive the term Lease (which a reinstall or an operator deletes), and a
// leadership that moves nothing writes no label: without a stamp a later leader could
// take this very term again while shards hold its epochs. A leader stamps a namespace
// every cluster has (TermBeaconNamespace) before it serves. A namespace that does not
// exist is not an error.
func (l *Labeler) StampTerm(ctx context.Context, name string) error {
	l.mu.RLock()
	active, term, tenure := l.active, l.term, l.tenure
	l.mu.RUnlock()
	if !active {
		return errors.New("owner labeler: not active (not the leader)")
	}
	namespaces := l.client.Resource(namespacesGVR)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := namespaces.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case l.termOf(m) >= term:
			return nil
		case !tenure.Valid():
			return fmt.Errorf("namespace %s: %w", name, ErrNotCertain)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": m.GetResourceVersion(),
			"annotations":     map[string]any{l.params.TermAnnotation(): strconv.FormatUint(uint64(term), 10)},
		}})
		if err != nil {
			return err
		}
		got, err := namespaces.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kshard-owner-labeler"})
		if err == nil {
			l.remember(got)
		}
		return err
	})
}

// Deactivate stops all writes (leadership ended).
func (l *Labeler) Deactivate() {
	l.mu.Lock()
	l.active = false
	l.mu.Unlock()
}

// SetResult says what one Set wrote.
type SetResult struct {
	// Writes is the number of namespaces whose label changed.
	Writes int
	// Last is the namespace with the highest resourceVersion among the batch's
	// namespaces that carry their owner after Set and are not terminating (their
	// labels are written first), written by it or already in place (""
	// when there is none): once the API server's admission sees it, it sees every write of the
	// batch, since its Namespace informer applies events in resourceVersion order.
	Last string
}

// Set records owners (partition → shard; "" for no owner) in the owner table and writes
// the owner label of every namespace of those partitions, concurrently; it returns when
// all are written. Namespaces of those partitions created meanwhile are labelled by the
// background loop from the table.
func (l *Labeler) Set(ctx context.Context, owners map[partition.ID]string) (SetResult, error) {
	l.mu.Lock()
	if !l.active {
		l.mu.Unlock()
		return SetResult{}, errors.New("owner labeler: not active (not the leader)")
	}
	for p, s := range owners {
		l.owners[p] = s
	}
	l.mu.Unlock()

	// Terminating namespaces are written first, as a round of their own, so that the
	// namespace probed afterwards (never a terminating one: see write) was written after
	// them whenever the batch writes any other.
	var terminating, active []string
	for p := range owners {
		for _, name := range l.NamespacesOf(p) {
			if l.terminating(name) {
				terminating = append(terminating, name)
			} else {
				active = append(active, name)
			}
		}
	}
	var (
		mu      sync.Mutex
		res     SetResult
		highest uint64
		errs    []error
		sem     = make(chan struct{}, l.opts.WriteConcurrency)
	)
	for _, names := range [][]string{terminating, active} {
		var wg sync.WaitGroup
		for _, name := range names {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				rv, wrote, err := l.write(ctx, name)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				if wrote {
					res.Writes++
				}
				if rv == "" {
					return
				}
				if n, err := strconv.ParseUint(rv, 10, 64); err == nil && (res.Last == "" || n > highest) {
					highest, res.Last = n, name
				}
			}()
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return res, nil
}

// NamespacesOf returns the names of the namespaces (known to the informer) whose name
// hashes to partition p, sorted.
func (l *Labeler) NamespacesOf(p partition.ID) []string {
	objs, err := l.informer.GetIndexer().ByIndex(partitionIndex, strconv.FormatUint(uint64(p), 10))
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

// want returns the owner label namespace name should carry, and whether the table says,
// with the term and tenure of the leadership that writes it.
func (l *Labeler) want(name string) (string, uint32, Tenure, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.active {
		return "", 0, nil, false
	}
	owner, ok := l.owners[l.pm.For(name)]
	return owner, l.term, l.tenure, ok
}

func (l *Labeler) termOf(m metav1.Object) uint32 {
	t, err := strconv.ParseUint(m.GetAnnotations()[l.params.TermAnnotation()], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(t)
}

func (l *Labeler) indexByPartition(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	return []string{strconv.FormatUint(uint64(l.pm.For(m.GetName())), 10)}, nil
}

// enqueue queues a namespace whose owner label is not what the table says.
func (l *Labeler) enqueue(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	m = l.newest(m)
	if owner, _, _, ok := l.want(m.GetName()); ok && m.GetLabels()[l.params.OwnerLabel] != owner {
		l.queue.Add(m.GetName())
	}
}

// forget drops what this Labeler remembers of a deleted namespace, unless it remembers a
// namespace of that name created again since.
func (l *Labeler) forget(obj any) {
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	l.wroteMu.Lock()
	defer l.wroteMu.Unlock()
	if w, ok := l.wrote[m.GetName()]; ok && (w.GetUID() == m.GetUID() || !newer(w, m)) {
		delete(l.wrote, m.GetName())
	}
}

// remember keeps what a write of this Labeler returned, unless a newer copy is kept or
// the informer no longer has the namespace (its deletion came before this write
// returned: forget has run, and would never run again for it).
func (l *Labeler) remember(m metav1.Object) {
	l.wroteMu.Lock()
	defer l.wroteMu.Unlock()
	if _, ok, err := l.informer.GetStore().GetByKey(m.GetName()); err != nil || !ok {
		return
	}
	if w, ok := l.wrote[m.GetName()]; !ok || newer(m, w) {
		l.wrote[m.GetName()] = l.slim(m)
	}
}

// slim returns what write, enqueue and Activate read of m: its identity, the owner label
// and the term annotation.
func (l *Labeler) slim(m metav1.Object) metav1.Object {
	s := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
		DeletionTimestamp: m.GetDeletionTimestamp(),
	}}
	if v, ok := m.GetLabels()[l.params.OwnerLabel]; ok {
		s.Labels = map[string]string{l.params.OwnerLabel: v}
	}
	if v, ok := m.GetAnnotations()[l.params.TermAnnotation()]; ok {
		s.Annotations = map[string]string{l.params.TermAnnotation(): v}
	}
	return s
}

// newest returns the newer of the informer's copy m and the copy this Labeler's last
// write of that namespace returned, and forgets the latter once the informer has caught
// up with it.
func (l *Labeler) newest(m metav1.Object) metav1.Object {
	l.wroteMu.Lock()
	defer l.wroteMu.Unlock()
	w, ok := l.wrote[m.GetName()]
	switch {
	case !ok:
		return m
	case newer(w, m):
		return w
	default:
		delete(l.wrote, m.GetName())
		return m
	}
}

// newer reports whether a is a later copy of the namespace of that name than b, whether
// or not it is the same object (one deleted and created again has a new UID and a
// higher resourceVersion). Namespaces' resourceVersions are etcd revisions, compared as
// numbers as Set does; one that does not parse is never newer.
func newer(a, b metav1.Object) bool {
	ra, err := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
	if err != nil {
		return false
	}
	rb, err := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
	return err == nil && ra > rb
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
	if _, _, err := l.write(ctx, name); err != nil {
		klog.FromContext(ctx).V(2).Info("writing the owner label failed; retrying", "namespace", name, "err", err.Error())
		l.queue.AddRateLimited(name)
		return true
	}
	l.queue.Forget(name)
	return true
}

// write makes namespace name's owner label what the table says, with the namespace's
// resourceVersion as precondition (re-read on a conflict) and the term stamped, only
// while the tenure is valid (ErrNotCertain otherwise). It returns whether it wrote and the resourceVersion of a copy that carries
// the owner ("" when the namespace is deleted or not known).
func (l *Labeler) write(ctx context.Context, name string) (string, bool, error) {
	var m metav1.Object
	if o, ok, err := l.informer.GetStore().GetByKey(name); err == nil && ok {
		if m, err = metaOf(o); err != nil {
			return "", false, err
		}
		// The informer may not have seen this Labeler's last write of it yet.
		m = l.newest(m)
	}
	for attempt := 0; ; attempt++ {
		owner, term, tenure, ok := l.want(name)
		if !ok {
			return "", false, nil
		}
		if m == nil {
			return "", false, nil // deleted, or not seen yet: its add event brings it back
		}
		// A terminating namespace is labelled too: its owner's namespace controller
		// deletes its content, and the policy refuses a shard whose name the label does not
		// carry. It is never the one Set probes (NamespaceLifecycle refuses the probe's
		// dry-run create there before the policy decides), so its resourceVersion is not
		// returned.
		probeable := m.GetDeletionTimestamp() == nil
		if m.GetLabels()[l.params.OwnerLabel] == owner {
			// Already in place (written by the loop, or a retried batch): its
			// resourceVersion still tells Set which namespace to probe.
			return rvIf(probeable, m.GetResourceVersion()), false, nil
		}
		if !tenure.Valid() {
			return "", false, fmt.Errorf("namespace %s: %w", name, ErrNotCertain)
		}
		if t := l.termOf(m); t > term {
			// Not a live leader's while the tenure is valid (see Labeler): written over.
			klog.FromContext(ctx).V(2).Info("writing over an owner record of a term above this leader's", "namespace", name, "recordTerm", t, "term", term)
		}
		var label any = owner
		if owner == "" {
			label = nil // a JSON merge patch removes a key set to null
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": m.GetResourceVersion(),
			"labels":          map[string]any{l.params.OwnerLabel: label},
			"annotations":     map[string]any{l.params.TermAnnotation(): strconv.FormatUint(uint64(term), 10)},
		}})
		if err != nil {
			return "", false, err
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
		got, err := l.client.Resource(namespacesGVR).Patch(rctx, name, types.MergePatchType, patch,
			metav1.PatchOptions{FieldManager: "kshard-owner-labeler"})
		cancel()
		switch {
		case err == nil:
			l.remember(got)
			return rvIf(probeable && got.GetDeletionTimestamp() == nil, got.GetResourceVersion()), true, nil
		case apierrors.IsNotFound(err):
			return "", false, nil
		case apierrors.IsConflict(err) && attempt < 5:
			rctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
			fresh, err := l.client.Resource(namespacesGVR).Get(rctx, name, metav1.GetOptions{})
			cancel()
			if apierrors.IsNotFound(err) {
				return "", false, nil
			}
			if err != nil {
				return "", false, err
			}
			m = fresh
		default:
			return "", false, fmt.Errorf("namespace %s: %w", name, err)
		}
	}
}

// rvIf returns rv when ok, else "".
func rvIf(ok bool, rv string) string {
	if ok {
		return rv
	}
	return ""
}

// terminating reports whether the informer has namespace name with a deletionTimestamp.
func (l *Labeler) terminating(name string) bool {
	o, ok, err := l.informer.GetStore().GetByKey(name)
	if err != nil || !ok {
		return false
	}
	m, err := metaOf(o)
	return err == nil && m.GetDeletionTimestamp() != nil
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("owner labeler: unexpected object %T", obj)
	}
	return m, nil
}

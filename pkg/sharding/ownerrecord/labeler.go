package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
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
	// Workers is the number of concurrent partition-label writers of the namespace loop
	// (default 2).
	Workers int
	// Resync re-examines every namespace this often (default 10 minutes), a safety net
	// for a write lost in a way the workqueue's retries did not catch.
	Resync time.Duration
	// RoleResync is how often the active Labeler compares the owner Roles with its table
	// and repairs them even when no change of them was seen (default 1 minute); every
	// change of a record Role or RoleBinding is repaired at once.
	RoleResync time.Duration
	// RequestTimeout bounds each request of a record write (default
	// DefaultRequestTimeout). Without it one request the API server never answers holds
	// its Set, and with it every Acquire of the batch, until the leadership ends; timed
	// out, the batch fails and the coordinator retries it.
	RequestTimeout time.Duration
}

// DefaultRequestTimeout is LabelerOptions.RequestTimeout: a record write is one small
// request that takes milliseconds; ten seconds is an API server in trouble.
const DefaultRequestTimeout = 10 * time.Second

// Labeler keeps the owner record equal to the coordinator leader's owner table,
// partition → shard: one owner Role per shard in kshard's namespace (record.go), read by
// the fence policy through the API server's authorizer, and on every Namespace the
// partition its name hashes to (PolicyParams.PartitionLabel), which the policy needs to
// ask about the right partition.
//
// Every Role write carries the writer's term (TermAnnotation) and the Role's
// resourceVersion as precondition, and is sent only while the writer's Tenure is valid:
// a deposed leader writes nothing once its Lease may have run out, and a write of it still
// in flight when a successor writes the Role fails on the precondition, so it can neither
// land over the successor's write nor undo it. Partition labels never change (a name's
// partition is fixed by the partition count), so who writes them matters less; they are
// written under the same tenure all the same.
//
// What the record says is never a reason to stop writing. A term above the writer's own
// cannot come from a live leader while the writer's tenure is valid: it is what an
// earlier installation left (the term Lease deleted, an etcd restore, leader election
// switched off and on) or a forgery, and it is written over. Activate reports the highest
// plausible such term, so that a new leader can take a term above it
// (coordinatorrpc.TermBehindError), and counts the forged ones.
//
// Set writes the Roles of a batch of moved partitions: one write per shard whose
// partitions change, whatever the number of namespaces. A sample-controller-style loop (a
// metadata-only Namespace informer, a typed rate-limited queue) labels namespaces with
// their partition as they appear. Until Activate (a follower, or a leader before it
// claimed its term) it writes nothing.
type Labeler struct {
	meta     metadata.Interface
	kube     kubernetes.Interface
	pm       partition.Map
	params   PolicyParams
	opts     LabelerOptions
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]

	// rbacInformers watch the Roles and RoleBindings in kshard's namespace; a change of
	// a record object queues a repair (rolesKey in roleQueue) while active.
	rbacInformers informers.SharedInformerFactory
	roleQueue     workqueue.TypedRateLimitingInterface[string]

	mu     sync.RWMutex
	active bool
	term   uint32
	tenure Tenure
	owners map[partition.ID]string // the owner table; a partition absent has no owner

	// roleMu serializes the Role writes of Set and of the repair loop: each compares the
	// Roles with the table and writes the difference in a fixed order. Set holds it from
	// its table change to its last write.
	roleMu sync.Mutex
}

// NewLabeler returns a Labeler of the namespaces meta sees, for the partitions of pm,
// writing owner Roles with kube. Call Run to start it.
func NewLabeler(meta metadata.Interface, kube kubernetes.Interface, pm partition.Map, params PolicyParams, opts LabelerOptions) (*Labeler, error) {
	if err := pm.Validate(); err != nil {
		return nil, err
	}
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if want := ClusterPartitionOf(pm); params.ClusterPartition != want {
		return nil, fmt.Errorf("owner labeler: the policy's cluster partition %s is not partition %s, the cluster partition of %d partitions", params.ClusterPartition, want, pm.Count)
	}
	params = params.withDefaults()
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.RoleResync <= 0 {
		opts.RoleResync = time.Minute
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	l := &Labeler{
		meta:   meta,
		kube:   kube,
		pm:     pm,
		params: params,
		opts:   opts,
		owners: map[partition.ID]string{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kshard_owner_labeler"},
		),
	}
	l.roleQueue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kshard_owner_roles"},
	)
	// Every Role and RoleBinding of kshard's namespace (a handful), not only labelled
	// ones: RBAC grants by name.
	l.rbacInformers = informers.NewSharedInformerFactoryWithOptions(kube, opts.RoleResync, informers.WithNamespace(params.Namespace))
	repairIf := func(obj any) {
		if m, err := metaOf(obj); err == nil && isRecordName(m.GetName()) {
			l.roleQueue.Add(rolesKey)
		}
	}
	repair := cache.ResourceEventHandlerFuncs{
		AddFunc:    repairIf,
		UpdateFunc: func(_, obj any) { repairIf(obj) },
		DeleteFunc: repairIf,
	}
	for _, inf := range []cache.SharedIndexInformer{l.rbacInformers.Rbac().V1().Roles().Informer(), l.rbacInformers.Rbac().V1().RoleBindings().Informer()} {
		if _, err := inf.AddEventHandler(repair); err != nil {
			return nil, err
		}
	}
	l.informer = metadatainformer.NewFilteredMetadataInformer(meta, namespacesGVR, metav1.NamespaceAll, opts.Resync,
		cache.Indexers{partitionIndex: l.indexByPartition}, nil).Informer()
	if _, err := l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    l.enqueue,
		UpdateFunc: func(_, obj any) { l.enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	return l, nil
}

// Run starts the informers, the namespace workers and the Role repair, and blocks until
// ctx is done. It returns an error only when the informer cannot sync.
func (l *Labeler) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer l.queue.ShutDown()
	defer l.roleQueue.ShutDown()
	logger := klog.FromContext(ctx).WithName("owner-labeler")
	ctx = klog.NewContext(ctx, logger)
	go l.informer.RunWithContext(ctx)
	l.rbacInformers.Start(ctx.Done())
	defer l.rbacInformers.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return fmt.Errorf("owner labeler: namespace informer did not sync: %w", context.Cause(ctx))
	}
	for typ, ok := range l.rbacInformers.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("owner labeler: %v informer in namespace %s did not sync: %w", typ, l.params.Namespace, context.Cause(ctx))
		}
	}
	logger.Info("owner labeler started", "namespaces", len(l.informer.GetStore().ListKeys()), "workers", l.opts.Workers,
		"partitionLabel", l.params.PartitionLabel, "roleNamespace", l.params.Namespace)
	for range l.opts.Workers {
		go wait.UntilWithContext(ctx, l.runWorker, time.Second)
	}
	go wait.UntilWithContext(ctx, l.runRoleWorker, time.Second)
	go wait.UntilWithContext(ctx, func(context.Context) { l.roleQueue.Add(rolesKey) }, l.opts.RoleResync)
	<-ctx.Done()
	return nil
}

// NamespaceInformer returns the Labeler's metadata informer on Namespaces (indexed by
// partition), so that the coordinator counts namespaces per partition and reads their pin
// annotations without a second watch of every Namespace. Handlers may be added before
// or after Run; Run starts it.
func (l *Labeler) NamespaceInformer() cache.SharedIndexInformer { return l.informer }

// HasSynced reports whether the informer has listed every namespace once.
func (l *Labeler) HasSynced() bool { return l.informer.HasSynced() }

// Claimed is what the owner record says when a leader activates it.
type Claimed struct {
	// Owners holds the owner of each partition exactly one owner Role grants.
	Owners map[partition.ID]string
	// HighestTerm is the highest plausible term (leader.PlausibleTerm) on any owner Role
	// or the term beacon, and HighestIn the Role that carries it ("" when none does).
	HighestTerm uint32
	HighestIn   string
	// Above counts the Roles whose plausible term is above the activating term.
	Above int
	// Forged counts the Roles whose term no coordinator can have led yet, and ForgedIn
	// names one of them: a leader must not advance past such a term (see
	// leader.PlausibleTerm); the Labeler writes over it.
	Forged   int
	ForgedIn string
}

// Activate makes the Labeler the record of term, written while tenure is valid: it reads
// the owner Roles (from the API server, not a cache: a leader again must see its own last
// writes), takes what they grant as its owner table, and from then on writes. A term above
// term is not an error (see Labeler): Claimed reports the highest, and when a plausible
// one is above term the Labeler stays inactive (the leader must take a term above it
// first, and write nothing at this one).
func (l *Labeler) Activate(ctx context.Context, term uint32, tenure Tenure) (Claimed, error) {
	if !l.HasSynced() {
		return Claimed{}, errors.New("owner labeler: the namespace informer has not synced")
	}
	if tenure == nil {
		return Claimed{}, errors.New("owner labeler: Activate needs the leadership's tenure")
	}
	roles, err := l.listRoles(ctx)
	if err != nil {
		return Claimed{}, err
	}
	c := Claimed{Owners: map[partition.ID]string{}}
	split := map[partition.ID]bool{}
	now := time.Now()
	names := make([]string, 0, len(roles.roles)+1)
	for name := range roles.roles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r := roles.roles[name]
		switch t := termOf(r); {
		case !leader.PlausibleTerm(uint64(t), now):
			c.Forged++
			if c.ForgedIn == "" {
				c.ForgedIn = name
			}
		case t > c.HighestTerm:
			c.HighestTerm, c.HighestIn = t, name
			fallthrough
		default:
			if t > term {
				c.Above++
			}
		}
		shard, ok := shardOf(name)
		if !ok {
			continue
		}
		for _, p := range partitionsOf(r, l.pm) {
			if _, dup := c.Owners[p]; dup || split[p] {
				split[p] = true
				delete(c.Owners, p)
				continue
			}
			c.Owners[p] = shard
		}
	}
	if c.HighestTerm > term {
		return c, nil // the leader takes a term above it first: nothing is written at this one
	}
	l.mu.Lock()
	l.active, l.term, l.tenure = true, term, tenure
	l.owners = maps.Clone(c.Owners)
	l.mu.Unlock()
	l.requeueAll()
	return c, nil
}

// Deactivate stops all writes (leadership ended).
func (l *Labeler) Deactivate() {
	l.mu.Lock()
	l.active = false
	l.mu.Unlock()
}

// SetResult says what one Set wrote.
type SetResult struct {
	// Writes counts the requests that changed the record (Role and RoleBinding creates,
	// updates and deletes).
	Writes int
	// Gained holds, for each shard the batch names as a new owner, the batch's
	// partitions it owns, sorted: what the fence probes before any Acquire.
	Gained map[string][]partition.ID
}

// Set records owners (partition → shard; "" for no owner) in the owner table and writes
// the owner Roles to match: first every Role that loses a partition (so that, in the API
// server's stream of Role changes, every removal comes before every grant of the batch),
// then every Role that gains one, then its RoleBinding if it has none. It returns once all
// are written.
func (l *Labeler) Set(ctx context.Context, owners map[partition.ID]string) (SetResult, error) {
	res := SetResult{Gained: map[string][]partition.ID{}}
	for p, s := range owners {
		if !l.pm.Contains(p) {
			return res, fmt.Errorf("owner labeler: partition %d is not one of the %d partitions", p, l.pm.Count)
		}
		if s == "" {
			continue
		}
		if err := ValidateShardID(s); err != nil {
			return res, err
		}
		res.Gained[s] = append(res.Gained[s], p)
	}
	for _, ps := range res.Gained {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	// The table changes and the Roles are written under roleMu, so that the repair loop
	// cannot write this batch first (Writes counts the batch's writes).
	l.roleMu.Lock()
	defer l.roleMu.Unlock()
	l.mu.Lock()
	if !l.active {
		l.mu.Unlock()
		return res, errors.New("owner labeler: not active (not the leader)")
	}
	for p, s := range owners {
		if s == "" {
			delete(l.owners, p)
		} else {
			l.owners[p] = s
		}
	}
	l.mu.Unlock()
	n, err := l.writeRolesLocked(ctx)
	res.Writes = n
	return res, err
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

// Probeable returns a namespace of partition p whose partition label is in place and
// that is not terminating (a dry-run create there reaches the policy), "" when none is.
func (l *Labeler) Probeable(p partition.ID) string {
	want := strconv.FormatUint(uint64(p), 10)
	for _, name := range l.NamespacesOf(p) {
		o, ok, err := l.informer.GetStore().GetByKey(name)
		if err != nil || !ok {
			continue
		}
		m, err := metaOf(o)
		if err == nil && m.GetDeletionTimestamp() == nil && m.GetLabels()[l.params.PartitionLabel] == want {
			return name
		}
	}
	return ""
}

// snapshot returns whether the Labeler is active, and its term, tenure and owner table.
func (l *Labeler) snapshot() (bool, uint32, Tenure, map[partition.ID]string) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.active, l.term, l.tenure, maps.Clone(l.owners)
}

func (l *Labeler) indexByPartition(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	return []string{strconv.FormatUint(uint64(l.pm.For(m.GetName())), 10)}, nil
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

package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/lru"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// FenceOptions configure a Fence.
type FenceOptions struct {
	// Params name the policy, the shard ServiceAccount and the owner label.
	Params PolicyParams
	// Base is the coordinator's own client configuration; probes impersonate the probe
	// user with it (see ProbeClient).
	Base *rest.Config
	// ProbeTimeout bounds the wait for the API server to enforce a batch (default 10s);
	// a batch not enforced by then is reported as failed and retried.
	ProbeTimeout time.Duration
	// MaxClients bounds the impersonating probe clients kept for reuse, one per shard ID
	// (default DefaultMaxProbeClients); the least recently used is dropped beyond it.
	// Shard IDs are pod names, new with every rollout, so a table of every ID ever seen
	// would grow for the coordinator's whole life.
	MaxClients int
}

// DefaultMaxProbeClients is FenceOptions.MaxClients. A batch probes as one shard and the
// sentinel, and a client is cheap to make again (client-go shares the transport), so this
// only saves rebuilding the clients of the shards that receive partitions most often.
const DefaultMaxProbeClients = 256

// Fence is the coordinator leader's side of the server-side fence: it claims the owner
// record (the namespaces' owner labels) for the leader's term, writes each batch of new
// owners, and returns only once the API server enforces it, proven by dry-run probes. It
// is what coordinatorrpc's OwnerRecord edge runs outside the state machine.
type Fence struct {
	opts    FenceOptions
	labeler *Labeler
	prober  Prober

	mu      sync.Mutex
	clients *lru.Cache // shard ID → kubernetes.Interface impersonating it; at most MaxClients
}

// Applied describes one enforced batch: how long the writes and the wait for enforcement
// took, how many namespaces were written and how many probe rounds the wait took (a
// round is a dry run as the new owner and one as the sentinel; 0 when the batch had no
// namespace).
type Applied struct {
	Write, Enforce time.Duration
	Writes         int
	Probes         int
	// ProbeNamespace is where the probe ran ("" when none did).
	ProbeNamespace string
}

// NewFence returns a Fence that writes with labeler (which must be running).
func NewFence(labeler *Labeler, opts FenceOptions) (*Fence, error) {
	if err := opts.Params.Validate(); err != nil {
		return nil, err
	}
	if opts.Base == nil {
		return nil, errors.New("owner record fence: FenceOptions.Base is required")
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 10 * time.Second
	}
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxProbeClients
	}
	return &Fence{opts: opts, labeler: labeler,
		prober:  Prober{PolicyName: opts.Params.withDefaults().Name},
		clients: lru.New(opts.MaxClients)}, nil
}

// TermBeaconNamespace is the namespace a new leader stamps its term on before it serves
// (Labeler.StampTerm): every cluster has it, and nobody deletes it.
const TermBeaconNamespace = "kube-system"

// Claim makes this process the record's writer for term, writing while tenure is valid,
// and returns what the namespaces say: the owners a new leader may take as enforced (they
// were written before its term began, and it grants nothing before its grace has passed),
// and the highest term found on them. Unless that is above term (then the record stays
// unclaimed: the leader must take a term above it first), it stamps term on
// TermBeaconNamespace, so that the record keeps this term even if the leadership writes
// no label.
func (f *Fence) Claim(ctx context.Context, term uint32, tenure Tenure) (Claimed, error) {
	c, err := f.labeler.Activate(term, tenure)
	if err != nil || c.HighestTerm > term {
		return c, err
	}
	if err := f.labeler.StampTerm(ctx, TermBeaconNamespace); err != nil {
		f.labeler.Deactivate()
		return c, fmt.Errorf("stamping term %d on namespace %s: %w", term, TermBeaconNamespace, err)
	}
	return c, nil
}

// Release stops all writes: leadership ended.
func (f *Fence) Release() { f.labeler.Deactivate() }

// Apply writes owners (partition → shard, "" for none) onto every namespace of those
// partitions and waits until the API server enforces them: a probe in the namespace with
// the newest write (the API server's Namespace informer applies events in order, so it
// then has every write of the batch) must let the new owner through and refuse a
// sentinel shard. A batch whose partitions have no namespace needs no wait: there is
// nothing to write to. A failed probe fails the batch; the coordinator retries it, and
// the retry, finding the labels written, probes the newest of them again.
func (f *Fence) Apply(ctx context.Context, owners map[partition.ID]string) (Applied, error) {
	var a Applied
	start := time.Now()
	res, err := f.labeler.Set(ctx, owners)
	a.Write, a.Writes = time.Since(start), res.Writes
	if err != nil {
		return a, err
	}
	if res.Last == "" {
		return a, nil // no namespace in the batch's partitions: nothing to fence
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(ctx, f.opts.ProbeTimeout)
	defer cancel()
	shard := owners[f.labeler.pm.For(res.Last)]
	n, err := f.waitEnforced(ctx, shard, res.Last)
	a.Probes, a.Enforce, a.ProbeNamespace = n, time.Since(start), res.Last
	if err != nil {
		return a, fmt.Errorf("owner labels written but not shown enforced: %w", err)
	}
	return a, nil
}

// SentinelShard is the pod name of the shard no record ever names (the coordinator
// refuses it as a shard ID). A probe as this shard must be refused: an allowed one means
// the policy is not in force (not installed, or not yet loaded), so an allowed probe of
// the new owner proves nothing by itself.
const SentinelShard = "kshard-fence-sentinel"

// waitEnforced waits until the API server lets shard write in namespace (no owner when
// shard is "") and refuses the sentinel: it evaluates the policy with the new label.
func (f *Fence) waitEnforced(ctx context.Context, shard, namespace string) (int, error) {
	var owner kubernetes.Interface
	if shard != "" {
		var err error
		if owner, err = f.client(shard); err != nil {
			return 0, err
		}
	}
	sentinel, err := f.client(SentinelShard)
	if err != nil {
		return 0, err
	}
	_, n, err := f.prober.WaitEnforced(ctx, owner, sentinel, namespace)
	if err != nil {
		return n, fmt.Errorf("owner %q not enforced (is the policy installed?): %w", shard, err)
	}
	return n, nil
}

// client returns the probe client of shard (ProbeClient), reused while it is among the
// MaxClients most recently used.
func (f *Fence) client(shard string) (kubernetes.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients.Get(shard); ok {
		return c.(kubernetes.Interface), nil
	}
	c, err := ProbeClient(f.opts.Base, f.opts.Params.withDefaults(), shard)
	if err != nil {
		return nil, err
	}
	f.clients.Add(shard, c)
	return c, nil
}

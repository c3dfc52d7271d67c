package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/lru"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// FenceOptions configure a Fence.
type FenceOptions struct {
	// Params name the policy, the shard ServiceAccount and the partition label.
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
// record for the leader's term, writes each batch of new owners, and returns only once
// the API server enforces it, proven by access reviews and dry-run probes. It is what
// coordinatorrpc's OwnerRecord edge runs outside the state machine.
type Fence struct {
	opts    FenceOptions
	labeler *Labeler
	prober  Prober

	mu      sync.Mutex
	clients *lru.Cache // shard ID → kubernetes.Interface impersonating it; at most MaxClients
}

// Applied describes one enforced batch: how long the writes and the wait for enforcement
// took, how many record writes it made, and how many access reviews and probe rounds the
// wait took (a round is a dry run as the new owner and one as the sentinel).
type Applied struct {
	Write, Enforce time.Duration
	Writes         int
	Reviews        int
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

// Claim makes this process the record's writer for term, writing while tenure is valid,
// and returns what the owner Roles say: the owners a new leader may take as enforced
// (they were written before its term began, and it grants nothing before its grace has
// passed), and the highest term found on them. Unless that is above term (then the record
// stays unclaimed: the leader must take a term above it first), it stamps term on the
// term beacon (TermRoleName), so that the record keeps this term even if the leadership
// writes no owner Role.
func (f *Fence) Claim(ctx context.Context, term uint32, tenure Tenure) (Claimed, error) {
	c, err := f.labeler.Activate(ctx, term, tenure)
	if err != nil || c.HighestTerm > term {
		return c, err
	}
	if err := f.labeler.StampTerm(ctx); err != nil {
		f.labeler.Deactivate()
		return c, err
	}
	return c, nil
}

// Release stops all writes: leadership ended.
func (f *Fence) Release() { f.labeler.Deactivate() }

// Apply writes owners (partition → shard, "" for none) into the owner Roles and waits
// until the API server enforces them, before any of the batch's Acquires leaves:
//
//   - for every new owner of the batch, a LocalSubjectAccessReview must find its owner
//     subject allowed one of its new partitions, and the sentinel's refused. The API
//     server's authorizer sees Role changes in resourceVersion order, and Set writes every
//     removal of the batch before any grant, so once a grant is seen every removal is:
//     the previous owners are refused;
//   - where one of those partitions has a labelled namespace, a dry-run probe there must
//     let the new owner through and refuse the sentinel: the policy is in force.
//
// A batch that grants nothing needs no wait: no Acquire follows it. A failed wait fails
// the batch; the coordinator retries it, and the retry, finding the Roles written,
// waits again.
func (f *Fence) Apply(ctx context.Context, owners map[partition.ID]string) (a Applied, err error) {
	start := time.Now()
	res, err := f.labeler.Set(ctx, owners)
	a.Write, a.Writes = time.Since(start), res.Writes
	if err != nil {
		return a, err
	}
	if len(res.Gained) == 0 {
		return a, nil
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(ctx, f.opts.ProbeTimeout)
	defer cancel()
	defer func() { a.Enforce = time.Since(start) }()
	shards := make([]string, 0, len(res.Gained))
	for s := range res.Gained {
		shards = append(shards, s)
	}
	sort.Strings(shards)
	reviews := f.labeler.reviewer()
	for _, s := range shards {
		var n int
		n, err = reviews.waitOwns(ctx, s, res.Gained[s][0])
		a.Reviews += n
		if err != nil {
			return a, fmt.Errorf("owner Roles written but not shown enforced: %w", err)
		}
	}
	for _, s := range shards {
		for _, p := range res.Gained[s] {
			ns := f.labeler.Probeable(p)
			if ns == "" {
				continue
			}
			n, err := f.waitEnforced(ctx, s, ns)
			a.Probes, a.ProbeNamespace = n, ns
			if err != nil {
				return a, fmt.Errorf("owner Roles written but not shown enforced: %w", err)
			}
			return a, nil
		}
	}
	return a, nil
}

// SentinelShard is the pod name of the shard no record ever names (the coordinator
// refuses it as a shard ID). A probe as this shard must be refused: an allowed one means
// the policy is not in force (not installed, or not yet loaded), or that a binding grants
// every owner subject every partition (a group binding of system:serviceaccounts), so an
// allowed probe of the new owner proves nothing by itself.
const SentinelShard = "kshard-fence-sentinel"

// waitEnforced waits until the API server lets shard write in namespace and refuses the
// sentinel: it evaluates the policy with the new owner Role.
func (f *Fence) waitEnforced(ctx context.Context, shard, namespace string) (int, error) {
	owner, err := f.client(shard)
	if err != nil {
		return 0, err
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

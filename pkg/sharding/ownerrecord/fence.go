package ownerrecord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// FenceOptions configure a Fence.
type FenceOptions struct {
	// Params name the policy, the shard ServiceAccount and the owner ConfigMap.
	Params PolicyParams
	// Base is the coordinator's own client configuration; probes impersonate a shard
	// with it (see ShardClient).
	Base *rest.Config
	// ProbeTimeout bounds the wait for the API server to enforce a new record
	// (default 10s); a write not enforced by then is reported as failed and retried.
	ProbeTimeout time.Duration
	// MaxProbeNamespaces is how many namespaces of a batch a probe tries before it
	// gives up (a namespace may be deleted between the choice and the probe); default 3.
	MaxProbeNamespaces int
}

// Fence is the coordinator leader's side of the server-side fence: it claims the owner
// record for the leader's term, writes each batch of new owners in one write, and
// returns only once the API server enforces it, proven by a dry-run probe that the new
// owner is now let through. It is what coordinatorrpc's OwnerRecord edge runs outside
// the state machine.
type Fence struct {
	opts    FenceOptions
	writer  *Writer
	labeler *Labeler
	prober  Prober

	mu      sync.Mutex
	clients map[string]kubernetes.Interface // per shard ID, impersonating it
}

// Applied describes one enforced batch: how long the write and the wait for enforcement
// took, and how many probes the wait sent (0 when the batch had no namespace to probe).
type Applied struct {
	Write, Enforce time.Duration
	Probes         int
	// ProbeNamespace is where the probe ran ("" when none did).
	ProbeNamespace string
}

// NewFence returns a Fence that writes with writer and picks probe namespaces from
// labeler's informer (which must be running).
func NewFence(writer *Writer, labeler *Labeler, opts FenceOptions) (*Fence, error) {
	if err := opts.Params.Validate(); err != nil {
		return nil, err
	}
	if opts.Base == nil {
		return nil, errors.New("owner record fence: FenceOptions.Base is required")
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 10 * time.Second
	}
	if opts.MaxProbeNamespaces <= 0 {
		opts.MaxProbeNamespaces = 3
	}
	return &Fence{opts: opts, writer: writer, labeler: labeler,
		prober:  Prober{PolicyName: opts.Params.withDefaults().Name},
		clients: map[string]kubernetes.Interface{}}, nil
}

// Claim stamps the record with term (refused when a newer term claimed it) and returns
// what it says: the entries a new leader may take as enforced.
func (f *Fence) Claim(ctx context.Context, term uint32) (map[partition.ID]string, error) {
	if !f.labeler.HasSynced() {
		return nil, errors.New("owner record fence: the namespace informer has not synced")
	}
	return f.writer.Claim(ctx, term)
}

// Apply writes owners (partition → shard, "" removes the entry) in one write and waits
// until the API server lets one of the new owners write in a namespace of its
// partition: the record is one object, so from then on every entry of the batch is
// enforced and every previous owner refused. A batch whose partitions have no namespace
// yet needs no wait: there is nothing to write to.
func (f *Fence) Apply(ctx context.Context, owners map[partition.ID]string) (Applied, error) {
	var a Applied
	start := time.Now()
	if err := f.writer.Set(ctx, owners); err != nil {
		return a, err
	}
	a.Write = time.Since(start)
	start = time.Now()
	ctx, cancel := context.WithTimeout(ctx, f.opts.ProbeTimeout)
	defer cancel()
	var errs []error
	for _, c := range f.candidates(owners) {
		n, err := f.waitEnforced(ctx, c)
		a.Probes += n
		if err == nil {
			a.Enforce, a.ProbeNamespace = time.Since(start), c.namespace
			return a, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	a.Enforce = time.Since(start)
	if len(errs) > 0 {
		return a, fmt.Errorf("owner record written but not shown enforced: %w", errors.Join(errs...))
	}
	return a, nil
}

// SentinelShard is the pod name of the shard no record ever names. A probe as this shard
// must be refused: an allowed one means the policy was not evaluated (failurePolicy
// Ignore lets requests through while the API server cannot resolve the record), so an
// allowed probe of the new owner proves nothing by itself.
const SentinelShard = "kshard-fence-sentinel"

// waitEnforced probes c's namespace until the new owner is let through and the sentinel
// shard is refused in the same round: the API server then evaluates the policy with a
// record that names the new owner. It returns the probes sent.
func (f *Fence) waitEnforced(ctx context.Context, c probeCandidate) (int, error) {
	owner, err := f.client(c.shard)
	if err != nil {
		return 0, err
	}
	sentinel, err := f.client(SentinelShard)
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		allowed, err := f.prober.Allowed(ctx, owner, c.namespace)
		n++
		if err != nil {
			return n, fmt.Errorf("fence probe as %s in namespace %s: %w", c.shard, c.namespace, err)
		}
		if allowed {
			sentinelAllowed, err := f.prober.Allowed(ctx, sentinel, c.namespace)
			n++
			if err != nil {
				return n, fmt.Errorf("fence probe as %s in namespace %s: %w", SentinelShard, c.namespace, err)
			}
			if !sentinelAllowed {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return n, fmt.Errorf("fence probe in namespace %s: the API server does not enforce the record for %s after %d probes: %w",
				c.namespace, c.shard, n, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

type probeCandidate struct{ shard, namespace string }

// candidates picks up to MaxProbeNamespaces (new owner, namespace) pairs of the batch:
// labelled, not terminating (a terminating namespace refuses every create), in partition
// order so a run is reproducible.
func (f *Fence) candidates(owners map[partition.ID]string) []probeCandidate {
	ps := make([]partition.ID, 0, len(owners))
	for p, s := range owners {
		if s != "" {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	var out []probeCandidate
	for _, p := range ps {
		for _, ns := range f.labeler.NamespacesOf(p) {
			if f.labeler.Probeable(ns) {
				out = append(out, probeCandidate{shard: owners[p], namespace: ns})
				break
			}
		}
		if len(out) >= f.opts.MaxProbeNamespaces {
			break
		}
	}
	return out
}

// client returns the impersonating client of shard, made once per shard ID.
func (f *Fence) client(shard string) (kubernetes.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[shard]; ok {
		return c, nil
	}
	c, err := ShardClient(f.opts.Base, f.opts.Params.withDefaults(), shard)
	if err != nil {
		return nil, err
	}
	f.clients[shard] = c
	return c, nil
}

// Writes counts the record writes made (the fence's cost in API writes).
func (f *Fence) Writes() int { return f.writer.Writes() }

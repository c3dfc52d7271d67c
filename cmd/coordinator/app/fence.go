package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// DefaultSeizeAfter is --seize-after: longer than a live shard needs to reconnect after
// its stream broke (its reconnect backoff, 1s, plus a hello), far shorter than a TTL.
const DefaultSeizeAfter = 2 * time.Second

// FenceOptions configure the server-side fence: the owner record the coordinator keeps
// (owner Roles in its namespace, the partition label on every Namespace), which the
// chart's ValidatingAdmissionPolicy reads to refuse a shard's writes to namespaces it does
// not own.
type FenceOptions struct {
	Enabled bool
	// PartitionLabel is the Namespace label holding the namespace's partition.
	PartitionLabel string
	// Policy is the ValidatingAdmissionPolicy's name (for telling its refusals apart).
	Policy string
	// SeizeAfter: a shard whose stream stayed closed this long loses its partitions at
	// once instead of after its lease (0: wait for the lease).
	SeizeAfter time.Duration
	// ProbeTimeout bounds the wait for the API server to enforce a record write.
	ProbeTimeout time.Duration
	// WriteTimeout bounds each owner record request (ownerrecord.LabelerOptions.RequestTimeout).
	WriteTimeout time.Duration
}

// NewFenceOptions returns the defaults: the fence on.
func NewFenceOptions() FenceOptions {
	return FenceOptions{Enabled: true, PartitionLabel: ownerrecord.DefaultPartitionLabel, Policy: ownerrecord.DefaultPolicyName,
		SeizeAfter: DefaultSeizeAfter, ProbeTimeout: 10 * time.Second, WriteTimeout: ownerrecord.DefaultRequestTimeout}
}

// AddFlags registers the flags.
func (o *FenceOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "shard-fence", o.Enabled, "keep the owner record that the server-side fence (the chart's ValidatingAdmissionPolicy) enforces "+
		"(an owner Role per shard in the shard ServiceAccount's namespace, the partition label on every Namespace), "+
		"and send a partition's Acquire only once the API server refuses its previous owner; needs --shard-service-account")
	fs.StringVar(&o.PartitionLabel, "shard-fence-partition-label", o.PartitionLabel, "Namespace label holding the namespace's partition, which the fence policy reads; "+
		"two kshard deployments in one cluster need two labels")
	fs.StringVar(&o.Policy, "shard-fence-policy", o.Policy, "name of the fence's ValidatingAdmissionPolicy (its refusals are told apart by it)")
	fs.DurationVar(&o.SeizeAfter, "seize-after", o.SeizeAfter, "with --shard-fence: a shard whose session stream stayed closed this long loses its partitions at once "+
		"(its late writes are refused), instead of after --session-ttl + --fencing-margin; 0 waits for the lease")
	fs.DurationVar(&o.ProbeTimeout, "shard-fence-probe-timeout", o.ProbeTimeout, "how long to wait for the API server to enforce an owner record write before retrying it")
	fs.DurationVar(&o.WriteTimeout, "shard-fence-write-timeout", o.WriteTimeout, "how long one owner record request (an owner Role write, a partition label PATCH, a re-read) may take before the batch fails and is retried")
}

// validate reports every bad flag of the block; reconnect is --shard-reconnect-backoff.
func (o FenceOptions) validate(auth ShardAuthOptions, reconnect time.Duration) error {
	var errs []error
	if o.SeizeAfter < 0 {
		errs = append(errs, fmt.Errorf("--seize-after=%s must not be negative", o.SeizeAfter))
	}
	if !o.Enabled {
		if o.SeizeAfter > 0 && o.SeizeAfter != DefaultSeizeAfter {
			errs = append(errs, fmt.Errorf("--seize-after=%s needs --shard-fence: without it a shard's late writes are not refused, so its lease must be waited out", o.SeizeAfter))
		}
		return errors.Join(errs...)
	}
	if _, _, err := auth.serviceAccount(); err != nil {
		errs = append(errs, fmt.Errorf("--shard-fence: %w", err))
	}
	if o.SeizeAfter > 0 && o.SeizeAfter <= reconnect {
		errs = append(errs, fmt.Errorf("--seize-after=%s must exceed --shard-reconnect-backoff=%s, or a shard whose stream merely broke loses its partitions", o.SeizeAfter, reconnect))
	}
	if o.ProbeTimeout < MinFenceProbeTimeout {
		errs = append(errs, fmt.Errorf("--shard-fence-probe-timeout=%s must be at least %s: enforcement takes the API server's policy informer and two probes", o.ProbeTimeout, MinFenceProbeTimeout))
	}
	if o.WriteTimeout < MinFenceProbeTimeout {
		errs = append(errs, fmt.Errorf("--shard-fence-write-timeout=%s must be at least %s: below it writes fail on an ordinary busy API server and are retried forever", o.WriteTimeout, MinFenceProbeTimeout))
	}
	if err := validatePartitionLabel(o.PartitionLabel); err != nil {
		errs = append(errs, err)
	}
	if o.Policy == "" {
		errs = append(errs, errors.New("--shard-fence-policy must not be empty"))
	}
	if namespace, sa, err := auth.serviceAccount(); err == nil {
		// The cluster partition does not depend on the flags checked here; any valid one
		// stands in for it.
		p := ownerrecord.PolicyParams{Name: o.Policy, Namespace: namespace, ServiceAccount: sa, PartitionLabel: o.PartitionLabel, ClusterPartition: "0"}
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--shard-fence-partition-label/--shard-fence-policy: %w", err))
		}
	}
	return errors.Join(errs...)
}

// seizeAfter is the state machine's SeizeAfter: zero without the fence.
func (o FenceOptions) seizeAfter() time.Duration {
	if !o.Enabled {
		return 0
	}
	return o.SeizeAfter
}

// fenceCheck is what the fence's Checker needs of the coordinator: its client and
// registry, its replica ID, and the election Lease its Events go on.
type fenceCheck struct {
	client                    kubernetes.Interface
	registry                  prometheus.Registerer
	id                        string
	leaseNamespace, leaseName string
}

// start builds the fence and starts its owner labeler, which runs until ctx ends in every
// replica: a follower's informer is warm when it takes over, and it writes nothing until
// its Claim. Every replica also runs the fence's Checker (startChecker). It returns nil
// when the fence is off. The labeler is returned too: its Namespace informer also feeds
// placement by load (namespaces.go).
func (o FenceOptions) start(ctx context.Context, cfg *rest.Config, auth ShardAuthOptions, pm partition.Map, check fenceCheck, log logr.Logger) (*ownerrecord.Fence, *ownerrecord.Labeler, error) {
	if !o.Enabled {
		log.Info("WARNING: --shard-fence=false: the API server does not refuse a paused or partitioned shard's late writes")
		return nil, nil, nil
	}
	namespace, sa, err := auth.serviceAccount()
	if err != nil {
		return nil, nil, err
	}
	params := ownerrecord.PolicyParams{Name: o.Policy, Namespace: namespace, ServiceAccount: sa, PartitionLabel: o.PartitionLabel,
		ClusterPartition: ownerrecord.ClusterPartitionOf(pm)}
	// The record's writes and the enforcement reviews of a handoff batch must not queue
	// behind the client's rate limiter: they hold the batch's Acquires.
	wcfg := rest.CopyConfig(cfg)
	wcfg.QPS = -1
	meta, err := metadata.NewForConfig(wcfg)
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		return nil, nil, err
	}
	labeler, err := ownerrecord.NewLabeler(meta, kube, pm, params, ownerrecord.LabelerOptions{RequestTimeout: o.WriteTimeout})
	if err != nil {
		return nil, nil, err
	}
	go func() {
		if err := labeler.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "owner labeler stopped")
		}
	}()
	fence, err := ownerrecord.NewFence(labeler, ownerrecord.FenceOptions{Params: params, Base: cfg, ProbeTimeout: o.ProbeTimeout})
	if err != nil {
		return nil, nil, err
	}
	if err := startChecker(ctx, params, check, log); err != nil {
		return nil, nil, err
	}
	log.Info("server-side fence on", "partitionLabel", o.PartitionLabel, "ownerRoles", namespace+"/"+ownerrecord.OwnerRolePrefix+"<shard>", "policy", o.Policy, "seizeAfter", o.SeizeAfter.String())
	return fence, labeler, nil
}

// startChecker runs the fence's Checker until ctx ends: kshard_fence_enforced and
// kshard_fence_check, a warning in the log and a FenceNotEnforced Event on the election
// Lease when a policy or binding of the fence is missing or changed (nothing the
// coordinator does stops that: the API server lets a policy guard neither itself nor its
// binding), FenceRestored when it is back. While the fence policy itself is not enforced
// partition moves wait, handoffs and seizures alike: Fence.Apply needs the probe to see
// the sentinel refused. The coordinator's own user name, which the record guard names,
// is asked of the API server (SelfSubjectReview).
func startChecker(ctx context.Context, params ownerrecord.PolicyParams, check fenceCheck, log logr.Logger) error {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(3)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: check.client.CoreV1().Events(check.leaseNamespace)})
	recorder := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kshard-coordinator", Host: check.id})
	checker, err := ownerrecord.NewChecker(ownerrecord.CheckerOptions{
		Params: params, Client: check.client, Registerer: check.registry, Recorder: recorder,
		EventObject: func(ctx context.Context) (runtime.Object, error) {
			return check.client.CoordinationV1().Leases(check.leaseNamespace).Get(ctx, check.leaseName, metav1.GetOptions{})
		},
	}, log)
	if err != nil {
		b.Shutdown()
		return err
	}
	go func() {
		defer b.Shutdown()
		if err := checker.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "fence checker stopped")
		}
	}()
	return nil
}

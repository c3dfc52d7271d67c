package app

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kshard/kshard/pkg/componentopts"
	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/kubeclient"
	"github.com/kshard/kshard/pkg/sharding/hashrange"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardcache"
	"github.com/kshard/kshard/pkg/sharding/transport"
)

// Options are the shard's flags.
type Options struct {
	componentopts.Common
	KubeAPIQPS   float32
	KubeAPIBurst int

	ShardID string
	// ShardGroup is the shard group this shard runs in (--shard-group): "" for the default
	// group, else a DNS-1123 label that the pod's kshard.io/shard-group label must carry.
	ShardGroup   string
	Coordinators []string
	// CoordinatorLease is "<namespace>/<name>" of the coordinators' election Lease, whose
	// holder's advertised address the shard also dials (shardrpc.Options.LeaderAddress);
	// empty: none.
	CoordinatorLease string
	TLS              transport.TLSOptions
	Partitions       int
	LeaveTimeout     time.Duration
	WarmupLists      int
	// DiscoveryPeriod is how often the shard discovers the served resources again, for
	// the controllers that act on all of them.
	DiscoveryPeriod time.Duration
	// ClusterListThreshold: see shardcache.Options.ClusterListThreshold (0 turns it off here).
	ClusterListThreshold int
	// ServerSideFiltering selects shardcache.ModeServerFilter; SelectorRanges bounds each
	// selector (shardcache.Options.MaxSelectorRanges), SelectorWatches the selectors, i.e.
	// watches, per resource type (shardcache.Options.MaxSelectorWatches).
	ServerSideFiltering bool
	SelectorRanges      int
	SelectorWatches     int
	// CheckPermissions makes a missing RBAC permission a startup error.
	CheckPermissions bool
	// ListControllers prints the kube-controller-manager controllers this shard can run,
	// by canonical name and alias, and exits (the local control plane switches them off in
	// its controller-manager).
	ListControllers bool

	Controllers controllers.Selection

	// CoordinatorTokenFile: see addCoordinatorAuthFlags.
	CoordinatorTokenFile string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Common:     componentopts.NewCommon(),
		KubeAPIQPS: 50, KubeAPIBurst: 100,
		ShardID:              componentopts.PodIdentity(),
		Partitions:           partition.DefaultCount,
		LeaveTimeout:         60 * time.Second,
		DiscoveryPeriod:      discoveryPeriod,
		WarmupLists:          4,
		ClusterListThreshold: shardcache.DefaultClusterListThreshold,
		SelectorRanges:       hashrange.DefaultMaxRanges,
		SelectorWatches:      shardcache.DefaultMaxSelectorWatches,
		CheckPermissions:     true,
		Controllers:          append(controllers.Selection(nil), controllers.DefaultSelection...),
	}
}

// AddFlags registers the flags; the registry adds the controllers' own.
func (o *Options) AddFlags(fs *pflag.FlagSet, reg *controllers.Registry) {
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "QPS to use while talking with the Kubernetes API server")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "burst to use while talking with the Kubernetes API server")
	fs.StringVar(&o.ShardID, "shard-id", o.ShardID, "stable identity of this shard (default $POD_NAME, else the host name)")
	fs.StringVar(&o.ShardGroup, "shard-group", o.ShardGroup, "shard group this shard runs in (a DNS-1123 label; empty: the default group): with the coordinator's --placement=load, "+
		"the partitions pinned to the group (--pin, --pin-partition, the Namespace annotation kshard.io/shard-group) go to its shards, and a group not in the "+
		"coordinator's --shard-group-shared takes nothing else. With --shard-auth=token the coordinator refuses this shard unless its pod carries the label kshard.io/shard-group=<group> (none for the default group)")
	fs.StringSliceVar(&o.Coordinators, "coordinator-address", o.Coordinators, "host:port of the coordinator replicas' gRPC endpoint, repeatable: a name stands for every address it resolves to "+
		"(a headless Service of the replicas gives all of them; looked up again at each reconnect), and a follower names the leader")
	fs.StringVar(&o.CoordinatorLease, "coordinator-lease", o.CoordinatorLease, "<namespace>/<name> of the coordinators' election Lease: the shard also dials the address its holder advertises, read through the API server "+
		"(needs get on that Lease). With kshard running the EndpointSlice controller, a --coordinator-address name resolves through EndpointSlices that only a working shard writes: "+
		"after every coordinator and shard pod was replaced at once, the Lease is how shards find the new leader")
	o.TLS.AddFlags(fs, "grpc-", false)
	o.addCoordinatorAuthFlags(fs)
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "number of namespace partitions; must equal the coordinator's")
	fs.DurationVar(&o.LeaveTimeout, "leave-timeout", o.LeaveTimeout, "on SIGTERM, how long to wait for the coordinator to move this shard's partitions away before exiting anyway")
	fs.DurationVar(&o.DiscoveryPeriod, "served-discovery-period", o.DiscoveryPeriod, "how often the shard asks the API server which resources it serves, for the controllers that act on every resource (the garbage collector, "+
		"ResourceQuota): a CRD created or deleted, an aggregated API registered, is picked up within this period (kube-controller-manager's is 30s)")
	fs.IntVar(&o.WarmupLists, "warmup-concurrency", o.WarmupLists, "namespace-scoped LIST calls a partition warm-up runs at once")
	fs.IntVar(&o.ClusterListThreshold, "warmup-cluster-list-threshold", o.ClusterListThreshold, "namespace-scoped LIST calls (namespaces × resource types) waiting in warm-ups above which the shard warms them with cluster-wide LISTs instead, "+
		"one per resource type for all of them (a scale-out or a killed shard hands over thousands of namespaces at once); 0 never does")
	fs.BoolVar(&o.ServerSideFiltering, "server-side-filtering", o.ServerSideFiltering, "also ask the API server to filter the namespaced informers' LISTs and WATCHes to (a superset of) this shard's namespaces "+
		"with KEP-5866 shard selectors (shardRange over the FNV-1a hash of the namespace); kube-apiserver needs the ShardedListAndWatch feature gate. "+
		"An API server that ignores the selector is logged once; the shard filters every object itself either way")
	fs.IntVar(&o.SelectorRanges, "server-side-filtering-max-ranges", o.SelectorRanges, fmt.Sprintf("with --server-side-filtering, the most shardRange calls of one selector (1..%d): fewer ranges cover more namespaces the shard does not own", hashrange.MaxRanges))
	fs.IntVar(&o.SelectorWatches, "server-side-filtering-max-watches", o.SelectorWatches, fmt.Sprintf("with --server-side-filtering, the most watches per resource type, a power of two (1..%d): the namespaces' hash space is split into that many slices at most, each watched with its own selector, so that the selectors stay exact when one selector's ranges are too few (thousands of namespaces per shard); the shard uses as few as suffice", shardcache.MaxSelectorWatches))
	fs.BoolVar(&o.CheckPermissions, "check-permissions", o.CheckPermissions, "at start, check with SelfSubjectAccessReviews that the shard may do what it and the enabled controllers need, and exit naming what is missing")
	fs.BoolVar(&o.ListControllers, "list-controllers", false, "print the kube-controller-manager controllers this shard can run, one per line: its canonical name, then its alias (--controllers takes either), and exit (switch the same off in kube-controller-manager)")
	o.Controllers.AddFlags(fs, reg.Names())
	reg.AddFlags(fs)
	o.Common.AddFlags(fs, "/metrics, /livez and /readyz")
}

// Validate reports every bad flag at once.
func (o *Options) Validate(reg *controllers.Registry) error {
	var errs []error
	if err := protocol.ValidateShardID(o.ShardID); err != nil {
		errs = append(errs, fmt.Errorf("--shard-id: %w", err))
	}
	if err := protocol.ValidateGroup(o.ShardGroup); err != nil {
		errs = append(errs, fmt.Errorf("--shard-group: %w", err))
	}
	if len(o.Coordinators) == 0 {
		errs = append(errs, errors.New("--coordinator-address is required"))
	}
	for _, a := range o.Coordinators {
		if err := componentopts.ValidateHostPort("coordinator-address", a); err != nil {
			errs = append(errs, err)
		}
	}
	if o.CoordinatorLease != "" {
		if _, _, err := splitLeaseRef(o.CoordinatorLease); err != nil {
			errs = append(errs, fmt.Errorf("--coordinator-lease: %w", err))
		}
	}
	if err := o.TLS.Validate(false, "grpc-"); err != nil {
		errs = append(errs, err)
	}
	if err := partition.ValidateCount(o.Partitions); err != nil {
		errs = append(errs, fmt.Errorf("--partitions: %w", err))
	}
	if err := kubeclient.ValidateRateLimit("kube-api-qps", o.KubeAPIQPS, "kube-api-burst", o.KubeAPIBurst); err != nil {
		errs = append(errs, err)
	}
	if o.LeaveTimeout < 0 {
		errs = append(errs, errors.New("--leave-timeout must not be negative"))
	}
	if o.DiscoveryPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--served-discovery-period=%s must be at least 1s", o.DiscoveryPeriod))
	}
	if err := componentopts.ValidateWorkers("warmup-concurrency", o.WarmupLists); err != nil {
		errs = append(errs, err)
	}
	if o.ClusterListThreshold < 0 {
		errs = append(errs, fmt.Errorf("--warmup-cluster-list-threshold=%d must not be negative (0 turns cluster-wide warm-up lists off)", o.ClusterListThreshold))
	}
	if o.SelectorRanges < 1 || o.SelectorRanges > hashrange.MaxRanges {
		errs = append(errs, fmt.Errorf("--server-side-filtering-max-ranges=%d must be between 1 and %d", o.SelectorRanges, hashrange.MaxRanges))
	}
	if w := o.SelectorWatches; w < 1 || w > shardcache.MaxSelectorWatches || w&(w-1) != 0 {
		errs = append(errs, fmt.Errorf("--server-side-filtering-max-watches=%d must be a power of two between 1 and %d", w, shardcache.MaxSelectorWatches))
	}
	if err := reg.Validate(o.Controllers); err != nil {
		errs = append(errs, err)
	}
	if err := o.Common.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------------------
// The shard's identity towards the coordinator.

// addCoordinatorAuthFlags registers the token the shard proves its identity with: its
// pod's projected ServiceAccount token, whose pod name the coordinator (--shard-auth=token)
// checks against --shard-id. It is sent only over TLS, or in plaintext when --grpc-insecure
// says so explicitly.
func (o *Options) addCoordinatorAuthFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CoordinatorTokenFile, "coordinator-token-file", o.CoordinatorTokenFile,
		"projected ServiceAccount token (audience of the coordinator's --shard-token-audience) sent to the coordinator as this shard's identity; "+
			"read again for every session, as the kubelet rotates it. Empty sends none (a coordinator with --shard-auth=none)")
}

// splitLeaseRef splits "<namespace>/<name>" of a Lease, both valid object names.
func splitLeaseRef(ref string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok {
		return "", "", fmt.Errorf("%q is not <namespace>/<name>", ref)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", "", fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return namespace, name, nil
}

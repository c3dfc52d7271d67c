package app

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/componentopts"
	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/pkg/sharding/transport"
)

// Defaults of the session timings. With kube-controller-manager's leader election
// defaults (15s lease, 2s retry) they satisfy handoff.FailoverBudget: 1s + 15s + 2×4.4s
// (the retry period, jittered, twice) + 0s + 1s = 25.8s < 28s, so a shard keeps its
// partitions through a coordinator leader change when shards are given every replica's
// address (followers name the new leader). Behind a Service that routes only to the
// Ready leader, set --leader-readiness-delay and --shard-reconnect-backoff to what that
// topology gives, and the TTL to match.
const (
	// DefaultSessionTTL is --session-ttl.
	DefaultSessionTTL = 28 * time.Second
	// DefaultHeartbeatInterval is --heartbeat-interval: a fixed second rather than a
	// third of the TTL, because every second of heartbeat interval is a second less of
	// the TTL left to ride out a failover, and a heartbeat costs one small message.
	DefaultHeartbeatInterval = time.Second
	// DefaultLeaderReadiness is --leader-readiness-delay: shards that know every replica
	// reach a new leader as soon as it serves (its term is recorded).
	DefaultLeaderReadiness time.Duration = 0
	// DefaultShardReconnectBackoff is --shard-reconnect-backoff: a shard redirected by a
	// follower retries after its minimum backoff (200ms), doubling while it also tries
	// the old leader's address; a second covers that.
	DefaultShardReconnectBackoff = time.Second
)

// Defaults of what the Welcome tells shards about load reports (docs/design-placement.md
// §1.2–1.4). Placement by load is for long-lived skew (a hot tenant), not bursts: a move
// costs a warm-up and a pause of its partition.
const (
	// DefaultLoadReportInterval is --load-report-interval: every 10th heartbeat at the
	// default --heartbeat-interval. A 5-minute average gains nothing from reports every
	// second, and each report is applied under the coordinator's lock.
	DefaultLoadReportInterval = 10 * time.Second
	// DefaultLoadHalfLife is --load-half-life: a namespace that starts carrying a quarter
	// of the changes is noticed in about a minute, while the noise of a shard's load at
	// the capacity benchmark's rates stays below the balancer's margin.
	DefaultLoadHalfLife = 5 * time.Minute
	// DefaultReconcileWeight is --balance-reconcile-weight: the client rate limits bound
	// a shard's throughput, so API requests make the load; a reconcile that writes
	// nothing (a cache-only sync) still costs a tenth of a request.
	DefaultReconcileWeight = 0.1
	// MinLoadHalfLifeReports is how many report intervals --load-half-life spans at
	// least: an average over fewer reports follows their noise.
	MinLoadHalfLifeReports = 3
)

// Options are the coordinator's flags.
type Options struct {
	componentopts.Common
	ID               string
	GRPCBindAddress  string
	AdvertiseAddress string
	TLS              transport.TLSOptions
	Leader           *leader.Options
	Handoff          handoff.Config
	ShardAuth        ShardAuthOptions // shard authentication and session caps (block at the end)
	Fence            FenceOptions     // the server-side fence (fence.go)
	Placement        PlacementOptions // placement by load and pins (placement.go)
	// LeaderReadiness and ShardReconnectBackoff describe the deployment, for the check of
	// --session-ttl against handoff.FailoverBudget only.
	LeaderReadiness       time.Duration
	ShardReconnectBackoff time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	adv := ""
	if ip := os.Getenv("POD_IP"); ip != "" {
		adv = net.JoinHostPort(ip, "9090")
	}
	return &Options{
		Common:           componentopts.NewCommon(),
		ID:               componentopts.PodIdentity(),
		GRPCBindAddress:  ":9090",
		AdvertiseAddress: adv,
		Leader:           leader.NewOptions(),
		ShardAuth:        NewShardAuthOptions(),
		Fence:            NewFenceOptions(),
		Placement:        NewPlacementOptions(),
		Handoff: handoff.Config{
			PartitionCount: partition.DefaultCount,
			Ring:           ring.Config{ReplicationFactor: ring.DefaultReplicationFactor, Load: ring.DefaultLoad},
			// Longer than the leader election's worst failover (lease duration + retry
			// period), so shards keep working while a new leader takes over.
			SessionTTL: DefaultSessionTTL, HeartbeatInterval: DefaultHeartbeatInterval, Margin: handoff.DefaultMargin,
			Debounce: handoff.DefaultDebounce, MaxDebounce: handoff.DefaultMaxDebounce,
			PrepareTimeout: handoff.DefaultPrepareTimeout, ReleaseTimeout: handoff.DefaultReleaseTimeout,
			MaxConcurrentMoves: handoff.DefaultMaxConcurrentMoves,
			Load: handoff.LoadSettings{ReportInterval: DefaultLoadReportInterval, HalfLife: DefaultLoadHalfLife,
				ReconcileWeight: DefaultReconcileWeight},
		},
		LeaderReadiness:       DefaultLeaderReadiness,
		ShardReconnectBackoff: DefaultShardReconnectBackoff,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ID, "id", o.ID, "name of this replica (default $POD_NAME, else the host name)")
	fs.StringVar(&o.GRPCBindAddress, "grpc-bind-address", o.GRPCBindAddress, "address the session gRPC service listens on")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", o.AdvertiseAddress, "host:port at which shards reach this replica's gRPC service (default $POD_IP:9090); followers name it to shards")
	o.TLS.AddFlags(fs, "grpc-", true)
	o.Leader.AddFlags(fs)
	h := &o.Handoff
	fs.IntVar(&h.PartitionCount, "partitions", h.PartitionCount, "number of namespace partitions (fixed for a deployment; shards must use the same)")
	fs.IntVar(&h.Ring.ReplicationFactor, "ring-replication-factor", h.Ring.ReplicationFactor, "virtual nodes per shard on the consistent-hash ring")
	fs.Float64Var(&h.Ring.Load, "ring-load", h.Ring.Load, "no longer affects the assignment (every shard gets floor or ceil of the average partitions); still validated")
	_ = fs.MarkDeprecated("ring-load", "it no longer affects the assignment: every shard gets the floor or ceiling of the average partitions")
	fs.DurationVar(&h.SessionTTL, "session-ttl", h.SessionTTL, "a shard without an acknowledged heartbeat for this long stops working")
	fs.DurationVar(&h.HeartbeatInterval, "heartbeat-interval", h.HeartbeatInterval, "how often shards send heartbeats (at most --session-ttl/2)")
	fs.DurationVar(&h.Margin, "fencing-margin", h.Margin, "added to the TTL before a silent shard's partitions are moved (covers clock drift and stopping workers)")
	fs.DurationVar(&h.Debounce, "membership-debounce", h.Debounce, "quiet time before membership changes rebalance partitions")
	fs.DurationVar(&h.MaxDebounce, "membership-max-debounce", h.MaxDebounce, "longest a stream of membership changes can postpone a rebalance")
	fs.IntVar(&h.ExpectedMembers, "expected-shards", h.ExpectedMembers, "shard replicas the deployment runs (the chart sets the shard Deployment's replicas); while no partition is assigned yet "+
		"(a cold start), partitions are assigned as soon as this many shards have joined instead of after --membership-debounce; 0: unknown, always debounce")
	fs.DurationVar(&h.PrepareTimeout, "prepare-timeout", h.PrepareTimeout, "how long a move waits for the new owner's warm caches before going on")
	fs.DurationVar(&h.ReleaseTimeout, "release-timeout", h.ReleaseTimeout, "how long a live shard may take to release a partition before it is fenced out")
	fs.IntVar(&h.MaxConcurrentMoves, "max-concurrent-moves", h.MaxConcurrentMoves, "cap on partition moves in flight (a joining shard warms each burst of moves with one cluster-wide list per type: fewer, larger bursts cost the API server less)")
	fs.DurationVar(&h.Load.ReportInterval, "load-report-interval", h.Load.ReportInterval, "how often shards report the load of their partitions: on the first heartbeat after each hello "+
		"and then on every heartbeat this far apart (rounded to whole --heartbeat-intervals, at least one); 0: no load reports. Sent to shards when they connect")
	fs.DurationVar(&h.Load.HalfLife, "load-half-life", h.Load.HalfLife, "half-life of the moving average of each partition's load that shards report (at least 3 × --load-report-interval). Sent to shards when they connect")
	fs.Float64Var(&h.Load.ReconcileWeight, "balance-reconcile-weight", h.Load.ReconcileWeight, "what one reconcile counts in a partition's load, in API requests (a reconcile that writes nothing still costs). Sent to shards when they connect")
	o.Placement.AddFlags(fs)
	o.ShardAuth.AddFlags(fs)
	o.Fence.AddFlags(fs)
	fs.DurationVar(&o.LeaderReadiness, "leader-readiness-delay", o.LeaderReadiness, "for the --session-ttl check: time from a new leader winning the Lease until shards can reach it, "+
		"beyond recording its term; 0 when shards are given every replica's address, the readiness probe period when they reach the leader through a Service of Ready pods")
	fs.DurationVar(&o.ShardReconnectBackoff, "shard-reconnect-backoff", o.ShardReconnectBackoff, "for the --session-ttl check: longest a shard waits between attempts to reach a coordinator during a failover; "+
		"about 1s when followers can redirect it, the shard's maximum backoff (10s) when no coordinator answers until the new leader is Ready")
	o.Common.AddFlags(fs, "/metrics, /livez, /readyz and /assignments")
}

// Validate reports every bad flag at once, each by its flag name. The handoff flags are
// checked as given, before handoff.Config.WithDefaults: that turns a zero into a default,
// so --partitions=0 or --session-ttl=0 would otherwise run with 4096 partitions or a 10s
// TTL without a word.
func (o *Options) Validate() error {
	var errs []error
	if o.ID == "" {
		errs = append(errs, errors.New("--id must not be empty"))
	}
	if o.AdvertiseAddress == "" {
		errs = append(errs, errors.New("--advertise-address is required (or set $POD_IP)"))
	} else if err := componentopts.ValidateHostPort("advertise-address", o.AdvertiseAddress); err != nil {
		errs = append(errs, err)
	}
	if err := o.TLS.Validate(true, "grpc-"); err != nil {
		errs = append(errs, err)
	}
	if err := o.ShardAuth.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Fence.validate(o.ShardAuth, o.ShardReconnectBackoff); err != nil {
		errs = append(errs, err)
	}
	if err := o.Leader.Validate(); err != nil {
		errs = append(errs, err)
	}
	flagErrs := o.validateHandoffFlags()
	if err := o.Placement.validate(o.Handoff.PartitionCount, reportCadence(o.Handoff.Load, o.Handoff.HeartbeatInterval)); err != nil {
		flagErrs = append(flagErrs, err)
	}
	errs = append(errs, flagErrs...)
	if len(flagErrs) == 0 {
		// Whatever the flags cannot express wrongly on their own (the ring's room for
		// the partitions, the clock-drift margin with defaults applied) is left to the
		// state machine's own check.
		if err := o.handoffConfig().WithDefaults().Validate(); err != nil {
			errs = append(errs, err)
		}
		if err := o.validateFailover(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.LeaderReadiness < 0 {
		errs = append(errs, fmt.Errorf("--leader-readiness-delay=%s must not be negative", o.LeaderReadiness))
	}
	if o.ShardReconnectBackoff < 0 {
		errs = append(errs, fmt.Errorf("--shard-reconnect-backoff=%s must not be negative", o.ShardReconnectBackoff))
	}
	if err := o.Common.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// handoffConfig is the state machine's configuration from the flags: --max-shards bounds
// the ring's members as well as the session streams.
func (o *Options) handoffConfig() handoff.Config {
	h := o.Handoff
	h.MaxMembers = o.ShardAuth.MaxShards
	h.Balance = o.Placement.balanceConfig()
	return h
}

// validateHandoffFlags checks the handoff flags as given, by flag name.
func (o *Options) validateHandoffFlags() []error {
	var errs []error
	h := o.Handoff
	if err := partition.ValidateCount(h.PartitionCount); err != nil {
		errs = append(errs, fmt.Errorf("--partitions: %w", err))
	}
	if rf := h.Ring.ReplicationFactor; rf < 1 || rf > ring.MaxReplicationFactor {
		errs = append(errs, fmt.Errorf("--ring-replication-factor=%d out of range [1, %d]", rf, ring.MaxReplicationFactor))
	}
	if l := h.Ring.Load; math.IsNaN(l) || math.IsInf(l, 0) || l < 1 {
		errs = append(errs, fmt.Errorf("--ring-load=%v must be a finite number ≥ 1 (no shard can be held below the average)", l))
	}
	// Durations that must be positive: zero is not "none" but "the default" to the state
	// machine, and a negative one means nothing.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"session-ttl", h.SessionTTL},
		{"heartbeat-interval", h.HeartbeatInterval},
		{"fencing-margin", h.Margin},
		{"membership-debounce", h.Debounce},
		{"membership-max-debounce", h.MaxDebounce},
		{"prepare-timeout", h.PrepareTimeout},
		{"release-timeout", h.ReleaseTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s=%s must be positive", d.flag, d.v))
		}
	}
	if h.HeartbeatInterval > 0 && h.HeartbeatInterval < MinHeartbeatInterval {
		errs = append(errs, fmt.Errorf("--heartbeat-interval=%s must be at least %s: every shard's heartbeat is handled under the coordinator's lock",
			h.HeartbeatInterval, MinHeartbeatInterval))
	}
	if h.SessionTTL > 0 && h.HeartbeatInterval > h.SessionTTL/2 {
		errs = append(errs, fmt.Errorf("--heartbeat-interval=%s must be at most --session-ttl/2 (%s): one lost heartbeat must not fence a healthy shard",
			h.HeartbeatInterval, h.SessionTTL/2))
	}
	if h.Debounce > 0 && h.MaxDebounce > 0 && h.MaxDebounce < h.Debounce {
		errs = append(errs, fmt.Errorf("--membership-max-debounce=%s must not be below --membership-debounce=%s", h.MaxDebounce, h.Debounce))
	}
	if h.MaxConcurrentMoves < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-moves=%d must be at least 1", h.MaxConcurrentMoves))
	}
	errs = append(errs, validateLoadFlags(h.Load, h.HeartbeatInterval)...)
	if h.ExpectedMembers < 0 {
		errs = append(errs, fmt.Errorf("--expected-shards=%d must not be negative (0: unknown)", h.ExpectedMembers))
	} else if max := o.ShardAuth.MaxShards; max >= 1 && h.ExpectedMembers > max {
		errs = append(errs, fmt.Errorf("--expected-shards=%d must not exceed --max-shards=%d", h.ExpectedMembers, max))
	}
	return errs
}

// validateLoadFlags checks the load-report flags, which a Welcome carries to every shard:
// a shard refuses a Welcome outside handoff.LoadSettings' bounds, so these must hold
// before the coordinator starts. A report interval that is not a whole number of
// heartbeat intervals is not refused: shards round it to the nearest (at least one), so
// that a changed --heartbeat-interval does not require a second flag; the half-life's
// bound counts reports at the longer of the flag and that cadence.
func validateLoadFlags(l handoff.LoadSettings, heartbeat time.Duration) []error {
	var errs []error
	switch iv := l.ReportInterval; {
	case iv < 0:
		errs = append(errs, fmt.Errorf("--load-report-interval=%s must not be negative (0: no load reports)", iv))
	case iv > handoff.MaxLoadReportInterval:
		errs = append(errs, fmt.Errorf("--load-report-interval=%s must be at most %s", iv, handoff.MaxLoadReportInterval))
	}
	switch hl := l.HalfLife; {
	case hl <= 0 || hl > handoff.MaxLoadHalfLife:
		errs = append(errs, fmt.Errorf("--load-half-life=%s must be positive and at most %s", hl, handoff.MaxLoadHalfLife))
	case l.ReportInterval > 0 && hl < MinLoadHalfLifeReports*reportCadence(l, heartbeat):
		cadence := reportCadence(l, heartbeat)
		rounded := ""
		if cadence != l.ReportInterval {
			rounded = fmt.Sprintf(", as shards report every %s at --heartbeat-interval=%s", cadence, heartbeat)
		}
		errs = append(errs, fmt.Errorf("--load-half-life=%s must be at least %d × --load-report-interval (%s%s): an average over fewer reports follows their noise",
			hl, MinLoadHalfLifeReports, MinLoadHalfLifeReports*cadence, rounded))
	}
	if w := l.ReconcileWeight; math.IsNaN(w) || w < 0 || w > handoff.MaxReconcileWeight {
		errs = append(errs, fmt.Errorf("--balance-reconcile-weight=%v must be a number from 0 to %v", w, handoff.MaxReconcileWeight))
	}
	return errs
}

// reportCadence is the longer of --load-report-interval and the interval shards report at
// once they round it to whole heartbeats (LoadSettings.Cadence): bounds counted in reports
// must hold at both.
func reportCadence(l handoff.LoadSettings, heartbeat time.Duration) time.Duration {
	return max(l.ReportInterval, l.Cadence(heartbeat))
}

// validateFailover checks --session-ttl against handoff.FailoverBudget, where the rule and
// the reason for each term are written down. Without leader election there is no failover
// to ride out.
func (o *Options) validateFailover() error {
	if !o.Leader.Enabled {
		return nil
	}
	b := handoff.FailoverBudget{
		HeartbeatInterval: o.Handoff.HeartbeatInterval,
		LeaseDuration:     o.Leader.LeaseDuration,
		RetryPeriod:       o.Leader.RetryPeriod,
		Readiness:         o.LeaderReadiness,
		ReconnectBackoff:  o.ShardReconnectBackoff,
	}
	if b.CoveredBy(o.Handoff.SessionTTL) {
		return nil
	}
	return fmt.Errorf("--session-ttl=%s does not cover a coordinator leader failover: it must exceed "+
		"--heartbeat-interval (%s) + --leader-elect-lease-duration (%s) + 2 × --leader-elect-retry-period jittered (2 × %s) + "+
		"--leader-readiness-delay (%s) + --shard-reconnect-backoff (%s) = %s; otherwise a shard's lease can run out "+
		"while a new leader takes over, and its work stops until the partitions are granted again",
		o.Handoff.SessionTTL, b.HeartbeatInterval, b.LeaseDuration, b.RetryWait(), b.Readiness, b.ReconnectBackoff, b.Total())
}

// ---------------------------------------------------------------------------------------
// Who may open shard sessions, and how many: shard authentication and session caps.

// Shard authentication modes (--shard-auth).
const (
	// ShardAuthToken verifies each shard's pod-bound ServiceAccount token with a
	// TokenReview: its pod name must be the shard ID the hello claims.
	ShardAuthToken = "token"
	// ShardAuthNone takes every claimed shard ID on trust: for local development and
	// tests without pod-bound tokens only.
	ShardAuthNone = "none"
)

// ShardAuthOptions decide which clients may speak for which shard, and cap how many
// sessions the coordinator holds.
type ShardAuthOptions struct {
	Mode string
	// ServiceAccount is the shards' ServiceAccount as namespace/name; with token
	// authentication only its tokens are accepted.
	ServiceAccount string
	// Audience the shards' projected tokens are issued for.
	Audience string
	// MaxShards sizes the cap on open session streams (coordinatorrpc.SessionsForShards).
	MaxShards int
	// MaxShardsPerAddress is how many shards may connect from one client address at
	// once: it caps one address's unauthenticated streams
	// (coordinatorrpc.Options.MaxPendingPerPeer) and its burst of token reviews
	// (shardauth.TokenReviewOptions.PeerReviewBurst), so that one client, even one holding
	// the shards' client certificate, cannot take what the other shards need.
	MaxShardsPerAddress int
}

// NewShardAuthOptions returns the defaults: token authentication, no ServiceAccount yet
// (it must be given).
func NewShardAuthOptions() ShardAuthOptions {
	return ShardAuthOptions{Mode: ShardAuthToken, Audience: shardauth.DefaultAudience, MaxShards: coordinatorrpc.DefaultMaxShards,
		MaxShardsPerAddress: coordinatorrpc.DefaultMaxPendingPerPeer}
}

// AddFlags registers the flags.
func (o *ShardAuthOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Mode, "shard-auth", o.Mode, `how shard identities are verified: "token" (a TokenReview of each shard's projected ServiceAccount token, `+
		`whose pod name must equal its shard ID) or "none" (any client may claim any shard ID: local development only)`)
	fs.StringVar(&o.ServiceAccount, "shard-service-account", o.ServiceAccount, "namespace/name of the shards' ServiceAccount; with --shard-auth=token only its tokens open sessions")
	fs.StringVar(&o.Audience, "shard-token-audience", o.Audience, "audience the shards' projected tokens are issued for")
	fs.IntVar(&o.MaxShards, "max-shards", o.MaxShards, "most shards this coordinator serves: open session streams are capped at twice this plus 16 (a reconnecting shard may briefly hold two)")
	fs.IntVar(&o.MaxShardsPerAddress, "max-shards-per-address", o.MaxShardsPerAddress, "most shards connecting from one client IP address at once: caps that address's session streams not yet authenticated "+
		"and its burst of token reviews (then one a second), so that one client cannot shut the others out; raise it only when many shards share an address (SNAT)")
}

// Validate reports every bad flag of the block.
func (o ShardAuthOptions) Validate() error {
	var errs []error
	switch o.Mode {
	case ShardAuthToken:
		if _, _, err := o.serviceAccount(); err != nil {
			errs = append(errs, err)
		}
		if o.Audience == "" {
			errs = append(errs, errors.New("--shard-token-audience must not be empty with --shard-auth=token"))
		} else if err := validateAudience(o.Audience); err != nil {
			errs = append(errs, err)
		}
	case ShardAuthNone:
	default:
		errs = append(errs, fmt.Errorf("--shard-auth=%q: want %q or %q", o.Mode, ShardAuthToken, ShardAuthNone))
	}
	if o.MaxShards < 1 {
		errs = append(errs, fmt.Errorf("--max-shards=%d must be at least 1", o.MaxShards))
	} else if o.MaxShardsPerAddress < 1 || o.MaxShardsPerAddress > o.MaxShards {
		errs = append(errs, fmt.Errorf("--max-shards-per-address=%d must be from 1 to --max-shards=%d", o.MaxShardsPerAddress, o.MaxShards))
	}
	return errors.Join(errs...)
}

func (o ShardAuthOptions) serviceAccount() (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(o.ServiceAccount, "/")
	if !ok || len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", fmt.Errorf("--shard-service-account=%q: want namespace/name of the shards' ServiceAccount (required with --shard-auth=token)", o.ServiceAccount)
	}
	return namespace, name, nil
}

// Authenticator builds what the flags select. TokenReviews get a client of their own
// without client-go's rate limiter (5 QPS by default), bounded instead by shardauth's
// review budget with a burst of --max-shards: on the shared client a new leader's fleet of
// hellos would queue behind itself for minutes, and delay the Lease's renewals with it.
func (o ShardAuthOptions) Authenticator(cfg *rest.Config, log logr.Logger) (shardauth.Authenticator, error) {
	if o.Mode == ShardAuthNone {
		return o.authenticator(nil, log)
	}
	if err := checkAPIAudience(cfg, o.Audience); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return o.authenticator(client.AuthenticationV1(), log)
}

// GroupVerifier builds the check of the shard group a hello claims: with token
// authentication the pod the token is bound to must carry it (shardauth.PodGroups, in the
// shards' ServiceAccount's namespace, which the coordinator needs get on pods in); with
// "none" nil, the claim trusted as the ID is. The pods are read on a client of their own
// without client-go's rate limiter, for the reason Authenticator gives: a pod is read
// after its token's review, once per pod UID and cache period, so the review budget and
// the hello rate bound it.
func (o ShardAuthOptions) GroupVerifier(cfg *rest.Config) (shardauth.GroupVerifier, error) {
	if o.Mode == ShardAuthNone {
		return nil, nil
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return o.groupVerifier(client.CoreV1())
}

// groupVerifier builds the GroupVerifier on a given pods client.
func (o ShardAuthOptions) groupVerifier(client corev1client.PodsGetter) (shardauth.GroupVerifier, error) {
	if o.Mode == ShardAuthNone {
		return nil, nil
	}
	namespace, _, err := o.serviceAccount()
	if err != nil {
		return nil, err
	}
	g, err := shardauth.NewPodGroups(shardauth.PodGroupsOptions{Client: client, Namespace: namespace})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// authenticator builds the Authenticator on a given TokenReview client. "none" logs a
// warning on every start: a coordinator that does not verify identities should never go
// unnoticed.
func (o ShardAuthOptions) authenticator(client authenticationv1client.TokenReviewsGetter, log logr.Logger) (shardauth.Authenticator, error) {
	if o.Mode == ShardAuthNone {
		log.Info("WARNING: --shard-auth=none: shard identities are NOT verified; any client that reaches the gRPC port can claim any shard ID, " +
			"take its partitions and feed the leader epochs. Use only for local development.")
		return shardauth.Insecure{}, nil
	}
	namespace, name, err := o.serviceAccount()
	if err != nil {
		return nil, err
	}
	a, err := shardauth.NewTokenReview(shardauth.TokenReviewOptions{
		Client: client, Audience: o.Audience, Namespace: namespace, Name: name, ReviewBurst: o.MaxShards, PeerReviewBurst: o.MaxShardsPerAddress,
	})
	if err != nil {
		return nil, err
	}
	log.Info("shard sessions are authenticated by TokenReview", "serviceAccount", o.ServiceAccount, "audience", o.Audience)
	return a, nil
}

package handoff

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// Defaults, chosen for a coordinator and shards in one cluster network.
const (
	// DefaultSessionTTL: a shard that hears nothing for 10s stops working.
	// Shorter makes failover faster but turns API-server hiccups and GC
	// pauses into fencing.
	DefaultSessionTTL = 10 * time.Second
	// DefaultMargin covers clock-rate drift over a TTL (far below 2s for
	// any sane clock) plus the time workers need to stop at the deadline.
	DefaultMargin = 2 * time.Second
	// DefaultMaxClockDrift is the assumed bound on how much any clock's
	// rate differs from real time (1%, generous for NTP-disciplined hosts).
	DefaultMaxClockDrift = 0.01
	// DefaultDebounce: membership must be quiet this long before the target
	// assignment changes, so a rolling update or a burst of new replicas
	// becomes one rebalance instead of many.
	DefaultDebounce = 3 * time.Second
	// DefaultMaxDebounce bounds how long a stream of changes can postpone a
	// rebalance (and a leaving shard's exit).
	DefaultMaxDebounce = 15 * time.Second
	// DefaultPrepareTimeout: how long a move waits for warm caches before
	// it goes on cold (the new owner then warms while it works).
	DefaultPrepareTimeout = 30 * time.Second
	// DefaultReleaseTimeout: a live shard that has not released a partition
	// this long after being asked is stuck; it is fenced out (its
	// heartbeats are no longer acknowledged) so its lease runs out.
	DefaultReleaseTimeout = 2 * time.Minute
	// DefaultRetryInterval: how often an unanswered Release or Acquire is
	// sent again.
	DefaultRetryInterval = 2 * time.Second
	// DefaultMaxConcurrentMoves caps handoffs in flight. Shards warm many
	// namespaces with cluster-wide lists, one round per burst of Prepares
	// whatever its size, so the cheapest rebalance starts every move at once:
	// a joining shard then lists each type once. At 10,000 namespaces a
	// 3 → 4 scale-out (1,027 moves) converged in 54 s with 32 moves in
	// flight, in 7.5 s with 256 (docs/performance.md); the default is the
	// default partition count, so it caps nothing there, and bounds the
	// coordinator's bookkeeping with more partitions.
	DefaultMaxConcurrentMoves = partition.DefaultCount
	// DefaultMaxMembers caps shard sessions. Each member costs ring
	// virtual nodes on every target computation and per-partition work on
	// every expiry; far more shards than partitions would leave most idle.
	DefaultMaxMembers = 1000
	// MaxRingVirtualNodes bounds MaxMembers × Ring.ReplicationFactor: the
	// target computation holds 16 bytes per virtual node and sorts them
	// (10M: 160 MB and about a second per membership change).
	MaxRingVirtualNodes = 10_000_000
)

// Config configures a Coordinator. Zero fields take defaults (WithDefaults).
type Config struct {
	// PartitionCount is P; it must equal Ring.PartitionCount (zero there
	// means the same).
	PartitionCount int
	// Ring configures the partition-to-shard assignment.
	Ring ring.Config
	// SessionTTL is the shard's lease: right to work until the send time of
	// its last acknowledged heartbeat plus SessionTTL.
	SessionTTL time.Duration
	// HeartbeatInterval is how often shards send heartbeats; at most
	// SessionTTL/2 so one lost heartbeat does not fence a healthy shard.
	HeartbeatInterval time.Duration
	// Margin is added to SessionTTL before the coordinator treats a silent
	// shard's partitions as released. It must cover clock-rate drift (see
	// MaxClockDrift) and the time the shard's workers need to stop.
	Margin time.Duration
	// MaxClockDrift is the bound ρ on clock-rate error assumed by the
	// safety argument; Validate requires Margin ≥ SessionTTL·2ρ/(1−ρ).
	MaxClockDrift float64
	// Debounce and MaxDebounce: membership changes reach the target
	// assignment after Debounce of quiet, or MaxDebounce after the first
	// unapplied change, whichever is first.
	Debounce    time.Duration
	MaxDebounce time.Duration
	// ExpectedMembers is how many shards the deployment runs (the chart passes the
	// shard Deployment's replicas); zero means unknown. While the target assigns no
	// partition to anybody (a cold start, or a new leader before its first target with
	// members), membership that reaches this count is applied at once rather than after
	// Debounce: until then no controller works anywhere, and a target computed for
	// fewer shards would move most partitions again seconds later, each move a warm-up.
	// Later changes are debounced as before: a rolling update passes through the
	// expected count at every step. A stale count (the Deployment scaled since) only
	// falls back to the debounce, or applies the count and moves the rest later.
	ExpectedMembers int
	// PrepareTimeout bounds the wait for Prepared in a move.
	PrepareTimeout time.Duration
	// ReleaseTimeout bounds the wait for Released from a live shard before
	// it is fenced out.
	ReleaseTimeout time.Duration
	// RetryInterval paces resending Release and Acquire.
	RetryInterval time.Duration
	// MaxConcurrentMoves caps moves (Prepare→Release) in flight. Grants of
	// unowned partitions are not capped: they restore service.
	MaxConcurrentMoves int
	// MaxMembers caps the shards with a session: a Hello from a new shard
	// beyond it is refused (ReasonTooManyMembers), so a flood of invented
	// shard IDs cannot grow the coordinator's state and ring without bound.
	MaxMembers int
	// OwnerRecord turns on the server-side fence: no Acquire is sent before the
	// edge reports that the API server enforces an owner record naming the new
	// owner (TakeRecordRequest, RecordApplied).
	OwnerRecord bool
	// SeizeAfter, with OwnerRecord, is how long a member's stream may stay
	// closed before its partitions are recorded to others and granted at once,
	// without waiting for its lease; zero waits for the lease. It must exceed
	// the time a live shard needs to reconnect after a broken stream, or a
	// network blip moves every partition it has.
	SeizeAfter time.Duration
	// Load is sent to shards in every Welcome: how they measure and how often they
	// report the load of their partitions (Report.Load). Zero (WithDefaults leaves it)
	// asks for no reports.
	Load LoadSettings
	// Balance says how targets are computed: by partition count (today's ring) or by
	// load (package balance), with or without load rounds.
	Balance BalanceConfig
}

// WithDefaults returns c with zero fields set to defaults.
func (c Config) WithDefaults() Config {
	if c.PartitionCount == 0 {
		c.PartitionCount = partition.DefaultCount
	}
	if c.Ring.PartitionCount == 0 {
		c.Ring.PartitionCount = c.PartitionCount
	}
	c.Ring = c.Ring.WithDefaults()
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.SessionTTL / 3
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.MaxClockDrift == 0 {
		c.MaxClockDrift = DefaultMaxClockDrift
	}
	if c.Debounce == 0 {
		c.Debounce = DefaultDebounce
	}
	if c.MaxDebounce == 0 {
		c.MaxDebounce = max(DefaultMaxDebounce, c.Debounce)
	}
	if c.PrepareTimeout == 0 {
		c.PrepareTimeout = DefaultPrepareTimeout
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = DefaultReleaseTimeout
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.MaxConcurrentMoves == 0 {
		c.MaxConcurrentMoves = DefaultMaxConcurrentMoves
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = DefaultMaxMembers
	}
	c.Balance = c.Balance.WithDefaults()
	return c
}

// MinMargin is the smallest Margin that keeps the coordinator's expiry
// after the shard's self-fencing deadline when clocks run up to drift
// fast or slow: the shard may need TTL/(1−ρ) real time to reach its
// deadline, the coordinator may take only (TTL+Margin)/(1+ρ) to reach its.
func MinMargin(ttl time.Duration, drift float64) time.Duration {
	return time.Duration(math.Ceil(float64(ttl) * 2 * drift / (1 - drift)))
}

// LeaderElectionJitter is client-go's leaderelection.JitterFactor (a test in
// cmd/coordinator keeps them equal): a candidate waits between RetryPeriod and
// RetryPeriod·(1+LeaderElectionJitter) between two looks at the Lease.
const LeaderElectionJitter = 1.2

// FailoverBudget is what a shard's lease must outlast while the coordinator leader
// changes, so that shards keep working through a failover. This is the one place the
// rule is defined; the coordinator checks its flags against it:
//
//	SessionTTL > HeartbeatInterval + LeaseDuration + 2·RetryPeriod·(1+LeaderElectionJitter)
//	             + Readiness + ReconnectBackoff
//
// Worst case, term by term: the leader dies just after acknowledging a heartbeat that the
// shard sent up to HeartbeatInterval before (the lease counts from the send time), and
// just after renewing its Kubernetes Lease. A candidate counts the Lease's expiry from
// the moment it observed that renewal, which is up to one jittered retry wait after it
// happened; it takes the Lease LeaseDuration after that, at its first look after expiry,
// up to another jittered retry wait later (client-go waits RetryPeriod to
// RetryPeriod·2.2). Counting RetryPeriod once, as an earlier version of this rule did,
// let 9 of 40 chart failovers (15s/10s/2s) take over after 19.0–21.0s, past a 20s TTL
// (test/failover). The new leader then needs Readiness before shards can reach it; and a
// shard that failed to reach any coordinator meanwhile waits up to ReconnectBackoff
// before it tries again, then says hello and is welcomed (the Welcome extends its lease).
//
// The new leader's grace period (SessionTTL + Margin, during which it grants nothing) is
// not a term: it welcomes hellos and acknowledges heartbeats from its first moment.
type FailoverBudget struct {
	// HeartbeatInterval is Config.HeartbeatInterval.
	HeartbeatInterval time.Duration
	// LeaseDuration and RetryPeriod are the coordinators' leader election timings;
	// RetryPeriod counts twice, jittered (see RetryWait).
	LeaseDuration, RetryPeriod time.Duration
	// Readiness runs from winning the Lease until shards can reach the new leader:
	// recording its term (an API round trip) and, when shards reach the coordinator
	// through a Service that routes only to the Ready leader, the readiness probe
	// period and endpoint propagation.
	Readiness time.Duration
	// ReconnectBackoff is the longest a shard waits between attempts to reach a
	// coordinator at that time. A shard that reaches a follower is told the leader and
	// retries after its minimum backoff (200ms); one that reaches no coordinator at all
	// (a Service with no Ready endpoint) backs off exponentially up to its maximum (10s).
	ReconnectBackoff time.Duration
}

// Total is the shortest session TTL that rides out a failover: the sum of the terms.
func (b FailoverBudget) Total() time.Duration {
	return b.HeartbeatInterval + b.LeaseDuration + 2*b.RetryWait() + b.Readiness + b.ReconnectBackoff
}

// RetryWait is the longest wait of a leader-election candidate between two looks at the
// Lease: RetryPeriod with client-go's jitter.
func (b FailoverBudget) RetryWait() time.Duration {
	return time.Duration(float64(b.RetryPeriod) * (1 + LeaderElectionJitter))
}

// CoveredBy reports whether a session TTL rides out a failover (it must exceed Total).
func (b FailoverBudget) CoveredBy(ttl time.Duration) bool { return ttl > b.Total() }

// Validate reports an unusable configuration. It does not apply defaults.
func (c Config) Validate() error {
	var errs []error
	if err := partition.ValidateCount(c.PartitionCount); err != nil {
		errs = append(errs, err)
	}
	if err := c.Ring.Validate(); err != nil {
		errs = append(errs, err)
	} else if c.Ring.PartitionCount != c.PartitionCount {
		errs = append(errs, fmt.Errorf("ring partition count %d differs from partition count %d", c.Ring.PartitionCount, c.PartitionCount))
	}
	if c.SessionTTL <= 0 {
		errs = append(errs, fmt.Errorf("session TTL %v must be positive", c.SessionTTL))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.SessionTTL/2 {
		errs = append(errs, fmt.Errorf("heartbeat interval %v must be in (0, TTL/2 = %v]", c.HeartbeatInterval, c.SessionTTL/2))
	}
	if math.IsNaN(c.MaxClockDrift) || c.MaxClockDrift < 0 || c.MaxClockDrift >= 0.5 {
		errs = append(errs, fmt.Errorf("max clock drift %v must be in [0, 0.5)", c.MaxClockDrift))
	} else if min := MinMargin(c.SessionTTL, c.MaxClockDrift); c.Margin <= 0 || c.Margin < min {
		errs = append(errs, fmt.Errorf("margin %v must be positive and at least %v (TTL·2ρ/(1−ρ) for ρ=%v)", c.Margin, min, c.MaxClockDrift))
	}
	if c.Debounce < 0 || c.MaxDebounce < c.Debounce {
		errs = append(errs, fmt.Errorf("debounce %v must be ≥ 0 and ≤ max debounce %v", c.Debounce, c.MaxDebounce))
	}
	if c.ExpectedMembers < 0 || c.ExpectedMembers > c.MaxMembers {
		errs = append(errs, fmt.Errorf("expected members %d must be in [0, max members %d] (0: unknown)", c.ExpectedMembers, c.MaxMembers))
	}
	if c.PrepareTimeout <= 0 {
		errs = append(errs, fmt.Errorf("prepare timeout %v must be positive", c.PrepareTimeout))
	}
	if c.RetryInterval <= 0 {
		errs = append(errs, fmt.Errorf("retry interval %v must be positive", c.RetryInterval))
	}
	if c.ReleaseTimeout < c.RetryInterval {
		errs = append(errs, fmt.Errorf("release timeout %v must be at least the retry interval %v", c.ReleaseTimeout, c.RetryInterval))
	}
	if c.MaxConcurrentMoves < 1 {
		errs = append(errs, fmt.Errorf("max concurrent moves %d must be at least 1", c.MaxConcurrentMoves))
	}
	if c.SeizeAfter < 0 || (c.SeizeAfter > 0 && !c.OwnerRecord) {
		errs = append(errs, fmt.Errorf("seize-after %v must be ≥ 0, and is only allowed with the owner record (server-side fence) on", c.SeizeAfter))
	}
	if err := c.validateMaxMembers(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Load.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Balance.Validate(c.Load); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("handoff config: %w", errors.Join(errs...))
	}
	return nil
}

// validateMaxMembers checks the member cap on its own: the ring's cost is
// the product of the cap and the replication factor, so both are bounded
// together.
func (c Config) validateMaxMembers() error {
	if c.MaxMembers < 1 {
		return fmt.Errorf("max members %d must be at least 1", c.MaxMembers)
	}
	if rf := c.Ring.ReplicationFactor; rf > 0 && c.MaxMembers > MaxRingVirtualNodes/rf {
		return fmt.Errorf("max members %d × ring replication factor %d exceeds %d virtual nodes", c.MaxMembers, rf, MaxRingVirtualNodes)
	}
	return nil
}

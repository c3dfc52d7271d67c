package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/componentopts"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
	"github.com/kshard/kshard/pkg/sharding/transport"
)

// DefaultSessionTTL exceeds the default leader failover (15s lease + 2s retry): a shard
// keeps its partitions through a coordinator leader change.
const DefaultSessionTTL = 20 * time.Second

// Options are the coordinator's flags.
type Options struct {
	componentopts.Common
	ID               string
	GRPCBindAddress  string
	AdvertiseAddress string
	TLS              transport.TLSOptions
	Leader           *leader.Options
	Handoff          handoff.Config
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
		Handoff: handoff.Config{
			PartitionCount: partition.DefaultCount,
			Ring:           ring.Config{ReplicationFactor: ring.DefaultReplicationFactor, Load: ring.DefaultLoad},
			// Longer than the leader election's worst failover (lease duration + retry
			// period), so shards keep working while a new leader takes over.
			SessionTTL: DefaultSessionTTL, Margin: handoff.DefaultMargin,
			Debounce: handoff.DefaultDebounce, MaxDebounce: handoff.DefaultMaxDebounce,
			PrepareTimeout: handoff.DefaultPrepareTimeout, ReleaseTimeout: handoff.DefaultReleaseTimeout,
			MaxConcurrentMoves: handoff.DefaultMaxConcurrentMoves,
		},
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
	fs.Float64Var(&h.Ring.Load, "ring-load", h.Ring.Load, "bounded-load factor: no shard gets more than this times the average partitions")
	fs.DurationVar(&h.SessionTTL, "session-ttl", h.SessionTTL, "a shard without an acknowledged heartbeat for this long stops working")
	fs.DurationVar(&h.HeartbeatInterval, "heartbeat-interval", h.HeartbeatInterval, "how often shards send heartbeats (default TTL/3; at most TTL/2)")
	fs.DurationVar(&h.Margin, "fencing-margin", h.Margin, "added to the TTL before a silent shard's partitions are moved (covers clock drift and stopping workers)")
	fs.DurationVar(&h.Debounce, "membership-debounce", h.Debounce, "quiet time before membership changes rebalance partitions")
	fs.DurationVar(&h.MaxDebounce, "membership-max-debounce", h.MaxDebounce, "longest a stream of membership changes can postpone a rebalance")
	fs.DurationVar(&h.PrepareTimeout, "prepare-timeout", h.PrepareTimeout, "how long a move waits for the new owner's warm caches before going on")
	fs.DurationVar(&h.ReleaseTimeout, "release-timeout", h.ReleaseTimeout, "how long a live shard may take to release a partition before it is fenced out")
	fs.IntVar(&h.MaxConcurrentMoves, "max-concurrent-moves", h.MaxConcurrentMoves, "cap on partition moves in flight")
	o.Common.AddFlags(fs, "/metrics, /livez, /readyz and /assignments")
}

// Validate reports every bad flag at once.
func (o *Options) Validate() error {
	var errs []error
	if o.ID == "" {
		errs = append(errs, errors.New("--id must not be empty"))
	}
	if o.AdvertiseAddress == "" {
		errs = append(errs, errors.New("--advertise-address is required (or set $POD_IP)"))
	} else if _, _, err := net.SplitHostPort(o.AdvertiseAddress); err != nil {
		errs = append(errs, fmt.Errorf("--advertise-address: %w", err))
	}
	if err := o.TLS.Validate(true, "grpc-"); err != nil {
		errs = append(errs, err)
	}
	if err := o.Leader.Validate(); err != nil {
		errs = append(errs, err)
	}
	h := o.Handoff.WithDefaults()
	if err := h.Validate(); err != nil {
		errs = append(errs, err)
	}
	if failover := o.Leader.LeaseDuration + o.Leader.RetryPeriod; o.Leader.Enabled && h.SessionTTL <= failover {
		errs = append(errs, fmt.Errorf("--session-ttl (%s) must exceed --leader-elect-lease-duration + --leader-elect-retry-period (%s): "+
			"otherwise every shard's lease runs out while a new leader takes over, and all work stops", h.SessionTTL, failover))
	}
	if err := o.Common.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

package coordinatorrpc

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/peerlimit"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// The gRPC edge's resource caps. Everything a client can make the coordinator hold is
// bounded: open streams, the size of one message, and how often one identity may say
// Hello (each Hello walks the state machine under the coordinator's lock).

// Message size. The largest message a shard sends is its Hello, listing every partition it
// holds: at most P Held entries, each at most 19 bytes on the wire (1-byte tag and length,
// a partition ≤ 4 bytes, an epoch ≤ 11, a state 2). BytesPerPartition leaves room above
// that; MessageOverhead covers the rest of a Hello (a 253-byte shard ID, a 256-byte build
// version, session and stats, the framing). A heartbeat with a load report is smaller:
// at most P entries of at most 15 bytes (a partition ≤ 3, a load ≤ 5, objects ≤ 5, an age
// ≤ 2, in four packed lists). Anything larger is not a message of a real shard and is
// refused by gRPC with ResourceExhausted before it is decoded.
const (
	BytesPerPartition = 32
	MessageOverhead   = 4096
)

// MaxMessageSize is the largest shard message the coordinator accepts for P partitions.
func MaxMessageSize(partitionCount int) int {
	return partitionCount*BytesPerPartition + MessageOverhead
}

// MaxStreamsPerConnection bounds concurrent streams on one connection. A shard opens one
// connection per session with one stream on it; this only keeps a single connection from
// multiplexing the whole session cap. It is not the session cap (Options.MaxSessions),
// which counts streams over all connections.
const MaxStreamsPerConnection = 4

// Defaults of the caps.
const (
	// DefaultMaxShards is the member count the defaults are sized for.
	DefaultMaxShards = 1000
	// DefaultHelloRate and DefaultHelloBurst: a shard says Hello when it connects, when its
	// lease lapsed and when the leader changed, so a few in a row and about one a second
	// after that is plenty; more is a loop or an attack.
	DefaultHelloRate  = 1.0
	DefaultHelloBurst = 5
	// DefaultMaxPendingPerPeer bounds the unauthenticated streams of one peer. A shard
	// opens one stream at a time and sends its hello at once, so it needs one, two while a
	// broken stream is not yet noticed; the rest is room for a few shards behind one
	// address (a node's SNAT, a development machine running every shard on 127.0.0.1).
	DefaultMaxPendingPerPeer = 16
)

// SessionsForShards is the session cap for a member cap: every shard may have a second
// stream open while the server has not yet noticed that its previous one broke (keepalive
// takes up to ServerPingInterval + PingTimeout), plus a few for tools and stragglers.
func SessionsForShards(maxShards int) int {
	if maxShards > (math.MaxInt32-16)/2 {
		return math.MaxInt32
	}
	return 2*maxShards + 16
}

// GRPCOptions are the server options the coordinator's caps need; add them to the gRPC
// server that serves this Server.
func (s *Server) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize(s.opts.Config.PartitionCount)),
		grpc.MaxConcurrentStreams(MaxStreamsPerConnection),
	}
}

// tryOpen takes one of the MaxSessions stream slots; false when all are taken.
func (s *Server) tryOpen() bool {
	select {
	case s.slots <- struct{}{}:
		s.opts.Metrics.OpenStreams.Inc() // Set(len) from racing goroutines could land out of order
		return true
	default:
		return false
	}
}

func (s *Server) closeSlot() {
	<-s.slots
	s.opts.Metrics.OpenStreams.Dec()
}

// openPending counts a new stream against its peer's unauthenticated streams and the
// pool of them all, or refuses it with ResourceExhausted. The returned func ends the
// count (authenticated, or the stream ended); calling it again does nothing.
func (s *Server) openPending(ctx context.Context) (func(), error) {
	key := peerlimit.Key(ctx)
	release, reason := s.pending.Acquire(key)
	if release == nil {
		addr, cert := peerlimit.Describe(ctx)
		if reason == peerlimit.ReasonPerKey {
			s.opts.Metrics.Refused.WithLabelValues("pending_per_peer").Inc()
			s.log.V(1).Info("refused a session stream: too many unauthenticated streams from one peer", "peer", addr, "cert", cert, "max", s.opts.MaxPendingPerPeer)
			return nil, status.Errorf(codes.ResourceExhausted, "too many unauthenticated session streams (%d) from %s", s.opts.MaxPendingPerPeer, key)
		}
		s.opts.Metrics.Refused.WithLabelValues("pending_limit").Inc()
		s.log.V(1).Info("refused a session stream: too many unauthenticated streams", "peer", addr, "cert", cert, "max", s.opts.MaxPending)
		return nil, status.Errorf(codes.ResourceExhausted, "too many unauthenticated session streams (%d) at this coordinator", s.opts.MaxPending)
	}
	s.opts.Metrics.PendingStreams.Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			release()
			s.opts.Metrics.PendingStreams.Dec()
		})
	}, nil
}

// helloLimiter is a token bucket per verified shard identity. The map is bounded: a
// bucket that has refilled is dropped when room is needed (a new bucket is the same), and
// when every bucket is still in use a new identity is refused.
type helloLimiter struct {
	rate  float64
	burst int
	max   int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newHelloLimiter(r float64, burst, max int) *helloLimiter {
	return &helloLimiter{rate: r, burst: burst, max: max, buckets: map[string]*rate.Limiter{}}
}

// allow takes a Hello token of id; reason says why not ("" when allowed).
func (l *helloLimiter) allow(id string, now time.Time) (ok bool, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[id]
	if b == nil {
		if len(l.buckets) >= l.max {
			for k, v := range l.buckets {
				if v.TokensAt(now) >= float64(l.burst) { // refilled: same as a new one
					delete(l.buckets, k)
				}
			}
		}
		if len(l.buckets) >= l.max {
			return false, "hello_rate_table_full"
		}
		b = rate.NewLimiter(rate.Limit(l.rate), l.burst)
		l.buckets[id] = b
	}
	if !b.AllowN(now, 1) {
		return false, "hello_rate"
	}
	return true, ""
}

// Messages on one session stream. A verified shard's stream is read one message at a time
// and every message takes the server's lock, so a shard sending in a tight loop (a bug, or
// an attacker holding a valid shard certificate or token) would delay every other shard's
// heartbeats until their leases lapse. A real shard sends a heartbeat each heartbeat
// interval, one more when its lease is about to lapse and one when it leaves; and one
// partition report (prepared, released, acquired) per step the coordinator asked of it:
// a single shard's cold start prepares and acquires every partition within seconds. The
// bounds are several times that, so that only a shard that is not behaving meets them.
const (
	// HeartbeatsPerInterval is the sustained heartbeats a stream may send per heartbeat
	// interval, HeartbeatBurst how many in a row.
	HeartbeatsPerInterval = 10
	HeartbeatBurst        = 20
	// PartitionReportsPerSecond is the sustained partition reports a stream may send per
	// second, per partition of the ring (P per second: a whole ring's moves every
	// second); PartitionReportBurstPerPartition × P + PartitionReportBurstExtra in a row
	// (twice a cold start's prepare and acquire of every partition).
	PartitionReportsPerSecond        = 1
	PartitionReportBurstPerPartition = 4
	PartitionReportBurstExtra        = 64
)

// Reasons a stream is closed for its message rate (kshard_coordinator_refused_total).
const (
	reasonHeartbeatRate = "heartbeat_rate"
	reasonReportRate    = "partition_report_rate"
)

// streamLimiter bounds the messages of one session stream: heartbeats and partition
// reports in buckets of their own, so that a legitimate burst of partition reports
// never costs a heartbeat. Hellos have their own limiter per identity (helloLimiter).
type streamLimiter struct {
	heartbeats, reports *rate.Limiter
}

// newStreamLimiter sizes the buckets for a ring of partitions partitions and shards that
// heartbeat every heartbeatInterval.
func newStreamLimiter(partitions int, heartbeatInterval time.Duration) *streamLimiter {
	if heartbeatInterval <= 0 {
		heartbeatInterval = time.Second
	}
	partitions = max(partitions, 1)
	return &streamLimiter{
		heartbeats: rate.NewLimiter(rate.Limit(HeartbeatsPerInterval/heartbeatInterval.Seconds()), HeartbeatBurst),
		reports: rate.NewLimiter(rate.Limit(PartitionReportsPerSecond*float64(partitions)),
			PartitionReportBurstPerPartition*partitions+PartitionReportBurstExtra),
	}
}

// allow takes a token for m at now from its kind's bucket; it returns the reason the
// stream must be closed, "" when m may be handled. Hellos and messages of no known kind
// pass: the hello limiter and the wire check deal with them.
func (l *streamLimiter) allow(m *kshardv1.ShardMessage, now time.Time) string {
	switch {
	case m.GetHeartbeat() != nil:
		if !l.heartbeats.AllowN(now, 1) {
			return reasonHeartbeatRate
		}
	case m.GetPrepared() != nil || m.GetReleased() != nil || m.GetAcquired() != nil:
		if !l.reports.AllowN(now, 1) {
			return reasonReportRate
		}
	}
	return ""
}

// allowMessage takes m's token from the stream's limiter, or counts, logs and returns the
// status that closes the stream.
func (s *Server) allowMessage(l *streamLimiter, m *kshardv1.ShardMessage, shard string) error {
	reason := l.allow(m, s.opts.Now())
	if reason == "" {
		return nil
	}
	s.opts.Metrics.Refused.WithLabelValues(reason).Inc()
	s.log.Info("closed a session stream: the shard sends more messages than a shard does", "shard", shard, "reason", reason)
	if reason == reasonHeartbeatRate {
		return status.Errorf(codes.ResourceExhausted, "shard %q sent more than %d heartbeats in a row (then %d per heartbeat interval %s)",
			shard, HeartbeatBurst, HeartbeatsPerInterval, s.opts.Config.HeartbeatInterval)
	}
	return status.Errorf(codes.ResourceExhausted, "shard %q sent more partition reports than %d in a row (then %d per second)",
		shard, PartitionReportBurstPerPartition*s.opts.Config.PartitionCount+PartitionReportBurstExtra, PartitionReportsPerSecond*s.opts.Config.PartitionCount)
}

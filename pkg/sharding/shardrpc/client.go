package shardrpc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/pkg/sharding/transport"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// Handler carries out the state machine's actions. Warm and Drain run asynchronously and
// call done when finished; the others must return quickly.
type Handler interface {
	// Warm starts caching p and calls done once its caches are synced.
	Warm(p partition.ID, done func())
	// Work starts working p (its caches are synced or will be); with refresh, it lists p
	// again first (handoff.Action.Refresh).
	Work(p partition.ID, refresh bool)
	// Drain stops taking keys of p and calls done when its in-flight work has finished.
	Drain(p partition.ID, done func())
	// Stop stops working p at once, keeping its caches.
	Stop(p partition.ID)
	// Drop drops p's caches.
	Drop(p partition.ID)
	// SetDeadline sets the instant at which all work must stop unless extended.
	SetDeadline(t time.Time)
	// Stats are reported with every heartbeat.
	Stats() protocol.Stats
}

// LoadReporter measures the load of the partitions the shard holds, for the
// coordinator's placement by load (docs/design-placement.md §1). A Client with one
// attaches a report to the first heartbeat after each Welcome and then to every heartbeat
// the Welcome's LoadSettings.ReportInterval apart; with none, or while the coordinator
// asks for no reports (an interval of 0, as a coordinator that predates them sends), its
// heartbeats carry none.
type LoadReporter interface {
	// Load returns a full snapshot: an entry, ascending by partition, for each held
	// partition that holds a namespace or had load, once held for the meter's minimum age. It is called on the session's
	// goroutine for the heartbeats that carry a report only, and must return quickly.
	// The Client owns the result: it caps ages at protocol.MaxLoadAgeSeconds, and sends
	// nothing of a report that protocol.CheckLoadReport refuses (the coordinator would
	// refuse the heartbeat with it).
	Load() protocol.LoadReport
}

// LoadSettingsReceiver is implemented by a LoadReporter that needs the coordinator's load
// settings (the half-life of its moving averages, what a reconcile weighs): the Client
// passes each Welcome's, zero when the coordinator wants no reports, before any heartbeat
// of that session.
type LoadSettingsReceiver interface {
	SetLoadSettings(protocol.LoadSettings)
}

// Options configure a Client.
type Options struct {
	ShardID string
	// Group is the shard group this shard runs in ("" for the default group; otherwise a
	// DNS-1123 label), named in every Hello. With token authentication the coordinator
	// refuses the session unless the shard's pod carries it as its kshard.io/shard-group
	// label.
	Group        string
	Incarnation  uint64
	BuildVersion string
	// Addresses of coordinators (host:port); the client tries them in turn and follows
	// leader hints. A host name stands for every address it resolves to (a headless
	// Service of the coordinator replicas gives all of them, Ready or not), looked up
	// again on each pass through the list.
	Addresses      []string
	Credentials    credentials.TransportCredentials
	PartitionCount int
	// MinBackoff and MaxBackoff bound the reconnect delay (exponential with jitter).
	MinBackoff, MaxBackoff time.Duration
	// ConnectTimeout bounds one attempt to open a session stream: an address that
	// accepts TCP connections but never completes the handshake (a frozen process, whose
	// kernel still accepts) costs this long instead of gRPC's 20s connect timeout, during
	// which the shard's lease could run out. Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// LookupHost resolves a host name of Addresses to its addresses; nil means
	// net.DefaultResolver.LookupHost.
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// LeaderAddress, when set, returns the address the coordinators' election Lease
	// holder advertises (read through the API server), tried after Addresses on every pass
	// and, when it names a new leader (read at most every 5 s, at a dial), before the rest
	// of the pass.
	// Addresses are usually a Service name, whose answers come from EndpointSlices; when
	// kshard runs the EndpointSlice controller and every coordinator and shard pod was
	// replaced at once, no slice holds the new coordinators' addresses until a shard works
	// them, and no shard works anything until it reaches a coordinator. The Lease, written
	// by the coordinators themselves, breaks that circle. The address is dialed as
	// follower hints are (TLS verifies Credentials' server name).
	LeaderAddress func(ctx context.Context) (string, error)
	Metrics       *Metrics
	Now           func() time.Time

	// TokenFile is the shard's projected, pod-bound ServiceAccount token; it is read for
	// every new session (the kubelet rotates it) and sent as a bearer token, by which the
	// coordinator verifies that this process is the pod its shard ID names. Empty sends
	// none (a coordinator run with --shard-auth=none).
	TokenFile string
	// TokenOverPlaintext allows sending the token without TLS (local development with
	// --grpc-insecure); otherwise gRPC refuses to.
	TokenOverPlaintext bool

	// LoadReporter, when set, measures the load the heartbeats report; nil reports none.
	LoadReporter LoadReporter
}

// DefaultConnectTimeout is Options.ConnectTimeout's default: a TLS handshake with a live
// coordinator takes milliseconds, and a failover's budget (handoff.FailoverBudget) has
// about a second for the shard to find the new leader.
const DefaultConnectTimeout = time.Second

// Client runs the shard's session.
type Client struct {
	opts    Options
	handler Handler
	log     logr.Logger

	core *handoff.Shard // owned by the Run goroutine

	events    chan func(now time.Time)
	leave     chan struct{}
	leaveOnce sync.Once
	done      chan struct{}
	welcomed  atomic.Bool
	rtt       rttTracker
	token     credentials.PerRPCCredentials // nil without Options.TokenFile
	// loadEvery: every loadEvery-th heartbeat of the session, the first included, carries
	// a load report; 0: none. Set by each Welcome; owned by the Run goroutine.
	loadEvery uint64
}

// New validates the options.
func New(opts Options, h Handler, log logr.Logger) (*Client, error) {
	if err := protocol.ValidateShardID(opts.ShardID); err != nil {
		return nil, fmt.Errorf("--shard-id: %w", err)
	}
	if err := protocol.ValidateGroup(opts.Group); err != nil {
		return nil, fmt.Errorf("--shard-group: %w", err)
	}
	if len(opts.Addresses) == 0 {
		return nil, errors.New("at least one coordinator address is required")
	}
	if opts.Credentials == nil {
		return nil, errors.New("session: Options.Credentials is required")
	}
	if err := partition.ValidateCount(opts.PartitionCount); err != nil {
		return nil, err
	}
	if opts.Incarnation == 0 {
		return nil, errors.New("session: Options.Incarnation must not be zero")
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.LookupHost == nil {
		opts.LookupHost = net.DefaultResolver.LookupHost
	}
	for _, a := range opts.Addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("coordinator address %q: %w", a, err)
		}
	}
	c := &Client{opts: opts, handler: h, log: log, core: handoff.NewShard(opts.ShardID, opts.Incarnation),
		events: make(chan func(time.Time), 1024), leave: make(chan struct{}), done: make(chan struct{})}
	if opts.TokenFile != "" {
		c.token = shardauth.TokenFile{Path: opts.TokenFile, AllowInsecure: opts.TokenOverPlaintext}
	}
	return c, nil
}

// Welcomed reports whether the current session was welcomed by the leader.
func (c *Client) Welcomed() bool { return c.welcomed.Load() }

// Leave asks the coordinator to move every partition away; Done closes when it has.
func (c *Client) Leave() { c.leaveOnce.Do(func() { close(c.leave) }) }

// Done is closed when the coordinator said Farewell after Leave.
func (c *Client) Done() <-chan struct{} { return c.done }

// conn is one open stream.
type conn struct {
	cc     *grpc.ClientConn
	stream kshardv1.Coordinator_SessionClient
	cancel context.CancelFunc
	recv   chan *kshardv1.CoordinatorMessage
	err    chan streamError
}

// streamError is how a stream ended, with the leader a refusing follower named.
type streamError struct {
	err    error
	leader string
}

func (k *conn) close() {
	k.cancel()
	_ = k.cc.Close()
}

// apply carries out actions, publishes the deadline and sends the outbox on k.
func (c *Client) apply(k *conn) error {
	c.applyLocal()
	// Stats walk every partition: compute them only for the hellos and heartbeats that
	// carry them, not for each of the thousands of reports of a rebalance.
	var stats protocol.Stats
	haveStats := false
	for _, r := range c.core.Outbox() {
		if !haveStats && (r.Kind == handoff.ReportHello || r.Kind == handoff.ReportHeartbeat) {
			stats, haveStats = c.handler.Stats(), true
		}
		switch r.Kind {
		case handoff.ReportHello:
			r.Group = c.opts.Group // the state machine of the shard knows no groups
		case handoff.ReportHeartbeat:
			r.Load = c.loadReport(r.Seq)
		}
		m, err := protocol.ReportToWire(r, stats, c.opts.BuildVersion)
		if err != nil {
			return err
		}
		if err := k.stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// welcomeLoad takes a Welcome's load settings: from now on every n-th heartbeat of the
// session carries a load report, n being the report interval in heartbeat intervals
// (rounded to the nearest, at least 1; the coordinator does not require a multiple), the first heartbeat
// included, so that a new leader learns every load one heartbeat after the hellos.
func (c *Client) welcomeLoad(l protocol.LoadSettings, heartbeatInterval time.Duration) {
	c.loadEvery = 0
	if c.opts.LoadReporter == nil {
		return
	}
	c.loadEvery = l.ReportEvery(heartbeatInterval)
	if r, ok := c.opts.LoadReporter.(LoadSettingsReceiver); ok {
		if c.loadEvery > 0 {
			l.ReportInterval = l.Cadence(heartbeatInterval) // what the receiver sees: the interval reports go at
		}
		r.SetLoadSettings(l)
	}
}

// loadReport returns the load report heartbeat seq carries (seq 1 is the first after the
// Welcome), or nil. A report the coordinator would refuse is not sent: the heartbeat goes
// without it rather than be refused, which would end the session.
func (c *Client) loadReport(seq uint64) *protocol.LoadReport {
	if c.loadEvery == 0 || seq == 0 || (seq-1)%c.loadEvery != 0 {
		return nil
	}
	l := c.opts.LoadReporter.Load()
	for i := range l.Partitions {
		l.Partitions[i].AgeSeconds = min(l.Partitions[i].AgeSeconds, protocol.MaxLoadAgeSeconds)
	}
	if err := protocol.CheckLoadReport(l, c.opts.PartitionCount); err != nil {
		c.log.Error(err, "the shard's load report is invalid; sending the heartbeat without it", "seq", seq)
		c.countLoadReport("invalid")
		return nil
	}
	c.countLoadReport("sent")
	return &l
}

func (c *Client) countLoadReport(outcome string) {
	if c.opts.Metrics != nil {
		c.opts.Metrics.LoadReports.WithLabelValues(outcome).Inc()
	}
}

// applyLocal carries out actions and publishes the deadline, without sending (no stream:
// reports of a broken session are dropped; the next Hello reports the whole state).
func (c *Client) applyLocal() {
	for _, a := range c.core.Actions() {
		p, e := a.Partition, a.Epoch
		log := c.log.WithValues("partition", uint32(p), "epoch", e.String())
		switch a.Kind {
		case handoff.ActionWarm:
			log.V(1).Info("warming partition")
			c.handler.Warm(p, func() { c.post(func(now time.Time) { c.core.Synced(now, p, e) }) })
		case handoff.ActionWork:
			log.Info("partition acquired: working it", "refresh", a.Refresh)
			c.handler.Work(p, a.Refresh)
		case handoff.ActionDrain:
			log.Info("releasing partition: draining in-flight work")
			c.handler.Drain(p, func() { c.post(func(now time.Time) { c.core.Drained(now, p) }) })
		case handoff.ActionStop:
			log.Info("stopped working partition")
			c.handler.Stop(p)
		case handoff.ActionDrop:
			log.V(1).Info("dropping partition caches")
			c.handler.Drop(p)
		}
	}
	c.handler.SetDeadline(c.core.Deadline())
	if c.opts.Metrics != nil {
		c.opts.Metrics.Fenced.Set(boolFloat(!c.core.CanWork(c.opts.Now())))
	}
}

// dropOutbox discards reports that have no stream to go on: they belong to a broken
// session, and the next Hello restates everything the shard holds.
func (c *Client) dropOutbox() { _ = c.core.Outbox() }

// post queues a callback onto the Run goroutine.
func (c *Client) post(f func(now time.Time)) {
	c.events <- f
}

func (c *Client) dial(ctx context.Context, tgt target) (*conn, error) {
	opts := append(transport.DialOptions(), grpc.WithTransportCredentials(c.opts.Credentials))
	// An address a name resolved to: TLS verifies the name, as if it were dialed.
	// Credentials with a server name of their own (--grpc-tls-server-name, as the chart
	// sets it) verify that name whatever the authority, and gRPC refuses a ClientConn
	// whose authority differs from it: grpc.NewClient compares exactly this field.
	//lint:ignore SA1019 the deprecated field is what grpc.NewClient checks the authority against
	if tgt.authority != "" && c.opts.Credentials.Info().ServerName == "" {
		opts = append(opts, grpc.WithAuthority(tgt.authority))
	}
	cc, err := grpc.NewClient(tgt.addr, opts...)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	var callOpts []grpc.CallOption
	if c.token != nil {
		// Per call, so the token file is read again for every session.
		callOpts = append(callOpts, grpc.PerRPCCredentials(c.token))
	}
	// Opening the stream waits for the transport (TCP, TLS, HTTP/2 settings); a peer that
	// never completes it is given up after ConnectTimeout.
	timer := time.AfterFunc(c.opts.ConnectTimeout, cancel)
	stream, err := kshardv1.NewCoordinatorClient(cc).Session(sctx, callOpts...)
	if !timer.Stop() {
		// It fired (maybe just as the stream opened): the stream's context is cancelled.
		cancel()
		_ = cc.Close()
		if err == nil {
			err = context.Canceled
		}
		return nil, fmt.Errorf("no connection within %s: %w", c.opts.ConnectTimeout, err)
	}
	if err != nil {
		cancel()
		_ = cc.Close()
		return nil, err
	}
	k := &conn{cc: cc, stream: stream, cancel: cancel, recv: make(chan *kshardv1.CoordinatorMessage, 1024), err: make(chan streamError, 1)}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				se := streamError{err: err}
				if status.Code(err) == codes.FailedPrecondition {
					if v := stream.Trailer().Get(protocol.LeaderMetadataKey); len(v) > 0 {
						se.leader = v[0]
					}
				}
				k.err <- se
				return
			}
			select {
			case k.recv <- m:
			case <-sctx.Done():
				return
			}
		}
	}()
	return k, nil
}

// target is one address to dial: a configured or hinted address, or an address a
// configured host name resolved to, dialed with that name as its authority.
type target struct {
	addr      string
	authority string
}

// targetQueue hands out the configured addresses in turn, each host name expanded to
// every address it resolves to. A pass through the list resolves the names again, so
// replicas replaced since (new pod IPs) are found. A name that does not resolve is
// dialed as it is (gRPC resolves it, and reports the error).
type targetQueue struct {
	addrs  []string
	lookup func(ctx context.Context, host string) ([]string, error)
	leader func(ctx context.Context) (string, error) // nil: none
	// leaderRead is when leader was last asked, leaderAddr its answer: the Lease is read
	// at most every leaderReadInterval, so that a thousand shards reconnecting during an
	// outage do not each read it on every pass.
	leaderRead time.Time
	leaderAddr string
	now        func() time.Time // nil: time.Now

	timeout time.Duration
	log     logr.Logger
	pending []target
}

// next returns the next target for which skip (nil: none) is false; when every target
// of a whole pass is to be skipped, the first of them.
func (q *targetQueue) next(ctx context.Context, skip func(addr string) bool) target {
	// A leader the Lease newly names goes first, before the rest of a pass: during a full
	// outage that rest is the dead pods' addresses (the peers Service's slices lag until a
	// shard works them), each dialed after a growing backoff, so waiting for the next pass
	// to read the Lease could make shards reach a new leader up to a pass late (three
	// addresses at the 10 s maximum backoff: 30 s). That delay was suspected from the
	// shards' Ready times in the helm e2e's cold start (28-54 s after the kill), not
	// confirmed: the pods' logs were gone.
	if len(q.pending) > 0 {
		before := q.leaderAddr
		if addr := q.leaderAddress(ctx); addr != "" && addr != before && (skip == nil || !skip(addr)) {
			q.pending = slices.DeleteFunc(q.pending, func(t target) bool { return t.addr == addr })
			return target{addr: addr}
		}
	}
	var first *target
	// The rest of this pass, then at most one new pass.
	for range 2 {
		if len(q.pending) == 0 {
			q.pending = q.resolve(ctx)
		}
		for len(q.pending) > 0 {
			t := q.pending[0]
			q.pending = q.pending[1:]
			if skip == nil || !skip(t.addr) {
				return t
			}
			if first == nil {
				first = &t
			}
		}
	}
	return *first // resolve returns at least one target per configured address
}

// resolve returns one pass: every configured address, names expanded, without repeats.
func (q *targetQueue) resolve(ctx context.Context) []target {
	var out []target
	seen := map[string]bool{}
	add := func(t target) {
		if !seen[t.addr] {
			seen[t.addr] = true
			out = append(out, t)
		}
	}
	for _, a := range q.addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || net.ParseIP(host) != nil {
			add(target{addr: a})
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, q.timeout)
		ips, err := q.lookup(lctx, host)
		cancel()
		if err != nil || len(ips) == 0 {
			q.log.V(1).Info("cannot resolve coordinator address; dialing it as it is", "address", a, "err", fmt.Sprint(err))
			add(target{addr: a})
			continue
		}
		for _, ip := range ips {
			add(target{addr: net.JoinHostPort(ip, port), authority: a})
		}
	}
	if addr := q.leaderAddress(ctx); addr != "" {
		add(target{addr: addr})
	}
	return out
}

// leaderReadInterval is how often at most a shard reads the election Lease for the
// leader's address (Options.LeaderAddress).
const leaderReadInterval = 5 * time.Second

// leaderAddress returns the address the election Lease holder advertises, read at most
// every leaderReadInterval; "" when there is no reader, no holder or no usable address.
func (q *targetQueue) leaderAddress(ctx context.Context) string {
	if q.leader == nil {
		return ""
	}
	clock := q.now
	if clock == nil {
		clock = time.Now
	}
	if now := clock(); q.leaderRead.IsZero() || now.Sub(q.leaderRead) >= leaderReadInterval {
		q.leaderRead = now
		lctx, cancel := context.WithTimeout(ctx, q.timeout)
		addr, err := q.leader(lctx)
		cancel()
		if err != nil {
			q.log.V(1).Info("cannot read the coordinators' election Lease for the leader's address", "err", err.Error())
			return q.leaderAddr // the last known, if any
		}
		if _, _, perr := net.SplitHostPort(addr); addr != "" && perr != nil {
			q.log.Info("the coordinators' election Lease holder advertises an address that is not host:port; not dialing it", "address", addr)
			addr = ""
		}
		q.leaderAddr = addr
	}
	return q.leaderAddr
}

func (c *Client) nextBackoff(cur time.Duration) time.Duration {
	if cur <= 0 {
		cur = c.opts.MinBackoff
	} else {
		cur *= 2
	}
	cur = min(cur, c.opts.MaxBackoff)
	return cur/2 + time.Duration(rand.Int64N(int64(cur/2)+1))
}

func (c *Client) countRejected(reason string) {
	if c.opts.Metrics != nil {
		c.opts.Metrics.Rejected.WithLabelValues(reason).Inc()
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

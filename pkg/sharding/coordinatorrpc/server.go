package coordinatorrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/peerlimit"
	"github.com/kshard/kshard/pkg/sharding/placement"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// Options configure the Server.
type Options struct {
	// Config is the handoff state machine's configuration (defaults applied by New).
	Config handoff.Config
	// Metrics receives the coordinator's series; required.
	Metrics *Metrics
	// TickInterval is how often the state machine is ticked (timeouts, debounce).
	TickInterval time.Duration
	// SendBuffer bounds the commands queued for one shard; a shard that falls this far
	// behind has its stream closed and reconnects.
	SendBuffer int
	// HelloTimeout bounds the wait for the first message of a stream.
	HelloTimeout time.Duration
	// StepDown is called when the state machine suggests this leader step down, and again
	// every StepDownRecheck while it still does (a callback that found no evidence the
	// first time must get to look again):
	// its epochs ran out (reason ReasonEpochsExhausted: its own state, so it must), or a
	// shard reported an epoch of a newer term (any other reason, naming the shard). The
	// latter is only a claim — any client with a valid certificate can make it — so the
	// callback must look for evidence where only coordinators write (the Lease: see
	// leader.Verifier) and keep leading without it; Lead does not end by itself.
	StepDown func(reason string)
	// StepDownRecheck is the least time between two StepDown calls (default 10s).
	StepDownRecheck time.Duration
	// Now is the clock; time.Now by default (monotonic).
	Now func() time.Time

	// Authenticator verifies the identity a stream's hello claims before the hello reaches
	// the state machine; the stream is then bound to the verified shard ID. nil takes every
	// claim on trust (shardauth.Insecure) and New logs a warning: only for tests and local
	// development.
	Authenticator shardauth.Authenticator
	// GroupVerifier checks the shard group a hello claims against the verified identity
	// (shardauth.PodGroups: the pod's kshard.io/shard-group label) before the hello reaches
	// the state machine; a refusal is counted in AuthRejected by its reason. nil takes the
	// claim on trust, as Insecure takes the ID: only with --shard-auth=none.
	GroupVerifier shardauth.GroupVerifier
	// MaxSessions caps authenticated Session streams open at once, over all connections;
	// beyond it a stream is refused with ResourceExhausted. A stream takes its slot only
	// once its hello is authenticated and allowed: silent or unauthenticated streams never
	// hold one (they are bounded by MaxPendingPerPeer and MaxPending instead). Default
	// SessionsForShards(DefaultMaxShards).
	MaxSessions int
	// MaxPendingPerPeer caps the streams of one peer (its IP address, peerlimit.Key) that
	// have not yet been authenticated: from the moment a stream opens until its hello is
	// verified or it ends (at most HelloTimeout plus one review). MaxPending caps them over
	// all peers, in a pool apart from MaxSessions. Defaults DefaultMaxPendingPerPeer and
	// MaxSessions.
	MaxPendingPerPeer int
	MaxPending        int
	// HelloRate (per second) and HelloBurst bound the hellos of one verified identity;
	// beyond them a hello is refused with ResourceExhausted before it reaches the state
	// machine. Defaults DefaultHelloRate and DefaultHelloBurst.
	HelloRate  float64
	HelloBurst int

	// Record writes the owner record of the server-side fence; required when
	// Config.OwnerRecord is on.
	Record OwnerRecord
	// ClaimTimeout bounds how long Lead tries to claim the owner record before it gives
	// up (default DefaultClaimTimeout): a replica that holds the Lease but cannot lead
	// must hand it on. It also bounds the wait for placement inputs (WaitForPlacement).
	ClaimTimeout time.Duration

	// WaitForPlacement makes Lead wait for the first SetPlacement (the coordinator's
	// Namespace informer synced) before it leads, at most ClaimTimeout; set it with
	// placement by load, whose plans count namespaces.
	WaitForPlacement bool
}

// DefaultClaimTimeout is Options.ClaimTimeout's default: far above the time a Namespace
// informer takes to sync at 10,000 namespaces (seconds), short enough that a replica
// that cannot read Namespaces hands the Lease on within a minute.
const DefaultClaimTimeout = time.Minute

// TermBehindError is what Lead returns, before it serves anything, when it finds a term
// above the one it was given where earlier leaderships leave theirs: on the owner record's
// namespaces. Such a term outlived its record (the term Lease deleted, a reinstall, an
// etcd restore, leader election switched off and on), and shards may hold epochs of it,
// which a leader of a lower term refuses. It is never a reason to stop leading: the caller
// records a term above Term (leader.Options.TermAbove) and calls Lead again with it. Terms
// that no coordinator can have led yet (leader.PlausibleTerm) are not reported (the
// owner record leaves them out of Claimed.HighestTerm): they are forgeries, written over as
// the record is written.
type TermBehindError struct {
	// Term is the highest term found, above the one Lead was given.
	Term uint32
	// Source says where it was found, for the log.
	Source string
}

func (e *TermBehindError) Error() string {
	return fmt.Sprintf("term %d found (%s), above this leader's", e.Term, e.Source)
}

// Server is the coordinator's gRPC edge. It serves sessions only between Lead and the end
// of that leadership.
type Server struct {
	kshardv1.UnimplementedCoordinatorServer

	opts Options
	pmap partition.Map
	log  logr.Logger

	mu         sync.Mutex
	core       *handoff.Coordinator // nil unless leading
	leadCtx    context.Context      // the current leadership's context
	tenure     Tenure               // whether that leadership is still certain
	held       []handoff.Command    // commands held while the tenure was not valid
	heldSince  time.Time
	term       uint32
	streams    map[string]*stream        // current stream of each shard
	stats      map[string]protocol.Stats // of current members only (pruneLocked)
	versions   map[string]string         // of current members only (pruneLocked)
	leaderAddr string
	stepDownAt time.Time // when StepDown was last called; guarded by mu
	claimedBy  string    // the first shard that reported a newer term, for StepDown's reason
	claimed    uint32    // the highest newer term a shard reported

	// placement is the last SetPlacement, pinTable its PinTable; they outlive
	// leaderships (the informer feeding them runs in every replica).
	placement      placement.Inputs
	pinTable       []string
	placementReady chan struct{} // closed by the first SetPlacement
	placementOnce  sync.Once
	// balanceSeen is what the state machine's balancer counters (Stats.Balance) said
	// at the last updateGauges of this leadership, for turning them into Prometheus
	// counters that never go down across leaderships.
	balanceSeen balanceCounters

	slots   chan struct{} // one token per authenticated Session stream, MaxSessions in all
	pending *peerlimit.Gate
	hellos  *helloLimiter
	// answering holds one token per GET /assignments being served (MaxAssignmentsInFlight).
	answering chan struct{}
}

type stream struct {
	shard string
	id    shardauth.Identity // the verified identity; shard == id.Shard
	// group is the shard group the stream's first hello claimed and the verifier accepted:
	// a later hello on the stream must claim it too.
	group   string
	session handoff.Session
	out     chan *kshardv1.CoordinatorMessage
	cancel  context.CancelCauseFunc
}

// New validates the configuration and returns a Server that is not leading yet.
func New(opts Options, log logr.Logger) (*Server, error) {
	opts.Config = opts.Config.WithDefaults()
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Metrics == nil {
		return nil, errors.New("server: Options.Metrics is required")
	}
	if opts.Config.OwnerRecord && opts.Record == nil {
		return nil, errors.New("server: Config.OwnerRecord is on but Options.Record is nil")
	}
	if opts.TickInterval <= 0 {
		opts.TickInterval = 100 * time.Millisecond
	}
	if opts.SendBuffer <= 0 {
		opts.SendBuffer = 4 * opts.Config.PartitionCount
	}
	if opts.HelloTimeout <= 0 {
		opts.HelloTimeout = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StepDownRecheck <= 0 {
		opts.StepDownRecheck = 10 * time.Second
	}
	if opts.StepDown == nil {
		opts.StepDown = func(string) {}
	}
	if opts.Authenticator == nil {
		log.Info("WARNING: shard identities are not verified: any client that reaches the gRPC port can claim to be any shard")
		opts.Authenticator = shardauth.Insecure{}
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = SessionsForShards(DefaultMaxShards)
	}
	if opts.MaxPendingPerPeer <= 0 {
		opts.MaxPendingPerPeer = DefaultMaxPendingPerPeer
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = opts.MaxSessions
	}
	if opts.HelloRate <= 0 {
		opts.HelloRate = DefaultHelloRate
	}
	if opts.HelloBurst <= 0 {
		opts.HelloBurst = DefaultHelloBurst
	}
	if opts.ClaimTimeout <= 0 {
		opts.ClaimTimeout = DefaultClaimTimeout
	}
	pmap, err := partition.NewMap(opts.Config.PartitionCount)
	if err != nil {
		return nil, err
	}
	return &Server{opts: opts, pmap: pmap, log: log, streams: map[string]*stream{},
		stats: map[string]protocol.Stats{}, versions: map[string]string{}, placementReady: make(chan struct{}),
		slots: make(chan struct{}, opts.MaxSessions), pending: peerlimit.NewGate(opts.MaxPendingPerPeer, opts.MaxPending),
		// Room for every identity holding a slot and as many being authenticated, so a
		// new shard is not turned away while a departed one's bucket refills.
		hellos: newHelloLimiter(opts.HelloRate, opts.HelloBurst, opts.MaxSessions+opts.MaxPending), answering: make(chan struct{}, MaxAssignmentsInFlight)}, nil
}

// NewerTermClaim returns the shard that first reported, in this leadership, an epoch of a
// term above this leader's, and the highest such term any shard reported ("", 0 when
// none did). A claim is no evidence by itself (see Options.StepDown).
func (s *Server) NewerTermClaim() (shard string, term uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimedBy, s.claimed
}

// Register adds the Coordinator service to a gRPC server.
func (s *Server) Register(g *grpc.Server) { kshardv1.RegisterCoordinatorServer(g, s) }

// SetLeaderAddress records where the current leader is, for refusals while following.
func (s *Server) SetLeaderAddress(addr string) {
	s.mu.Lock()
	s.leaderAddr = addr
	s.mu.Unlock()
}

// Leading reports whether this replica serves sessions now.
func (s *Server) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.core != nil
}

// Tenure says whether the leadership Lead serves is still certain by this process's
// clock (leader.Tenure): ctx of Lead ends only once the elector notices a loss, which a
// process stopped past its Lease (SIGSTOP, a long pause) does only after it resumed and a
// renewal failed. Meanwhile a successor may be granting the same partitions.
// The owner record's writes are bound by the same tenure, hence one type.
type Tenure = ownerrecord.Tenure

// Lead serves sessions with a fresh state machine of the given term until ctx ends, then
// closes every stream at once: a deposed leader must not say anything more. While tenure
// is not valid, nothing the state machine says leaves: no grant, no Welcome, no
// acknowledgement of a heartbeat (which would extend a shard's lease). It is held and
// sent once the tenure is valid again (the Lease was renewed), or dropped when the
// leadership ends.
//
// Before it serves, it claims the owner record (with Config.OwnerRecord). It returns an
// error without serving when the record cannot be claimed within ClaimTimeout, and a
// *TermBehindError when the record carries a plausible term above term.
func (s *Server) Lead(ctx context.Context, term uint32, tenure Tenure) error {
	if tenure == nil {
		return errors.New("server: Lead needs the leadership's tenure")
	}
	core, err := handoff.New(s.opts.Config, term, s.opts.Now())
	if err != nil {
		return err
	}
	core.OffloadRing() // see startRingLocked
	// What comes before serving shares one ClaimTimeout: the coordinator's liveness check
	// gives a replica that holds the Lease without serving that long (and a Lease).
	prep, endPrep := context.WithTimeout(ctx, s.opts.ClaimTimeout)
	defer endPrep()
	if err := s.waitPlacement(prep); err != nil {
		return err
	}
	claimed, err := s.claimRecord(prep, term, tenure)
	endPrep()
	if err != nil {
		if s.opts.Record != nil {
			s.opts.Record.Release()
		}
		return fmt.Errorf("owner record: %w", err)
	}
	if claimed.HighestTerm > term {
		s.opts.Record.Release()
		return &TermBehindError{Term: claimed.HighestTerm, Source: fmt.Sprintf(
			"owner record term of Role %s; %d owner record Roles carry terms above %d", claimed.HighestIn, claimed.Above, term)}
	}
	if claimed.Forged > 0 {
		s.log.Info("WARNING: owner record Roles carry terms that no coordinator can have led yet (forged?); they are written over as the record is written",
			"term", term, "role", claimed.ForgedIn, "roles", claimed.Forged)
	}
	if s.opts.Config.OwnerRecord {
		core.RecordKnown(claimed.Owners)
	}
	// Read before the core is published: from then on only s.mu guards it, and sessions
	// step it at once.
	graceUntil := core.Stats().GraceUntil
	s.mu.Lock()
	s.core, s.term, s.leadCtx, s.tenure = core, term, ctx, tenure
	s.held, s.heldSince = nil, time.Time{}
	s.stepDownAt, s.claimedBy, s.claimed = time.Time{}, "", 0 // of an earlier term
	s.balanceSeen = balanceCounters{}
	s.applyPlacementLocked()
	s.mu.Unlock()
	s.opts.Metrics.Leader.Set(1)
	s.opts.Metrics.Term.Set(float64(term))
	s.log.Info("serving shard sessions", "term", term, "partitions", s.opts.Config.PartitionCount,
		"graceUntil", graceUntil.Format(time.RFC3339))

	tick := time.NewTicker(s.opts.TickInterval)
	defer tick.Stop()
	gauges := time.NewTicker(time.Second)
	defer gauges.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			s.mu.Lock()
			if s.core != nil {
				s.core.Tick(s.opts.Now())
				s.flushLocked()
			}
			s.mu.Unlock()
		case <-gauges.C:
			s.updateGauges()
		}
	}

	if s.opts.Record != nil {
		s.opts.Record.Release()
	}
	s.mu.Lock()
	s.countBalanceLocked(s.core.Stats().Balance) // what happened since the last gauge update
	s.core = nil
	if len(s.held) > 0 {
		s.log.Info("dropping commands held since the tenure lapsed: leadership ended", "commands", len(s.held), "term", term)
	}
	s.held = nil
	for id, st := range s.streams {
		st.cancel(errors.New("leadership lost"))
		delete(s.streams, id)
	}
	// What shards reported is of this leadership's members; the next one starts empty.
	clear(s.stats)
	clear(s.versions)
	s.mu.Unlock()
	s.opts.Metrics.Leader.Set(0)
	s.log.Info("stopped serving shard sessions: leadership ended", "term", term)
	return nil
}

// notLeader is the refusal a follower gives; the trailer names the leader.
func (s *Server) notLeader(ss grpc.ServerStream) error {
	s.mu.Lock()
	addr := s.leaderAddr
	s.mu.Unlock()
	if addr != "" {
		ss.SetTrailer(metadata.Pairs(protocol.LeaderMetadataKey, addr))
		return status.Errorf(codes.FailedPrecondition, "this coordinator is not the leader; the leader is at %s", addr)
	}
	return status.Error(codes.FailedPrecondition, "this coordinator is not the leader and knows no leader yet")
}

// Session implements the Coordinator service.
func (s *Server) Session(ss kshardv1.Coordinator_SessionServer) error {
	if !s.Leading() {
		return s.notLeader(ss)
	}
	// Until it is authenticated a stream counts against its peer's pending streams, not
	// against the session slots: a silent stream holds a goroutine for HelloTimeout, and
	// one peer must not be able to hold what the other shards need (see peerlimit).
	endPending, err := s.openPending(ss.Context())
	if err != nil {
		return err
	}
	defer endPending()
	ctx, cancel := context.WithCancelCause(ss.Context())
	defer cancel(nil)

	first, err := s.recvHello(ctx, ss)
	if err != nil {
		return err
	}
	id, err := s.authenticate(ctx, first.Report.Shard)
	if err != nil {
		return err
	}
	if err := s.verifyGroup(ctx, id, first.Report.Group); err != nil {
		return err
	}
	endPending()
	if !s.tryOpen() {
		s.opts.Metrics.Refused.WithLabelValues("session_limit").Inc()
		return status.Errorf(codes.ResourceExhausted, "too many session streams (%d) open at this coordinator", s.opts.MaxSessions)
	}
	defer s.closeSlot()
	// Rate limited by the verified identity, not the claimed one: keyed by a claim, an
	// impostor could spend a real shard's hellos.
	if err := s.allowHello(id.Shard); err != nil {
		return err
	}
	shard := id.Shard
	log := s.log.WithValues("shard", shard, "session", first.Report.Session.String(), "podUID", id.PodUID, "group", first.Report.Group)
	st := &stream{shard: shard, id: id, group: first.Report.Group, session: first.Report.Session,
		out: make(chan *kshardv1.CoordinatorMessage, s.opts.SendBuffer), cancel: cancel}

	s.mu.Lock()
	if s.core == nil {
		s.mu.Unlock()
		return s.notLeader(ss)
	}
	s.opts.Metrics.Sessions.Inc()
	// Only an accepted hello replaces the shard's current stream: a refused one (an older
	// process of the same shard, a duplicate of an old hello) must leave it alone. The
	// Welcome is sent after the new stream is in place.
	rejected := s.feedLocked(first, log)
	if rejected == nil {
		if old := s.streams[shard]; old != nil {
			old.cancel(errors.New("replaced by a newer stream of the same shard"))
		}
		s.streams[shard] = st
		s.versions[shard] = first.BuildVersion
	}
	s.flushLocked()
	s.mu.Unlock()
	if rejected != nil {
		return status.Errorf(codes.FailedPrecondition, "hello rejected: %v", rejected)
	}
	log.V(1).Info("session opened", "held", len(first.Report.Held), "leaving", first.Report.Leaving, "user", id.User, "verified", id.Verified)
	if first.Report.Group != "" && s.opts.Config.Balance.Placement != handoff.PlacementLoad {
		log.Info("WARNING: the shard names a shard group, but placement by count has no groups: it takes its share of every partition (run the coordinators with --placement=load)")
	}

	sendErr := make(chan error, 1)
	go func() { sendErr <- s.sendLoop(ctx, ss, st) }()

	recvErr := make(chan error, 1)
	limits := newStreamLimiter(s.opts.Config.PartitionCount, s.opts.Config.HeartbeatInterval)
	go func() {
		for {
			m, err := ss.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			// Counted before anything else is done with the message: past the bounds a
			// flood closes its stream instead of taking the lock per message.
			if err := s.allowMessage(limits, m, shard); err != nil {
				recvErr <- err
				return
			}
			// Another hello on the stream is rate limited like a new session's.
			if h := m.GetHello(); h != nil && h.GetShardId() == shard {
				if err := s.allowHello(shard); err != nil {
					recvErr <- err
					return
				}
			}
			// shard is the verified identity: ReportFromWire binds every message to it
			// and refuses a hello that names another shard.
			in, err := protocol.ReportFromWire(m, shard, s.opts.Config.PartitionCount)
			if err != nil {
				s.opts.Metrics.Rejected.WithLabelValues("malformed").Inc()
				recvErr <- status.Errorf(codes.InvalidArgument, "%v", err)
				return
			}
			// The group was verified for the stream's first hello only.
			if in.Report.Kind == handoff.ReportHello && in.Report.Group != st.group {
				s.opts.Metrics.AuthRejected.WithLabelValues(shardauth.ReasonGroupMismatch).Inc()
				log.Info("refused a hello: shard group changed on the stream", "claimed", in.Report.Group)
				recvErr <- status.Errorf(codes.PermissionDenied, "a hello on this stream claims shard group %q, its first hello claimed %q", in.Report.Group, st.group)
				return
			}
			s.mu.Lock()
			if s.core == nil {
				s.mu.Unlock()
				recvErr <- status.Error(codes.FailedPrecondition, "leadership lost")
				return
			}
			s.stepLocked(in, log)
			s.mu.Unlock()
		}
	}()

	var result error
	select {
	case err := <-recvErr:
		result = err
	case err := <-sendErr:
		result = err
	case <-ctx.Done():
		result = status.Errorf(codes.Unavailable, "session closed: %v", context.Cause(ctx))
	}
	s.closeStream(st)
	log.V(1).Info("session closed", "reason", fmt.Sprint(result))
	return result
}

func (s *Server) recvHello(ctx context.Context, ss kshardv1.Coordinator_SessionServer) (protocol.Incoming, error) {
	type res struct {
		m   *kshardv1.ShardMessage
		err error
	}
	ch := make(chan res, 1)
	go func() { m, err := ss.Recv(); ch <- res{m, err} }()
	var r res
	select {
	case r = <-ch:
	case <-time.After(s.opts.HelloTimeout):
		return protocol.Incoming{}, status.Errorf(codes.DeadlineExceeded, "no hello within %s", s.opts.HelloTimeout)
	case <-ctx.Done():
		return protocol.Incoming{}, status.FromContextError(ctx.Err()).Err()
	}
	if r.err != nil {
		return protocol.Incoming{}, r.err
	}
	if r.m.GetHello() == nil {
		s.opts.Metrics.Rejected.WithLabelValues("malformed").Inc()
		return protocol.Incoming{}, status.Error(codes.InvalidArgument, "the first message of a session must be a hello")
	}
	in, err := protocol.ReportFromWire(r.m, "", s.opts.Config.PartitionCount)
	if err != nil {
		s.opts.Metrics.Rejected.WithLabelValues("malformed").Inc()
		return protocol.Incoming{}, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	return in, nil
}

// authenticate verifies the identity a hello claims; a refusal is counted, logged with the
// claimed ID and returned as the stream's status.
func (s *Server) authenticate(ctx context.Context, claimed string) (shardauth.Identity, error) {
	id, err := s.opts.Authenticator.Authenticate(ctx, claimed)
	if err == nil && claimed == ownerrecord.SentinelShard {
		// The fence's probe relies on no record ever naming this ID (ownerrecord.Fence).
		err = &shardauth.Error{Code: codes.PermissionDenied, Reason: "reserved_id",
			Msg: fmt.Sprintf("shard ID %q is reserved for the fence's probe", claimed)}
	}
	if err == nil && id.Shard != claimed {
		err = &shardauth.Error{Code: codes.PermissionDenied, Reason: "identity_mismatch",
			Msg: fmt.Sprintf("authenticated as shard %q, but the hello claims %q", id.Shard, claimed)}
	}
	if err == nil {
		return id, nil
	}
	var ae *shardauth.Error
	if !errors.As(err, &ae) {
		ae = &shardauth.Error{Code: codes.Unauthenticated, Reason: "other", Msg: err.Error()}
	}
	s.opts.Metrics.AuthRejected.WithLabelValues(ae.Reason).Inc()
	s.log.Info("refused a session: shard identity not verified", "shard", claimed, "reason", ae.Reason, "err", ae.Msg)
	return shardauth.Identity{}, status.Errorf(ae.Code, "authentication failed: %s", ae.Msg)
}

// verifyGroup checks the group a verified identity's hello claims (Options.GroupVerifier;
// trusted without one); a refusal is counted, logged and returned as the stream's status.
func (s *Server) verifyGroup(ctx context.Context, id shardauth.Identity, claimed string) error {
	if s.opts.GroupVerifier == nil {
		return nil
	}
	err := s.opts.GroupVerifier.VerifyGroup(ctx, id, claimed)
	if err == nil {
		return nil
	}
	var ae *shardauth.Error
	if !errors.As(err, &ae) {
		ae = &shardauth.Error{Code: codes.PermissionDenied, Reason: shardauth.ReasonGroupMismatch, Msg: err.Error()}
	}
	s.opts.Metrics.AuthRejected.WithLabelValues(ae.Reason).Inc()
	s.log.Info("refused a session: shard group not verified", "shard", id.Shard, "group", claimed, "reason", ae.Reason, "err", ae.Msg)
	return status.Errorf(ae.Code, "shard group refused: %s", ae.Msg)
}

// allowHello takes a hello token of a verified identity, or says why not.
func (s *Server) allowHello(shard string) error {
	ok, reason := s.hellos.allow(shard, s.opts.Now())
	if ok {
		return nil
	}
	s.opts.Metrics.Refused.WithLabelValues(reason).Inc()
	s.log.V(1).Info("refused a hello: rate limit", "shard", shard, "reason", reason)
	return status.Errorf(codes.ResourceExhausted, "too many hellos from shard %q (more than %d at once, then %g/s): back off and retry",
		shard, s.opts.HelloBurst, s.opts.HelloRate)
}

// closeStream unregisters st (if still current) and tells the state machine.
func (s *Server) closeStream(st *stream) {
	st.cancel(errors.New("stream closed"))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[st.shard] != st {
		return
	}
	delete(s.streams, st.shard)
	if s.core != nil {
		s.core.Disconnected(s.opts.Now(), st.shard, st.session)
		s.flushLocked()
	}
}

func (s *Server) sendLoop(ctx context.Context, ss kshardv1.Coordinator_SessionServer, st *stream) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-st.out:
			if err := ss.Send(m); err != nil {
				return err
			}
		}
	}
}

// stepLocked feeds one validated report to the state machine and sends what it produced;
// s.mu must be held.
func (s *Server) stepLocked(in protocol.Incoming, log logr.Logger) error {
	err := s.feedLocked(in, log)
	s.flushLocked()
	return err
}

// feedLocked feeds one validated report to the state machine without sending; s.mu held.
func (s *Server) feedLocked(in protocol.Incoming, log logr.Logger) error {
	err := s.core.Step(s.opts.Now(), in.Report)
	if err == nil && in.Stats != nil {
		s.stats[in.Report.Shard] = *in.Stats // a refused message does not speak for the shard
	}
	if err != nil {
		var rej *handoff.Rejection
		reason := "other"
		if errors.As(err, &rej) {
			reason = rej.Reason.String()
			if rej.Reason == handoff.ReasonNewerTerm {
				if s.claimedBy == "" {
					s.claimedBy = rej.Shard
				}
				for _, h := range in.Report.Held {
					s.claimed = max(s.claimed, h.Epoch.Term())
				}
			}
		}
		s.opts.Metrics.Rejected.WithLabelValues(reason).Inc()
		log.V(1).Info("rejected shard message", "report", in.Report.String(), "err", err.Error())
	}
	return err
}

// flushLocked sends the state machine's commands and records its events; s.mu held.
func (s *Server) flushLocked() {
	s.dispatchLocked(s.core.Outbox())
	for _, e := range s.core.Events() {
		s.recordEvent(e)
	}
	s.startRingLocked()
	s.startRecordLocked()
}

// dispatchLocked sends the state machine's commands, or holds them while the tenure is
// not valid (see Lead); s.mu held.
func (s *Server) dispatchLocked(out []handoff.Command) {
	if !s.tenure.Valid() {
		if s.heldSince.IsZero() {
			s.heldSince = time.Now()
			s.log.Info("leader Lease not renewed within the renew deadline (was this process stopped?): holding every command until it is",
				"term", s.term)
		}
		s.held = append(s.held, out...)
		s.opts.Metrics.HeldCommands.Set(float64(len(s.held)))
		return
	}
	if !s.heldSince.IsZero() {
		s.log.Info("leader Lease renewed: sending the commands held meanwhile", "term", s.term,
			"commands", len(s.held), "heldFor", time.Since(s.heldSince).String())
		out = append(s.held, out...)
		s.held, s.heldSince = nil, time.Time{}
		s.opts.Metrics.HeldCommands.Set(0)
	}
	s.sendLocked(out)
}

// sendLocked puts commands on their shards' streams; s.mu held.
func (s *Server) sendLocked(out []handoff.Command) {
	info := protocol.SessionInfo{PartitionCount: s.opts.Config.PartitionCount, Hasher: protocol.Hasher, LeaderTerm: s.term}
	for _, c := range out {
		st := s.streams[c.To]
		if st == nil || st.session != c.Session {
			continue // that session is gone; the state machine learns it from Disconnected
		}
		m, err := protocol.CommandToWire(c, info)
		if err != nil {
			s.log.Error(err, "encoding command", "shard", c.To)
			continue
		}
		select {
		case st.out <- m:
		default:
			s.log.Info("shard is too slow to read commands; closing its stream", "shard", c.To, "buffer", cap(st.out))
			st.cancel(errors.New("send buffer full"))
		}
	}
}

// startRingLocked computes the target assignment the state machine asks for on its own
// goroutine, outside s.mu, and feeds the result back under it. Under the lock every
// heartbeat would wait for it, and a shard whose heartbeats go unacknowledged for its TTL
// fences. The state machine hands out one request at a time and ignores a superseded
// generation; a result for a core that is no longer current (leadership ended or moved
// to a new term) is dropped here. s.mu must be held.
func (s *Server) startRingLocked() {
	core := s.core
	req, ok := core.TakeRingRequest()
	if !ok {
		return
	}
	go func() {
		start := time.Now()
		res, err := req.Compute()
		took := time.Since(start)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.core != core {
			return
		}
		s.log.V(1).Info("target assignment computed", "members", len(req.Members), "generation", req.Gen, "took", took.String())
		core.RingComputed(s.opts.Now(), req.Gen, res, err)
		s.flushLocked()
	}()
}

// ReasonEpochsExhausted is StepDown's reason when this leader issued every epoch of its
// term: it grants nothing more, so it must step down for a new term whatever the Lease says.
const ReasonEpochsExhausted = "this leader issued all epochs of its term"

// checkStepDownLocked steps down when the state machine says a newer term exists or this
// term's epochs ran out. Stats walks every partition, so this runs on the gauge ticker, not
// per message; s.mu must be held.
func (s *Server) checkStepDownLocked(st handoff.Stats) {
	if !st.NewerTermSeen && !st.EpochsExhausted {
		return
	}
	reason := fmt.Sprintf("shard %q reported an epoch of a newer leader term (%d, this leader's is %d)", s.claimedBy, s.claimed, s.term)
	if st.EpochsExhausted {
		reason = ReasonEpochsExhausted
	}
	now := s.opts.Now()
	if !s.stepDownAt.IsZero() && now.Sub(s.stepDownAt) < s.opts.StepDownRecheck {
		return
	}
	s.stepDownAt = now
	s.log.Info("asking to step down", "reason", reason)
	go s.opts.StepDown(reason)
}

func (s *Server) recordEvent(e handoff.Event) {
	m := s.opts.Metrics
	log := s.log.WithValues("shard", e.Shard)
	switch e.Kind {
	case handoff.EventMemberJoined, handoff.EventMemberLeaving, handoff.EventMemberLeft,
		handoff.EventMemberExpired, handoff.EventMemberRestarted, handoff.EventMemberFencedOut, handoff.EventMemberSeized:
		m.MemberEvents.WithLabelValues(e.Kind.String()).Inc()
		log.Info("membership changed", "event", e.Kind.String())
		if e.Kind == handoff.EventMemberLeft || e.Kind == handoff.EventMemberExpired || e.Kind == handoff.EventMemberSeized {
			delete(s.stats, e.Shard)
			delete(s.versions, e.Shard)
		}
	case handoff.EventTargetChanged:
		log.Info("target assignment recomputed", "members", e.Members)
	case handoff.EventMoveStarted:
		m.MovesStarted.Inc()
		m.BalancerMoves.WithLabelValues(e.Reason.String()).Inc()
		if e.Reason == balance.ReasonMembership {
			log.V(1).Info("move started", "partition", e.Partition, "epoch", e.Epoch.String(), "from", e.From, "reason", e.Reason.String())
		} else {
			// Moves for load, hot isolation or a pin: one line each (design §5), with
			// what the balancer saw of the partition.
			load, objects, _ := s.core.PartitionLoad(e.Partition)
			log.Info("balancer moves a partition", "partition", e.Partition, "epoch", e.Epoch.String(), "from", e.From,
				"reason", e.Reason.String(), "load", load, "objects", objects)
		}
	case handoff.EventMoveAborted:
		m.MovesAborted.Inc()
		log.Info("move aborted", "partition", e.Partition, "epoch", e.Epoch.String())
	case handoff.EventReleased:
		log.Info("partition released", "partition", e.Partition, "epoch", e.Epoch.String())
	case handoff.EventAcquired:
		if e.Handoff > 0 {
			m.MovesFinished.Inc()
			m.Handoff.Observe(e.Handoff.Seconds())
		}
		m.Gap.Observe(e.Gap.Seconds())
		log.Info("partition acquired", "partition", e.Partition, "epoch", e.Epoch.String(), "from", e.From,
			"gap", e.Gap.String(), "handoff", e.Handoff.String())
	case handoff.EventAdopted:
		log.Info("partition adopted from the shard's report", "partition", e.Partition, "epoch", e.Epoch.String())
	case handoff.EventDoubleClaim:
		log.Info("partition claimed by two shards; the newer epoch keeps it", "partition", e.Partition,
			"epoch", e.Epoch.String(), "loser", e.From)
	case handoff.EventSaturation:
		// Both ways, so that a reader of the log sees why the balancer starts and stops
		// counting the shard's partitions above their load.
		msg := "shard no longer saturated: its partitions count their load again"
		if e.Saturated {
			msg = "shard saturated: the balancer counts its partitions above their load and moves no load onto it"
		}
		log.Info(msg, "limiterWaitPerSecond", time.Duration(e.Wait)*time.Millisecond, "groupMedianPerSecond", time.Duration(e.Median)*time.Millisecond)
	}
}

func (s *Server) updateGauges() {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.opts.Metrics
	if s.core == nil {
		m.Members.Set(0)
		m.Partitions.Reset()
		m.Namespaces.Reset()
		m.ShardLoad.Reset()
		m.LoadFair.Reset()
		m.LoadImbalance.Reset()
		s.updatePinGaugesLocked(nil)
		return
	}
	st := s.core.Stats()
	s.checkStepDownLocked(st)
	m.Epoch.Set(float64(st.Epoch))
	m.Members.Set(float64(st.Members))
	m.MovesInFlight.Set(float64(st.MovesInFlight))
	for i, n := range st.ByState {
		m.PartitionStates.WithLabelValues(handoff.PartitionState(i).String()).Set(float64(n))
	}
	m.Partitions.Reset()
	m.Namespaces.Reset()
	members := s.core.Members()
	for _, mi := range members {
		m.Partitions.WithLabelValues(mi.ID).Set(float64(mi.Owned))
		m.Namespaces.WithLabelValues(mi.ID).Set(float64(s.stats[mi.ID].Namespaces))
	}
	s.updatePlacementGaugesLocked(st, members)
	s.pruneLocked(members)
}

// pruneLocked drops the stats and build versions of shards that are no longer members.
// The membership events drop them as members go; this also catches a member that left
// the state machine any other way, so that the tables, keyed by shard IDs (pod names,
// new with every rollout), hold at most the members (bounded by --max-shards) and never
// every ID ever seen. s.mu must be held.
func (s *Server) pruneLocked(members []handoff.MemberInfo) {
	current := make(map[string]bool, len(members))
	for _, mi := range members {
		current[mi.ID] = true
	}
	for id := range s.stats {
		if !current[id] {
			delete(s.stats, id)
		}
	}
	for id := range s.versions {
		if !current[id] {
			delete(s.versions, id)
		}
	}
}

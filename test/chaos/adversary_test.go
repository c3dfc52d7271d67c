package chaos

import (
	"context"
	"encoding/base64"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/pkg/sharding/transport"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
	"github.com/kshard/kshard/test/framework"
)

// adversaryID is the shard ID of the adversary's own pod: a pod of the shards'
// ServiceAccount, so its token is genuine, but no shard process runs under it.
const adversaryID = "chaos-adversary"

// adversary is a client holding the client certificate every shard holds (valid mutual
// TLS), which floods the coordinators with hellos and claims:
//
//   - impostor hellos: a live shard's ID, claiming every partition at an epoch of a newer
//     term (which, if believed, takes them and makes the leader step down), with no token,
//     a forged token, or the adversary pod's genuine token (another pod's); each must be
//     refused (Unauthenticated or PermissionDenied), never welcomed;
//   - hellos as its own, genuine identity, leaving, followed by a second hello claiming
//     every partition at a forged epoch of the leader's term: rate limited beyond the
//     burst (ResourceExhausted), and the claims must be dropped (the monitor checks that
//     the adversary never owns a partition);
//   - silent streams that never say hello, holding the coordinator's stream slots until
//     its hello timeout.
type adversary struct {
	creds      credentials.TransportCredentials
	ownToken   string
	partitions int

	mu       sync.Mutex
	outcomes map[string]int // "kind: outcome" → count
	welcomed []string       // impostor hellos that were welcomed: violations
	bursts   int
}

func newAdversary(k *framework.KShard, partitions int) (*adversary, error) {
	pki := k.PKI()
	creds, err := transport.ClientCredentials(transport.TLSOptions{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, CAFile: pki.CA})
	if err != nil {
		return nil, err
	}
	return &adversary{creds: creds, ownToken: k.ShardIdentity(adversaryID).CoordinatorToken, partitions: partitions,
		outcomes: map[string]int{}}, nil
}

func (a *adversary) count(kind, outcome string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outcomes[kind+": "+outcome]++
}

// burst floods the coordinators at addrs for d with workers clients. victims are the live
// shards' IDs; term is the leader's term as last seen (0: unknown).
func (a *adversary) burst(ctx context.Context, rng *rand.Rand, d time.Duration, addrs, victims []string, term uint32) {
	a.mu.Lock()
	a.bursts++
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	const workers = 4
	var wg sync.WaitGroup
	for i := range workers {
		seed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			conns := map[string]*grpc.ClientConn{}
			defer func() {
				for _, cc := range conns {
					_ = cc.Close()
				}
			}()
			for ctx.Err() == nil {
				addr := addrs[r.IntN(len(addrs))]
				cc, ok := conns[addr]
				if !ok {
					var err error
					if cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(a.creds)); err != nil {
						a.count("dial", err.Error())
						return
					}
					conns[addr] = cc
				}
				switch n := r.IntN(10); {
				case n < 6:
					a.impostor(ctx, cc, r, victims[r.IntN(len(victims))], term)
				case n < 9:
					a.ownHellos(ctx, cc)
				default:
					a.silent(ctx, cc, r)
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(20+r.IntN(60)) * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
}

// impostor claims victim's ID with every partition at a newer term's epoch.
func (a *adversary) impostor(ctx context.Context, cc *grpc.ClientConn, r *rand.Rand, victim string, term uint32) {
	kinds := []string{"impostor without token", "impostor with a forged token", "impostor with another pod's token"}
	k := r.IntN(len(kinds))
	token := ""
	switch k {
	case 1:
		token = forgedJWT(r)
	case 2:
		token = a.ownToken
	}
	claimTerm := term + 1
	if term == 0 || term == math.MaxUint32 {
		claimTerm = 1 << 20
	}
	held := make([]*kshardv1.Held, 0, a.partitions)
	for p := range uint32(a.partitions) {
		held = append(held, &kshardv1.Held{Partition: p, Epoch: uint64(handoff.MakeEpoch(claimTerm, p+1)), State: kshardv1.SlotState_SLOT_STATE_ACQUIRED})
	}
	msg := &kshardv1.ShardMessage{Session: &kshardv1.Session{Incarnation: uint64(time.Now().UnixNano()), Seq: 1},
		Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: victim, BuildVersion: "chaos-adversary", Held: held}}}
	reply, err := a.exchange(ctx, cc, token, msg)
	if reply != nil && reply.GetWelcome() != nil {
		a.mu.Lock()
		a.welcomed = append(a.welcomed, fmt.Sprintf("%s: %s claiming %s was welcomed (%v)", time.Now().Format("15:04:05.000"), kinds[k], victim, reply))
		a.mu.Unlock()
		a.count(kinds[k], "WELCOMED")
		return
	}
	a.count(kinds[k], outcome(err))
}

// ownHellos says hello as the adversary's own identity (leaving, so that it is given
// nothing), then claims every partition at a forged epoch of the leader's term.
func (a *adversary) ownHellos(ctx context.Context, cc *grpc.ClientConn) {
	const kind = "own identity"
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sctx = metadata.AppendToOutgoingContext(sctx, shardauth.MetadataKey, shardauth.BearerPrefix+a.ownToken)
	stream, err := kshardv1.NewCoordinatorClient(cc).Session(sctx)
	if err != nil {
		a.count(kind, outcome(err))
		return
	}
	inc := uint64(time.Now().UnixNano())
	hello := func(seq uint64, held []*kshardv1.Held) *kshardv1.ShardMessage {
		return &kshardv1.ShardMessage{Session: &kshardv1.Session{Incarnation: inc, Seq: seq},
			Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: adversaryID, BuildVersion: "chaos-adversary", Leaving: true, Held: held}}}
	}
	if err := stream.Send(hello(1, nil)); err != nil {
		a.count(kind, outcome(err))
		return
	}
	m, err := stream.Recv()
	if err != nil {
		a.count(kind, outcome(err))
		return
	}
	w := m.GetWelcome()
	if w == nil {
		a.count(kind, fmt.Sprintf("first reply not a Welcome: %T", m.GetKind()))
		return
	}
	a.count(kind, "welcomed (genuine identity)")
	held := make([]*kshardv1.Held, 0, a.partitions)
	for p := range uint32(a.partitions) {
		held = append(held, &kshardv1.Held{Partition: p, Epoch: uint64(handoff.MakeEpoch(w.GetLeaderTerm(), math.MaxUint32-p)), State: kshardv1.SlotState_SLOT_STATE_ACQUIRED})
	}
	if err := stream.Send(hello(2, held)); err != nil {
		a.count(kind+" forged claims", outcome(err))
		return
	}
	// Whatever comes back within a moment; then the stream is dropped.
	rctx, rcancel := context.WithTimeout(sctx, 500*time.Millisecond)
	defer rcancel()
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		a.count(kind+" forged claims", outcome(err))
	case <-rctx.Done():
		a.count(kind+" forged claims", "stream kept open")
	}
}

// silent opens a stream and never says hello; it holds it for up to 3s.
func (a *adversary) silent(ctx context.Context, cc *grpc.ClientConn, r *rand.Rand) {
	const kind = "silent stream"
	sctx, cancel := context.WithTimeout(ctx, time.Duration(1000+r.IntN(2000))*time.Millisecond)
	defer cancel()
	stream, err := kshardv1.NewCoordinatorClient(cc).Session(sctx)
	if err != nil {
		a.count(kind, outcome(err))
		return
	}
	_, err = stream.Recv()
	a.count(kind, outcome(err))
}

// exchange sends msg on a new stream with token and returns the first reply, or how the
// stream ended.
func (a *adversary) exchange(ctx context.Context, cc *grpc.ClientConn, token string, msg *kshardv1.ShardMessage) (*kshardv1.CoordinatorMessage, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if token != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, shardauth.MetadataKey, shardauth.BearerPrefix+token)
	}
	stream, err := kshardv1.NewCoordinatorClient(cc).Session(sctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(msg); err != nil && !strings.Contains(err.Error(), "EOF") {
		return nil, err
	}
	return stream.Recv()
}

// outcome names how a stream ended: its gRPC code (FailedPrecondition is a follower).
func outcome(err error) string {
	if err == nil {
		return "OK"
	}
	return status.Code(err).String()
}

// forgedJWT is shaped like a ServiceAccount token but signed by nobody.
func forgedJWT(r *rand.Rand) string {
	claims := fmt.Sprintf(`{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:x:kshard-shard","exp":%d,"jti":"%x"}`,
		time.Now().Add(time.Hour).Unix(), r.Uint64())
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
}

// report returns the outcomes, sorted, and the violations.
func (a *adversary) report() (bursts int, outcomes []string, welcomed []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, n := range a.outcomes {
		outcomes = append(outcomes, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(outcomes)
	return a.bursts, outcomes, append([]string(nil), a.welcomed...)
}

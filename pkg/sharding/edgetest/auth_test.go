package edgetest_test

// Tests of who may open a session and how much a client can make the coordinator hold:
// shard identities verified by TokenReview (pkg/sharding/shardauth), the shard's token
// sent only over TLS and re-read per session, and the server's caps (open streams, hellos
// per identity, message size).

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/shardauth"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/transport"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
	"github.com/kshard/kshard/test/testpki"
)

const (
	shardNamespace = "kshard-system"
	shardSA        = "kshard-shard"
)

// tokenAPI is a fake API server's TokenReview: each known token is a pod-bound token of a
// ServiceAccount for a pod; it records every token it reviewed.
type tokenAPI struct {
	mu       sync.Mutex
	pods     map[string][2]string // token → {ServiceAccount user, pod name}
	reviewed []string
}

func newTokenAPI() *tokenAPI { return &tokenAPI{pods: map[string][2]string{}} }

// issue makes a pod-bound token of the shard ServiceAccount (or of user) for pod.
func (a *tokenAPI) issue(pod string, user ...string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := shardauth.ServiceAccountUser(shardNamespace, shardSA)
	if len(user) > 0 {
		u = user[0]
	}
	tok := fakeJWT(fmt.Sprintf("%s-%d", pod, len(a.pods)))
	a.pods[tok] = [2]string{u, pod}
	return tok
}

func (a *tokenAPI) revoke(tok string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pods, tok)
}

func (a *tokenAPI) sawToken(tok string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.reviewed {
		if r == tok {
			return true
		}
	}
	return false
}

func (a *tokenAPI) reviews() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reviewed)
}

// authenticator is the coordinator's TokenReview authenticator against this fake.
func (a *tokenAPI) authenticator(t testing.TB) shardauth.Authenticator {
	t.Helper()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		tr := act.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		a.mu.Lock()
		defer a.mu.Unlock()
		a.reviewed = append(a.reviewed, tr.Spec.Token)
		p, ok := a.pods[tr.Spec.Token]
		if !ok || len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != shardauth.DefaultAudience {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return true, tr, nil
		}
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authenticationv1.UserInfo{Username: p[0], Extra: map[string]authenticationv1.ExtraValue{
				shardauth.ExtraPodName: {p[1]}, shardauth.ExtraPodUID: {"uid-" + p[1]},
			}}}
		return true, tr, nil
	})
	auth, err := shardauth.NewTokenReview(shardauth.TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: shardNamespace, Name: shardSA})
	if err != nil {
		t.Fatal(err)
	}
	return auth
}

// fakeJWT is shaped like a ServiceAccount token, so the authenticator's cache can read
// its expiry (an hour from now).
func fakeJWT(id string) string {
	claims := fmt.Sprintf(`{"exp":%d,"jti":%q}`, time.Now().Add(time.Hour).Unix(), id)
	return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
}

func writeToken(t testing.TB, path, tok string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// rawStream opens a Session stream with creds, sending tok as the bearer token ("" for
// none); cancel ends it.
func rawStream(t testing.TB, addr string, creds credentials.TransportCredentials, tok string) (kshardv1.Coordinator_SessionClient, context.CancelFunc) {
	t.Helper()
	return dialStream(t, addr, tok, grpc.WithTransportCredentials(creds))
}

// dialStream opens a Session stream to target with opts, sending tok as the bearer token
// ("" for none); cancel ends it.
func dialStream(t testing.TB, target, tok string, opts ...grpc.DialOption) (kshardv1.Coordinator_SessionClient, context.CancelFunc) {
	t.Helper()
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if tok != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, shardauth.MetadataKey, shardauth.BearerPrefix+tok)
	}
	stop := func() {
		cancel()
		_ = cc.Close()
	}
	t.Cleanup(stop)
	stream, err := kshardv1.NewCoordinatorClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream, stop
}

// firstReply sends m and returns the first message back, or how the stream ended.
func firstReply(t testing.TB, stream kshardv1.Coordinator_SessionClient, m *kshardv1.ShardMessage) (*kshardv1.CoordinatorMessage, error) {
	t.Helper()
	if err := stream.Send(m); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("send: %v", err)
	}
	return stream.Recv()
}

func mtls(t testing.TB) (server, client credentials.TransportCredentials) {
	t.Helper()
	pki := testpki.New(t)
	s, err := transport.ServerCredentials(transport.TLSOptions{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.ClientCredentials(transport.TLSOptions{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, CAFile: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// TestImpostorRefused: every shard holds the same client certificate, so the certificate
// says nothing about which shard a client is. A client claiming a live shard's ID, with a
// larger incarnation (which would replace that shard's session) and a hello listing every
// partition at a larger epoch (which would take them), is refused unless its token is the
// pod-bound token of that very shard; the real shard's session goes on undisturbed.
func TestImpostorRefused(t *testing.T) {
	w := newWorld(t)
	api := newTokenAPI()
	serverCreds, clientCreds := mtls(t)
	co := startCoordinator(t, w, "coordinator", serverCreds, func(o *coordinatorrpc.Options) { o.Authenticator = api.authenticator(t) })
	co.lead(t, 1)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, api.issue("shard-a"))
	s := startShard(t, w, "shard-a", clientCreds, []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) { o.TokenFile = tokenFile })
	co.waitSettled(t, w, s)

	var steal []*kshardv1.Held
	for p := range uint32(partitions) {
		steal = append(steal, acquired(p, handoff.MakeEpoch(1, 1_000_000+p)))
	}
	impostors := []struct {
		name       string
		token      string
		wantCode   codes.Code
		wantReason string
	}{
		{name: "no token", wantCode: codes.Unauthenticated, wantReason: shardauth.ReasonMissingToken},
		{name: "a token the API server does not know", token: fakeJWT("forged"), wantCode: codes.Unauthenticated, wantReason: shardauth.ReasonInvalidToken},
		{name: "another shard pod's token", token: api.issue("shard-b"), wantCode: codes.PermissionDenied, wantReason: shardauth.ReasonPodNameMismatch},
		{name: "a pod named like the shard, of another ServiceAccount", token: api.issue("shard-a", shardauth.ServiceAccountUser(shardNamespace, "default")),
			wantCode: codes.PermissionDenied, wantReason: shardauth.ReasonWrongServiceAccount},
	}
	for _, tc := range impostors {
		t.Run(tc.name, func(t *testing.T) {
			reconnects := testutil.ToFloat64(s.metrics.Reconnects)
			sessions := testutil.ToFloat64(co.metrics.Sessions)
			rejected := testutil.ToFloat64(co.metrics.AuthRejected.WithLabelValues(tc.wantReason))
			stream, _ := rawStream(t, co.addr, clientCreds, tc.token)
			got, err := sendAll(t, stream, hello(s.id, uint64(time.Now().UnixNano()), steal...))
			if status.Code(err) != tc.wantCode || len(got) != 0 {
				t.Fatalf("impostor got %d messages and %v, want %s and nothing else", len(got), err, tc.wantCode)
			}
			if n := testutil.ToFloat64(co.metrics.AuthRejected.WithLabelValues(tc.wantReason)); n != rejected+1 {
				t.Errorf("auth_rejected{reason=%q} went from %v to %v", tc.wantReason, rejected, n)
			}
			if n := testutil.ToFloat64(co.metrics.Sessions); n != sessions {
				t.Errorf("sessions went from %v to %v: the impostor's hello reached the state machine", sessions, n)
			}
			acks := rttCount(t, s)
			waitFor(t, 10*time.Second, "two more acknowledged heartbeats of the real shard", func() (bool, string) {
				n := rttCount(t, s)
				return n >= acks+2, fmt.Sprintf("%d acks, had %d", n, acks)
			})
			if n := testutil.ToFloat64(s.metrics.Reconnects); n != reconnects {
				t.Errorf("the real shard reconnected (%v → %v)", reconnects, n)
			}
			if ws := s.h.workingSet(); len(ws) != partitions {
				t.Errorf("the real shard works %d partitions, want %d", len(ws), partitions)
			}
		})
	}
	if _, ok, why := co.settled(t, w, s); !ok {
		t.Errorf("not settled on the real shard after the impostors: %s", why)
	}
}

// TestShardToken: the shard sends its token only over TLS unless told otherwise, and
// reads the file again for every session, so a token the kubelet rotated is the one used.
func TestShardToken(t *testing.T) {
	t.Run("not over plaintext unless allowed", func(t *testing.T) {
		w := newWorld(t)
		api := newTokenAPI()
		co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) { o.Authenticator = api.authenticator(t) })
		co.lead(t, 1)
		tokenFile := filepath.Join(t.TempDir(), "token")
		writeToken(t, tokenFile, api.issue("shard-plain"))
		s := startShard(t, w, "shard-plain", insecureClient(t), []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) { o.TokenFile = tokenFile })
		time.Sleep(time.Second)
		if s.c.Welcomed() || api.reviews() != 0 || testutil.ToFloat64(co.metrics.Sessions) != 0 {
			t.Fatalf("over plaintext: welcomed=%t, %d token reviews, %v sessions; want the token never sent",
				s.c.Welcomed(), api.reviews(), testutil.ToFloat64(co.metrics.Sessions))
		}
		s.kill(t)
		s2 := startShard(t, w, "shard-plain", insecureClient(t), []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) {
			o.TokenFile, o.TokenOverPlaintext = tokenFile, true
		})
		co.waitSettled(t, w, s2)
	})

	t.Run("re-read for every session", func(t *testing.T) {
		w := newWorld(t)
		api := newTokenAPI()
		serverCreds, clientCreds := mtls(t)
		co := startCoordinator(t, w, "coordinator", serverCreds, func(o *coordinatorrpc.Options) { o.Authenticator = api.authenticator(t) })
		co.lead(t, 1)
		tokenFile := filepath.Join(t.TempDir(), "token")
		first := api.issue("shard-rot")
		writeToken(t, tokenFile, first)
		s := startShard(t, w, "shard-rot", clientCreds, []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) { o.TokenFile = tokenFile })
		co.waitSettled(t, w, s)

		// The kubelet rotates the token; the old one stops being valid.
		second := api.issue("shard-rot")
		writeToken(t, tokenFile, second)
		api.revoke(first)
		// A leadership change ends the session; the next one must carry the new token.
		co.stopLeading(t)
		co.lead(t, 2)
		co.waitSettled(t, w, s)
		if !api.sawToken(second) {
			t.Error("the new session did not send the rotated token")
		}
	})
}

// TestSessionStreamCap: authenticated sessions are capped; one beyond MaxSessions is
// refused with ResourceExhausted and counted, and a freed slot can be used again.
func TestSessionStreamCap(t *testing.T) {
	w := newWorld(t)
	const max = 3
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) { o.MaxSessions = max })
	co.lead(t, 1)
	var open []context.CancelFunc
	for i := range max {
		stream, cancel := rawStream(t, co.addr, insecureClient(t), "")
		if m, err := firstReply(t, stream, hello(fmt.Sprintf("raw-held-%d", i), 1)); err != nil || m.GetWelcome() == nil {
			t.Fatalf("session %d: got %v, %v; want a Welcome", i, m, err)
		}
		open = append(open, cancel)
	}
	steps := []struct {
		name     string
		free     int // sessions to close first
		wantCode codes.Code
	}{
		{name: "one session beyond the cap", wantCode: codes.ResourceExhausted},
		{name: "again: nothing was freed", wantCode: codes.ResourceExhausted},
		{name: "after one session closed", free: 1, wantCode: codes.OK},
	}
	for i, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.free {
				open[0]()
				open = open[1:]
			}
			waitFor(t, 5*time.Second, "freed slots", func() (bool, string) {
				n := testutil.ToFloat64(co.metrics.OpenStreams)
				return n == float64(len(open)), fmt.Sprintf("%v open, want %d", n, len(open))
			})
			refused := testutil.ToFloat64(co.metrics.Refused.WithLabelValues("session_limit"))
			stream, _ := rawStream(t, co.addr, insecureClient(t), "")
			m, err := firstReply(t, stream, hello(fmt.Sprintf("raw-%d", i), 1))
			if tc.wantCode == codes.OK {
				if err != nil || m.GetWelcome() == nil {
					t.Fatalf("got %v, %v; want a Welcome", m, err)
				}
				return
			}
			if status.Code(err) != tc.wantCode {
				t.Fatalf("got %v, %v; want %s", m, err, tc.wantCode)
			}
			if n := testutil.ToFloat64(co.metrics.Refused.WithLabelValues("session_limit")); n != refused+1 {
				t.Errorf("refused{reason=session_limit} went from %v to %v", refused, n)
			}
		})
	}
}

// rawStreamFrom is rawStream from the local address ip (any of 127.0.0.0/8 on Linux):
// the coordinator tells peers apart by their address.
// rawStreamFrom is rawStream from local address ip: a peer of its own to the
// coordinator's per-address limits.
func rawStreamFrom(t testing.TB, ip, addr string, creds credentials.TransportCredentials, tok string) (kshardv1.Coordinator_SessionClient, context.CancelFunc) {
	t.Helper()
	dial := func(ctx context.Context, target string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return d.DialContext(ctx, "tcp", target)
	}
	return dialStream(t, "passthrough:///"+addr, tok, grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dial))
}

// TestSilentStreamsPerPeer: a client holding the shards' valid client certificate opens
// many streams from one address and never says hello. They count against its address's
// unauthenticated streams, not the session slots: those beyond MaxPendingPerPeer are
// refused with ResourceExhausted, and a real shard at another address still opens its
// session although the attacker opened more streams than there are slots.
func TestSilentStreamsPerPeer(t *testing.T) {
	w := newWorld(t)
	const slots, perPeer = 3, 2
	serverCreds, clientCreds := mtls(t)
	co := startCoordinator(t, w, "coordinator", serverCreds, func(o *coordinatorrpc.Options) {
		o.MaxSessions, o.MaxPendingPerPeer = slots, perPeer
	})
	co.lead(t, 1)
	const attacker = "127.0.0.2"
	for i := range 2 * slots {
		stream, _ := rawStreamFrom(t, attacker, co.addr, clientCreds, "")
		if i < perPeer {
			waitFor(t, 5*time.Second, fmt.Sprintf("%d pending streams", i+1), func() (bool, string) {
				n := testutil.ToFloat64(co.metrics.PendingStreams)
				return n == float64(i+1), fmt.Sprintf("%v pending", n)
			})
			continue
		}
		if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("silent stream %d of one address: %v, want ResourceExhausted", i+1, err)
		}
	}
	if n := testutil.ToFloat64(co.metrics.Refused.WithLabelValues("pending_per_peer")); n != 2*slots-perPeer {
		t.Errorf("refused{reason=pending_per_peer} = %v, want %d", n, 2*slots-perPeer)
	}
	tests := []struct {
		name, from, shard string
	}{
		{name: "a shard at another address", from: "127.0.0.3", shard: "shard-a"},
		{name: "a second shard at a third address", from: "127.0.0.4", shard: "shard-b"},
	}
	outer := t // the sessions stay open after their subtests
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream, _ := rawStreamFrom(outer, tc.from, co.addr, clientCreds, "")
			if m, err := firstReply(t, stream, hello(tc.shard, 1)); err != nil || m.GetWelcome() == nil {
				t.Fatalf("got %v, %v; want a Welcome", m, err)
			}
		})
	}
	if n := testutil.ToFloat64(co.metrics.OpenStreams); n != 2 {
		t.Errorf("%v sessions hold slots, want the 2 shards'", n)
	}
}

// TestHelloRateLimit: hellos of one identity beyond the burst are refused with
// ResourceExhausted before they reach the state machine, whether each comes on a new
// stream or they repeat on one; other identities are not affected.
func TestHelloRateLimit(t *testing.T) {
	w := newWorld(t)
	const burst = 3
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) {
		o.HelloBurst, o.HelloRate = burst, 0.001 // no refill within the test
	})
	co.lead(t, 1)
	tests := []struct {
		name      string
		shard     string
		oneStream bool // all hellos on one stream, else a new stream each
	}{
		{name: "a new stream for each hello", shard: "raw-flood"},
		{name: "hellos repeated on one stream", shard: "raw-repeat", oneStream: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refused := testutil.ToFloat64(co.metrics.Refused.WithLabelValues("hello_rate"))
			sessions := testutil.ToFloat64(co.metrics.Sessions)
			var stream kshardv1.Coordinator_SessionClient
			for i := range burst + 1 {
				inc := uint64(i + 1)
				if !tc.oneStream || stream == nil {
					stream, _ = rawStream(t, co.addr, insecureClient(t), "")
				}
				if i < burst {
					if err := stream.Send(hello(tc.shard, inc)); err != nil {
						t.Fatal(err)
					}
					if !tc.oneStream {
						if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
							t.Fatalf("hello %d: got %v, %v; want a Welcome", i+1, m, err)
						}
					}
					continue
				}
				_, err := sendAll(t, stream, hello(tc.shard, inc))
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("hello %d: stream ended with %v, want ResourceExhausted", i+1, err)
				}
			}
			if n := testutil.ToFloat64(co.metrics.Refused.WithLabelValues("hello_rate")); n != refused+1 {
				t.Errorf("refused{reason=hello_rate} went from %v to %v", refused, n)
			}
			if tc.oneStream {
				return
			}
			if n := testutil.ToFloat64(co.metrics.Sessions); n != sessions+burst {
				t.Errorf("sessions went from %v to %v, want +%d: the refused hello reached the state machine", sessions, n, burst)
			}
		})
	}
	t.Run("another identity", func(t *testing.T) {
		stream, _ := rawStream(t, co.addr, insecureClient(t), "")
		if m, err := firstReply(t, stream, hello("raw-other", 1)); err != nil || m.GetWelcome() == nil {
			t.Fatalf("got %v, %v; want a Welcome", m, err)
		}
	})
}

// TestMessageSizeLimit: with the server's GRPCOptions, a hello listing every partition is
// accepted, and a message larger than MaxMessageSize is refused by gRPC with
// ResourceExhausted before it is decoded.
func TestMessageSizeLimit(t *testing.T) {
	w := newWorld(t)
	reg := prometheus.NewRegistry()
	metrics, err := coordinatorrpc.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := coordinatorrpc.New(coordinatorrpc.Options{Config: testConfig(), Metrics: metrics, TickInterval: 20 * time.Millisecond}, w.log)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(append(transport.ServerOptions(), srv.GRPCOptions()...), grpc.Creds(insecureServer(t)))...)
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan struct{})
	go func() {
		defer close(led)
		_ = srv.Lead(ctx, 2, &tenure{})
	}()
	t.Cleanup(func() {
		cancel()
		<-led
		g.Stop()
	})
	waitFor(t, 5*time.Second, "leading", func() (bool, string) { return srv.Leading(), "not leading" })

	var all []*kshardv1.Held
	for p := range uint32(partitions) {
		all = append(all, acquired(p, handoff.MakeEpoch(1, p+1)))
	}
	max := coordinatorrpc.MaxMessageSize(partitions)
	tests := []struct {
		name     string
		msg      *kshardv1.ShardMessage
		wantCode codes.Code
	}{
		{name: "every partition held", msg: hello("raw-all", 1, all...)},
		{name: "larger than P × 32 B + overhead", wantCode: codes.ResourceExhausted, msg: &kshardv1.ShardMessage{Session: sess(1, 1),
			Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: "raw-big", BuildVersion: strings.Repeat("x", max)}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream, _ := rawStream(t, lis.Addr().String(), insecureClient(t), "")
			m, err := firstReply(t, stream, tc.msg)
			if tc.wantCode == codes.OK {
				if err != nil || m.GetWelcome() == nil {
					t.Fatalf("got %v, %v; want a Welcome", m, err)
				}
				return
			}
			if status.Code(err) != tc.wantCode {
				t.Fatalf("got %v, %v; want %s", m, err, tc.wantCode)
			}
		})
	}
}

// TestMessageRateLimit: a verified shard that floods its stream (heartbeats, or partition
// reports nobody asked for) has the stream closed with ResourceExhausted, counted by
// reason, after at most the bounds' burst of messages (each takes the server's lock;
// a refused one no longer walks the partitions, BenchmarkStepRefusedReleased); another
// shard's session is not touched. Real shards in the other tests of this package (heartbeats every 200 ms,
// cold starts of 64 partitions) never meet the bounds.
func TestMessageRateLimit(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), nil)
	co.lead(t, 1)
	prepared := func(inc uint64) *kshardv1.ShardMessage {
		return &kshardv1.ShardMessage{Session: sess(inc, 1),
			Kind: &kshardv1.ShardMessage_Prepared{Prepared: &kshardv1.PartitionReport{Partition: 3, Epoch: 1}}}
	}
	bystander, _ := rawStream(t, co.addr, insecureClient(t), "")
	if m, err := firstReply(t, bystander, hello("raw-bystander", 1)); err != nil || m.GetWelcome() == nil {
		t.Fatalf("bystander: got %v, %v; want a Welcome", m, err)
	}
	tests := []struct {
		name   string
		shard  string
		flood  func(i int) *kshardv1.ShardMessage
		n      int // well above the burst at a rate no refill keeps up with
		reason string
	}{
		{name: "heartbeats in a tight loop", shard: "raw-heartbeats", reason: "heartbeat_rate", n: 2000,
			flood: func(i int) *kshardv1.ShardMessage { return heartbeat(1, uint64(i+1)) }},
		{name: "partition reports nobody asked for", shard: "raw-reports", reason: "partition_report_rate", n: 20 * partitions * coordinatorrpc.PartitionReportBurstPerPartition,
			flood: func(int) *kshardv1.ShardMessage { return prepared(1) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			refused := testutil.ToFloat64(co.metrics.Refused.WithLabelValues(tc.reason))
			stream, _ := rawStream(t, co.addr, insecureClient(t), "")
			if m, err := firstReply(t, stream, hello(tc.shard, 1)); err != nil || m.GetWelcome() == nil {
				t.Fatalf("got %v, %v; want a Welcome", m, err)
			}
			msgs := make([]*kshardv1.ShardMessage, tc.n)
			for i := range msgs {
				msgs[i] = tc.flood(i)
			}
			_, err := sendAll(t, stream, msgs...)
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("the flood's stream ended with %v, want ResourceExhausted", err)
			}
			if n := testutil.ToFloat64(co.metrics.Refused.WithLabelValues(tc.reason)); n != refused+1 {
				t.Errorf("refused{reason=%s} went from %v to %v, want +1", tc.reason, refused, n)
			}
		})
	}
	// The bystander's session is still open: its heartbeat is acknowledged (commands
	// for the partitions it was given may come first; a SessionEnded may not).
	if err := bystander.Send(heartbeat(1, 1)); err != nil {
		t.Fatalf("bystander heartbeat: %v", err)
	}
	for {
		m, err := bystander.Recv()
		if err != nil || m.GetSessionEnded() != nil {
			t.Fatalf("bystander: %v, %v after the floods; want its session open and its heartbeat acknowledged", m, err)
		}
		if m.GetAck() != nil {
			break
		}
	}
}

package shardauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	ns       = "kshard-system"
	saName   = "kshard-shard"
	shardID  = "kshard-shard-7d9f-abcde"
	shardUID = "0b6e3c1e-uid"
)

var shardUser = ServiceAccountUser(ns, saName)

// fakeAPI answers TokenReviews from a table of tokens, like the API server would for
// tokens of the configured audience, and records what it was asked.
type fakeAPI struct {
	mu        sync.Mutex
	statuses  map[string]authenticationv1.TokenReviewStatus
	err       error
	calls     int
	audiences [][]string
}

func newFakeAPI() (*fakeAPI, *fake.Clientset) {
	f := &fakeAPI{statuses: map[string]authenticationv1.TokenReviewStatus{}}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls++
		f.audiences = append(f.audiences, tr.Spec.Audiences)
		if f.err != nil {
			return true, nil, f.err
		}
		st, ok := f.statuses[tr.Spec.Token]
		if !ok {
			st = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		tr.Status = st
		return true, tr, nil
	})
	return f, cs
}

func (f *fakeAPI) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// podToken is the review of a pod-bound token of user for pod name (no extra when name is
// empty).
func podToken(user, name string, audiences ...string) authenticationv1.TokenReviewStatus {
	if len(audiences) == 0 {
		audiences = []string{DefaultAudience}
	}
	st := authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: audiences,
		User: authenticationv1.UserInfo{Username: user, Extra: map[string]authenticationv1.ExtraValue{}}}
	if name != "" {
		st.User.Extra[ExtraPodName] = authenticationv1.ExtraValue{name}
		st.User.Extra[ExtraPodUID] = authenticationv1.ExtraValue{shardUID}
	}
	return st
}

// jwt is a token shaped like the API server's (header.claims.signature) expiring at exp;
// only its claims matter here.
func jwt(id string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d,"jti":%q}`, exp.Unix(), id))) + ".c2ln"
}

func withToken(tok string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, BearerPrefix+tok))
}

func TestTokenReview(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(time.Hour)
	tests := []struct {
		name       string
		status     *authenticationv1.TokenReviewStatus // nil: the token is unknown (not authenticated)
		apiErr     error
		ctx        context.Context // default: the token in the authorization metadata
		claimed    string
		wantCode   codes.Code
		wantReason string
	}{
		{name: "the shard's own pod", status: new(podToken(shardUser, shardID)), claimed: shardID},
		{name: "another shard's ID", status: new(podToken(shardUser, shardID)), claimed: "kshard-shard-other",
			wantCode: codes.PermissionDenied, wantReason: ReasonPodNameMismatch},
		{name: "another ServiceAccount", status: new(podToken(ServiceAccountUser(ns, "default"), shardID)), claimed: shardID,
			wantCode: codes.PermissionDenied, wantReason: ReasonWrongServiceAccount},
		{name: "the ServiceAccount of another namespace", status: new(podToken(ServiceAccountUser("other", saName), shardID)), claimed: shardID,
			wantCode: codes.PermissionDenied, wantReason: ReasonWrongServiceAccount},
		{name: "a token not bound to a pod", status: new(podToken(shardUser, "")), claimed: shardID,
			wantCode: codes.PermissionDenied, wantReason: ReasonNoPodName},
		{name: "two pod names", status: func() *authenticationv1.TokenReviewStatus {
			st := podToken(shardUser, shardID)
			st.User.Extra[ExtraPodName] = authenticationv1.ExtraValue{shardID, "kshard-shard-other"}
			return &st
		}(), claimed: shardID, wantCode: codes.PermissionDenied, wantReason: ReasonNoPodName},
		{name: "not authenticated", claimed: shardID, wantCode: codes.Unauthenticated, wantReason: ReasonInvalidToken},
		{name: "audience not confirmed", status: new(podToken(shardUser, shardID, "https://kubernetes.default.svc")), claimed: shardID,
			wantCode: codes.Unauthenticated, wantReason: ReasonAudience},
		{name: "no audience in the answer", status: func() *authenticationv1.TokenReviewStatus {
			st := podToken(shardUser, shardID)
			st.Audiences = nil
			return &st
		}(), claimed: shardID, wantCode: codes.Unauthenticated, wantReason: ReasonAudience},
		{name: "API server unreachable", apiErr: errors.New("connection refused"), claimed: shardID,
			wantCode: codes.Unavailable, wantReason: ReasonReviewFailed},
		{name: "no token", ctx: context.Background(), claimed: shardID, wantCode: codes.Unauthenticated, wantReason: ReasonMissingToken},
		{name: "not a bearer token", ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "Basic dXNlcg==")),
			claimed: shardID, wantCode: codes.Unauthenticated, wantReason: ReasonMalformedToken},
		{name: "two tokens", ctx: metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "Bearer a", MetadataKey, "Bearer b")),
			claimed: shardID, wantCode: codes.Unauthenticated, wantReason: ReasonMalformedToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api, cs := newFakeAPI()
			tok := jwt(tc.name, exp)
			if tc.status != nil {
				api.statuses[tok] = *tc.status
			}
			api.err = tc.apiErr
			a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := tc.ctx
			if ctx == nil {
				ctx = withToken(tok)
			}
			id, err := a.Authenticate(ctx, tc.claimed)
			if tc.wantCode == codes.OK {
				if err != nil {
					t.Fatalf("Authenticate = %v, want accepted", err)
				}
				want := Identity{Shard: tc.claimed, User: shardUser, PodUID: shardUID, Verified: true}
				if id != want {
					t.Errorf("identity %+v, want %+v", id, want)
				}
				return
			}
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("Authenticate = %v (%T), want an *Error", err, err)
			}
			if ae.Reason != tc.wantReason || status.Code(err) != tc.wantCode {
				t.Errorf("refused with %s/%s (%v), want %s/%s", status.Code(err), ae.Reason, err, tc.wantCode, tc.wantReason)
			}
		})
	}
}

// TestTokenReviewAsksForTheAudience: the review names the configured audience, so the API
// server refuses a token issued for anything else (e.g. the default API audience).
func TestTokenReviewAsksForTheAudience(t *testing.T) {
	for _, tc := range []struct {
		name, audience, want string
	}{
		{name: "default", want: DefaultAudience},
		{name: "configured", audience: "kshard-coordinator.example", want: "kshard-coordinator.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, cs := newFakeAPI()
			tok := jwt("t", time.Now().Add(time.Hour))
			api.statuses[tok] = podToken(shardUser, shardID, tc.want)
			a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Audience: tc.audience, Namespace: ns, Name: saName})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Authenticate(withToken(tok), shardID); err != nil {
				t.Fatal(err)
			}
			if len(api.audiences) != 1 || strings.Join(api.audiences[0], ",") != tc.want {
				t.Errorf("reviews asked for audiences %v, want [[%s]]", api.audiences, tc.want)
			}
		})
	}
}

// TestTokenReviewCache: a Hello flood with one token costs one TokenReview while the
// review is fresh; the cached review still checks the claimed ID; it is not used past the
// cache TTL nor past the token's own expiry; failures are not cached.
func TestTokenReviewCache(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name      string
		tokenLife time.Duration // until the token's exp
		advance   time.Duration // clock moved before the second round of hellos
		wantCalls int           // reviews after both rounds
	}{
		{name: "fresh review reused", tokenLife: time.Hour, advance: 5 * time.Second, wantCalls: 1},
		{name: "review older than the cache TTL", tokenLife: time.Hour, advance: 11 * time.Second, wantCalls: 2},
		// Not reviewed again: an expired token is refused before the review.
		{name: "token expired before the cache TTL", tokenLife: 3 * time.Second, advance: 4 * time.Second, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api, cs := newFakeAPI()
			now := start
			tok := jwt("t", start.Add(tc.tokenLife))
			api.statuses[tok] = podToken(shardUser, shardID)
			a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName,
				CacheTTL: 10 * time.Second, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			for range 50 {
				if _, err := a.Authenticate(withToken(tok), shardID); err != nil {
					t.Fatal(err)
				}
			}
			if n := api.callCount(); n != 1 {
				t.Fatalf("50 hellos cost %d reviews, want 1", n)
			}
			// The cached review is of the token, not of the claim.
			if _, err := a.Authenticate(withToken(tok), "kshard-shard-other"); status.Code(err) != codes.PermissionDenied {
				t.Errorf("a cached token claiming another shard: %v, want PermissionDenied", err)
			}
			now = now.Add(tc.advance)
			_, err = a.Authenticate(withToken(tok), shardID)
			if expired := tc.advance >= tc.tokenLife; expired != (status.Code(err) == codes.Unauthenticated) {
				t.Errorf("after %s (token life %s): %v", tc.advance, tc.tokenLife, err)
			}
			if n := api.callCount(); n != tc.wantCalls {
				t.Errorf("%d reviews after %s, want %d", n, tc.advance, tc.wantCalls)
			}
		})
	}

	t.Run("refusals are not cached", func(t *testing.T) {
		api, cs := newFakeAPI()
		tok := jwt("t", time.Now().Add(time.Hour))
		a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Authenticate(withToken(tok), shardID); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("unknown token: %v", err)
		}
		api.mu.Lock()
		api.statuses[tok] = podToken(shardUser, shardID) // e.g. the API server caught up
		api.mu.Unlock()
		if _, err := a.Authenticate(withToken(tok), shardID); err != nil {
			t.Errorf("after the token became valid: %v", err)
		}
	})

	t.Run("bounded", func(t *testing.T) {
		api, cs := newFakeAPI()
		a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName, CacheSize: 3, ReviewBurst: 100})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			tok := jwt(fmt.Sprint(i), time.Now().Add(time.Hour))
			api.statuses[tok] = podToken(shardUser, shardID)
			if _, err := a.Authenticate(withToken(tok), shardID); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(a.cache.Keys()); n > 3 {
			t.Errorf("%d cached reviews, want at most 3", n)
		}
	})
}

// TestTokenReviewJunk: tokens that are not unexpired JWTs are refused without a review,
// so a client flooding junk tokens cannot spend the review budget the shards share.
func TestTokenReviewJunk(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name string
		tok  string
	}{
		{name: "not a JWT", tok: "opaque-secret"},
		{name: "bad payload", tok: "a.!!!.c"},
		{name: "expired", tok: jwt("old", now.Add(-time.Second))},
		{name: "no expiry", tok: "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api, cs := newFakeAPI()
			a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName,
				ReviewRate: 1, ReviewBurst: 1, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				if _, err := a.Authenticate(withToken(tc.tok), shardID); status.Code(err) != codes.Unauthenticated {
					t.Fatalf("junk token: %v, want Unauthenticated", err)
				}
			}
			if n := api.callCount(); n != 0 {
				t.Errorf("%d reviews of junk tokens, want 0", n)
			}
			good := jwt("good", now.Add(time.Hour))
			api.statuses[good] = podToken(shardUser, shardID)
			if _, err := a.Authenticate(withToken(good), shardID); err != nil {
				t.Errorf("a real shard after the junk: %v (the budget must be untouched)", err)
			}
		})
	}
}

// TestTokenReviewRateLimit: Hellos with ever new tokens cannot make the coordinator send
// more TokenReviews than its budget; cached tokens are not affected.
func TestTokenReviewRateLimit(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	api, cs := newFakeAPI()
	good := jwt("good", now.Add(time.Hour))
	api.statuses[good] = podToken(shardUser, shardID)
	a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName,
		ReviewRate: 1, ReviewBurst: 3, PeerReviewBurst: 100, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(withToken(good), shardID); err != nil {
		t.Fatal(err)
	}
	throttled := 0
	for i := range 20 {
		_, err := a.Authenticate(withToken(jwt(fmt.Sprint("junk", i), now.Add(time.Hour))), shardID)
		var ae *Error
		if errors.As(err, &ae) && ae.Reason == ReasonReviewThrottled {
			throttled++
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("throttled with %v, want ResourceExhausted", status.Code(err))
			}
		}
	}
	if n := api.callCount(); n != 3 || throttled != 18 {
		t.Errorf("%d reviews and %d throttled of 21 hellos, want 3 and 18", n, throttled)
	}
	if _, err := a.Authenticate(withToken(good), shardID); err != nil {
		t.Errorf("the cached token while reviews are throttled: %v", err)
	}
}

// fromPeer is ctx as the stream of a client at ip.
func fromPeer(ctx context.Context, ip string) context.Context {
	return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}})
}

// TestTokenReviewPerPeer: well-formed junk tokens from one address (a client holding a
// valid client certificate) spend only that address's share of the review budget, before
// the shared budget: the real shards, each at its own address, are still reviewed after
// a failover. The table of addresses stays bounded.
func TestTokenReviewPerPeer(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name        string
		junk        int    // junk tokens sent from the attacker's address first
		shardFrom   string // the real shard's address
		maxPeers    int
		wantShardOK bool
		wantReason  string // the real shard's refusal
		wantReviews int    // reviews of junk tokens
	}{
		{name: "junk from one address leaves the shared budget to the others", junk: 200, shardFrom: "10.0.0.2", wantShardOK: true, wantReviews: 4},
		{name: "the attacker's own address is throttled", junk: 200, shardFrom: "10.0.0.66", wantReason: ReasonPeerReviewThrottled, wantReviews: 4},
		{name: "no junk", shardFrom: "10.0.0.2", wantShardOK: true},
		{name: "more addresses than remembered", junk: 200, shardFrom: "10.0.0.2", maxPeers: 1, wantReason: ReasonPeerReviewThrottled, wantReviews: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			api, cs := newFakeAPI()
			a, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns, Name: saName,
				ReviewRate: 1, ReviewBurst: 20, PeerReviewRate: 0.01, PeerReviewBurst: 4, MaxPeers: tc.maxPeers,
				Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.junk {
				_, err := a.Authenticate(fromPeer(withToken(jwt(fmt.Sprint("junk", i), now.Add(time.Hour))), "10.0.0.66"), shardID)
				if status.Code(err) == codes.OK {
					t.Fatal("a junk token was accepted")
				}
			}
			if n := api.callCount(); n != tc.wantReviews {
				t.Errorf("%d junk tokens cost %d reviews, want %d", tc.junk, n, tc.wantReviews)
			}
			good := jwt("good", now.Add(time.Hour))
			api.mu.Lock()
			api.statuses[good] = podToken(shardUser, shardID)
			api.mu.Unlock()
			_, err = a.Authenticate(fromPeer(withToken(good), tc.shardFrom), shardID)
			if tc.wantShardOK {
				if err != nil {
					t.Errorf("the real shard after the junk: %v", err)
				}
			} else {
				var ae *Error
				if !errors.As(err, &ae) || ae.Reason != tc.wantReason || status.Code(err) != codes.ResourceExhausted {
					t.Errorf("the real shard: %v, want ResourceExhausted/%s", err, tc.wantReason)
				}
			}
			if n, max := a.peers.Len(), max(tc.maxPeers, 0); max > 0 && n > max {
				t.Errorf("%d addresses remembered, bound %d", n, max)
			}
		})
	}
}

func TestNewTokenReviewNeedsServiceAccount(t *testing.T) {
	_, cs := newFakeAPI()
	if _, err := NewTokenReview(TokenReviewOptions{Client: cs.AuthenticationV1(), Namespace: ns}); err == nil {
		t.Error("NewTokenReview without the ServiceAccount's name succeeded")
	}
}

func TestInsecureTakesTheClaim(t *testing.T) {
	id, err := Insecure{}.Authenticate(context.Background(), shardID)
	if err != nil || id != (Identity{Shard: shardID}) {
		t.Errorf("Insecure = %+v, %v", id, err)
	}
}

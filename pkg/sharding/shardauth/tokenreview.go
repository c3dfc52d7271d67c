package shardauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	utilcache "k8s.io/apimachinery/pkg/util/cache"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"google.golang.org/grpc/codes"

	"github.com/kshard/kshard/pkg/sharding/peerlimit"
)

// Defaults of TokenReviewOptions.
const (
	// DefaultCacheTTL is how long a positive review is reused. Short, because a cached
	// review outlives the deletion of its pod by at most this long (the API server would
	// refuse the token of a deleted pod at once).
	DefaultCacheTTL = 10 * time.Second
	// DefaultCacheSize bounds the cached reviews (one per live shard token is enough).
	DefaultCacheSize = 4096
	// DefaultReviewTimeout bounds one TokenReview call.
	DefaultReviewTimeout = 10 * time.Second
	// DefaultReviewRate and DefaultReviewBurst bound uncached TokenReviews across all
	// callers, so that Hellos with fresh junk tokens cannot turn the coordinator into a
	// load generator against the API server. The burst should cover every shard at once:
	// a new leader starts with an empty cache and the whole fleet says Hello to it within
	// a second, and a shard throttled here waits out a backoff while its lease runs.
	DefaultReviewRate  = 50.0
	DefaultReviewBurst = 1000
	// DefaultPeerReviewRate and DefaultPeerReviewBurst bound the uncached TokenReviews
	// one peer (its IP address, peerlimit.Key) may spend of that budget, before it is
	// spent: a shard needs one review per token (reused for CacheTTL), so a burst of 16 is
	// room for a few shards behind one address, and one a second for them to reconnect.
	// A client holding a valid client certificate and sending well-formed junk tokens from
	// one address spends at most that, far below DefaultReviewRate: it takes some 50
	// addresses to starve the real shards after a failover.
	DefaultPeerReviewRate  = 1.0
	DefaultPeerReviewBurst = 16
	// DefaultMaxPeers bounds the peers whose review budget is remembered; a peer's entry
	// is dropped once its budget has refilled, when room is needed.
	DefaultMaxPeers = 4096
)

// TokenReviewOptions configure TokenReview.
type TokenReviewOptions struct {
	// Client creates TokenReviews (clientset.AuthenticationV1()); the coordinator needs
	// create on tokenreviews.authentication.k8s.io.
	Client authenticationv1client.TokenReviewsGetter
	// Audience the shards' tokens must be issued for; DefaultAudience when empty.
	Audience string
	// Namespace and Name of the shards' ServiceAccount: the only user accepted.
	Namespace, Name string
	// CacheTTL, CacheSize, ReviewTimeout, ReviewRate and ReviewBurst default to the
	// constants above.
	CacheTTL      time.Duration
	CacheSize     int
	ReviewTimeout time.Duration
	ReviewRate    float64
	ReviewBurst   int
	// PeerReviewRate, PeerReviewBurst and MaxPeers bound one peer's share of the review
	// budget; they default to the constants above.
	PeerReviewRate  float64
	PeerReviewBurst int
	MaxPeers        int
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

// TokenReview authenticates shards by their pod-bound ServiceAccount tokens.
type TokenReview struct {
	opts TokenReviewOptions
	user string

	cache   *utilcache.LRUExpireCache // sha256 of the token → reviewed, until min(CacheTTL, its expiry)
	limiter *rate.Limiter
	peers   *peerlimit.Buckets // each peer's share of limiter, taken first
}

// reviewed is the part of a positive review the checks need.
type reviewed struct {
	user     string
	podNames []string
	podUID   string
}

// clockFunc adapts TokenReviewOptions.Now to the cache's clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// NewTokenReview validates the options.
func NewTokenReview(opts TokenReviewOptions) (*TokenReview, error) {
	if opts.Client == nil {
		return nil, errors.New("shardauth: TokenReviewOptions.Client is required")
	}
	if opts.Namespace == "" || opts.Name == "" {
		return nil, errors.New("shardauth: the shard ServiceAccount's namespace and name are required")
	}
	if opts.Audience == "" {
		opts.Audience = DefaultAudience
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.ReviewTimeout <= 0 {
		opts.ReviewTimeout = DefaultReviewTimeout
	}
	if opts.ReviewRate <= 0 {
		opts.ReviewRate = DefaultReviewRate
	}
	if opts.ReviewBurst <= 0 {
		opts.ReviewBurst = DefaultReviewBurst
	}
	if opts.PeerReviewRate <= 0 {
		opts.PeerReviewRate = DefaultPeerReviewRate
	}
	if opts.PeerReviewBurst <= 0 {
		opts.PeerReviewBurst = DefaultPeerReviewBurst
	}
	if opts.MaxPeers <= 0 {
		opts.MaxPeers = DefaultMaxPeers
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &TokenReview{opts: opts, user: ServiceAccountUser(opts.Namespace, opts.Name),
		cache:   utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, clockFunc(opts.Now)),
		limiter: rate.NewLimiter(rate.Limit(opts.ReviewRate), opts.ReviewBurst),
		peers:   peerlimit.NewBuckets(opts.PeerReviewRate, opts.PeerReviewBurst, opts.MaxPeers)}, nil
}

// ServiceAccountUser is the user name the API server gives a ServiceAccount's tokens.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Authenticate reviews the stream's bearer token (or reuses a recent review of it) and
// accepts it only for the shard ServiceAccount and a pod named claimed.
func (a *TokenReview) Authenticate(ctx context.Context, claimed string) (Identity, error) {
	tok, err := BearerToken(ctx)
	if err != nil {
		return Identity{}, err
	}
	r, err := a.review(ctx, tok)
	if err != nil {
		return Identity{}, err
	}
	if r.user != a.user {
		return Identity{}, refuse(codes.PermissionDenied, ReasonWrongServiceAccount,
			"the token authenticates %q, but only the shard ServiceAccount %q may open sessions", r.user, a.user)
	}
	switch {
	case len(r.podNames) == 0:
		return Identity{}, refuse(codes.PermissionDenied, ReasonNoPodName,
			"the token of %q is not bound to a pod (no %s extra): mount a projected ServiceAccount token, not a Secret-based one", r.user, ExtraPodName)
	case len(r.podNames) > 1:
		return Identity{}, refuse(codes.PermissionDenied, ReasonNoPodName, "the token has %d %s values, want one", len(r.podNames), ExtraPodName)
	case r.podNames[0] != claimed:
		return Identity{}, refuse(codes.PermissionDenied, ReasonPodNameMismatch,
			"the token is bound to pod %q, but the hello claims shard %q: a shard's ID must be its pod name", r.podNames[0], claimed)
	}
	return Identity{Shard: claimed, User: r.user, PodUID: r.podUID, Verified: true}, nil
}

func (a *TokenReview) review(ctx context.Context, tok string) (reviewed, error) {
	key := sha256.Sum256([]byte(tok))
	now := a.opts.Now()
	if r, ok := a.cache.Get(key); ok {
		return r.(reviewed), nil
	}
	// A shard's projected token is a JWT with an expiry. Anything else, or one that has
	// expired, is refused here without spending the review budget that every shard shares
	// (the claim is not verified: this only ever refuses).
	exp, ok := jwtExpiry(tok)
	if !ok || !now.Before(exp) {
		return reviewed{}, refuse(codes.Unauthenticated, ReasonInvalidToken,
			"the shard's token is not an unexpired JWT (a projected ServiceAccount token is)")
	}
	// The peer's share first: one peer must not spend what every shard shares.
	if ok, full := a.peers.Allow(peerlimit.Key(ctx), now); !ok {
		if full {
			return reviewed{}, refuse(codes.ResourceExhausted, ReasonPeerReviewThrottled,
				"too many peers (%d) spending token reviews at once: try again later", a.opts.MaxPeers)
		}
		return reviewed{}, refuse(codes.ResourceExhausted, ReasonPeerReviewThrottled,
			"too many token reviews from this address (more than %d at once, then %g/s): try again later", a.opts.PeerReviewBurst, a.opts.PeerReviewRate)
	}
	if !a.limiter.AllowN(now, 1) {
		return reviewed{}, refuse(codes.ResourceExhausted, ReasonReviewThrottled,
			"too many token reviews (more than %g/s): try again later", a.opts.ReviewRate)
	}

	rctx, cancel := context.WithTimeout(ctx, a.opts.ReviewTimeout)
	defer cancel()
	res, err := a.opts.Client.TokenReviews().Create(rctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{a.opts.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return reviewed{}, refuse(codes.Unavailable, ReasonReviewFailed, "cannot review the shard's token: %v", err)
	}
	st := res.Status
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "not authenticated"
		}
		return reviewed{}, refuse(codes.Unauthenticated, ReasonInvalidToken,
			"the API server refused the shard's token for audience %q: %s", a.opts.Audience, msg)
	}
	// An audience-aware authenticator names the audience it checked; one that does not
	// (returns none) might have accepted a token meant for someone else.
	if !slices.Contains(st.Audiences, a.opts.Audience) {
		return reviewed{}, refuse(codes.Unauthenticated, ReasonAudience,
			"the token review did not confirm audience %q (got %v)", a.opts.Audience, st.Audiences)
	}
	r := reviewed{user: st.User.Username, podNames: st.User.Extra[ExtraPodName]}
	if uids := st.User.Extra[ExtraPodUID]; len(uids) == 1 {
		r.podUID = uids[0]
	}
	// Reuse the review for CacheTTL, never past the token's own expiry.
	a.cache.Add(key, r, min(a.opts.CacheTTL, exp.Sub(now)))
	return r, nil
}

// jwtExpiry reads the exp claim of a JWT without verifying it: it is trusted only to
// refuse a token before its review and to bound the cache of one the API server accepted.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	sec, err := claims.Exp.Int64()
	if err != nil {
		f, ferr := claims.Exp.Float64()
		if ferr != nil {
			return time.Time{}, false
		}
		sec = int64(f)
	}
	return time.Unix(sec, 0), true
}

// Audiences reads the aud claim of a JWT (a string or a list) without verifying it: the
// coordinator uses it on its own ServiceAccount token to learn the API server's
// audiences, which the shards' audience must not be. ok is false for a token that is not
// a JWT with an aud claim.
func Audiences(tok string) (auds []string, ok bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, false
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || len(claims.Aud) == 0 {
		return nil, false
	}
	var one string
	if err := json.Unmarshal(claims.Aud, &one); err == nil {
		return []string{one}, true
	}
	if err := json.Unmarshal(claims.Aud, &auds); err == nil {
		return auds, true
	}
	return nil, false
}

// String names the mode for logs.
func (a *TokenReview) String() string {
	return fmt.Sprintf("TokenReview(user %s, audience %s)", a.user, a.opts.Audience)
}

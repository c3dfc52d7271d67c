package shardauth

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Metadata of the session stream that carries the shard's token. "authorization" with a
// "Bearer " value is what gRPC's own OAuth credentials send, so proxies and logs that
// know to redact it do.
const (
	MetadataKey  = "authorization"
	BearerPrefix = "Bearer "
)

// Extras the API server puts into the user info of a pod-bound ServiceAccount token.
const (
	ExtraPodName = "authentication.kubernetes.io/pod-name"
	ExtraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// DefaultAudience is the audience of the shards' projected tokens. A token with this
// audience is refused by the API server itself (its audiences differ), so a leaked one can
// only be shown to the coordinator, not used against the cluster.
const DefaultAudience = "kshard-coordinator"

// Identity is who is at the other end of a session stream.
type Identity struct {
	// Shard is the shard ID the stream may speak for: every message on the stream is
	// bound to it.
	Shard string
	// User is the authenticated user name ("" when nothing was verified).
	User string
	// PodUID is the UID of the pod the token is bound to, for logs ("" when unknown).
	PodUID string
	// Verified is false for Insecure, which takes the claimed ID on trust.
	Verified bool
}

// Authenticator verifies a session stream's credentials against the shard ID its Hello
// claims. ctx is the stream's context (its incoming metadata carries the credentials).
// A refusal is an *Error.
type Authenticator interface {
	Authenticate(ctx context.Context, claimed string) (Identity, error)
}

// Reasons of refusals; they label the coordinator's auth metric.
const (
	ReasonMissingToken        = "missing_token"
	ReasonMalformedToken      = "malformed_token"
	ReasonInvalidToken        = "invalid_token"
	ReasonAudience            = "wrong_audience"
	ReasonWrongServiceAccount = "wrong_service_account"
	ReasonNoPodName           = "no_pod_name"
	ReasonPodNameMismatch     = "pod_name_mismatch"
	ReasonReviewFailed        = "review_failed"
	ReasonReviewThrottled     = "review_throttled"
	ReasonPeerReviewThrottled = "peer_review_throttled"
)

// Error is a refused authentication: the gRPC code the stream ends with, a short reason
// for the metric and a message that tells the operator what to fix.
type Error struct {
	Code   codes.Code
	Reason string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// GRPCStatus makes the refusal the stream's status as it is.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

func refuse(code codes.Code, reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Insecure takes the claimed shard ID on trust. It is for local development and tests
// without pod-bound tokens only: any client that reaches the port can be any shard.
type Insecure struct{}

// Authenticate accepts the claim.
func (Insecure) Authenticate(_ context.Context, claimed string) (Identity, error) {
	return Identity{Shard: claimed}, nil
}

// BearerToken returns the token of the stream's authorization metadata.
func BearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch {
	case len(vals) == 0:
		return "", refuse(codes.Unauthenticated, ReasonMissingToken,
			"the session carries no bearer token: run the shard with --coordinator-token-file pointing at its projected ServiceAccount token")
	case len(vals) > 1:
		return "", refuse(codes.Unauthenticated, ReasonMalformedToken, "the session carries %d authorization values, want one", len(vals))
	}
	tok, ok := strings.CutPrefix(vals[0], BearerPrefix)
	tok = strings.TrimSpace(tok)
	if !ok || tok == "" {
		return "", refuse(codes.Unauthenticated, ReasonMalformedToken, "the authorization metadata is not %q followed by a token", BearerPrefix)
	}
	return tok, nil
}

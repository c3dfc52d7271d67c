package shardauth

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// TokenFile is the shard's side: gRPC per-RPC credentials that send the token in Path as
// "authorization: Bearer <token>". The file is read for every session stream (one RPC),
// because the kubelet rewrites a projected token before it expires; a long-lived shard
// that read it once would be refused after an hour.
type TokenFile struct {
	Path string
	// AllowInsecure lets the token go over a plaintext connection. Only for local
	// development with --grpc-insecure: anyone on the path could replay the token to the
	// coordinator (not to the API server, whose audiences differ).
	AllowInsecure bool
}

// GetRequestMetadata reads the token.
func (t TokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	b, err := os.ReadFile(t.Path)
	if err != nil {
		return nil, fmt.Errorf("reading the coordinator token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("the coordinator token file %s is empty", t.Path)
	}
	return map[string]string{MetadataKey: BearerPrefix + tok}, nil
}

// RequireTransportSecurity makes gRPC refuse to send the token over plaintext unless
// AllowInsecure.
func (t TokenFile) RequireTransportSecurity() bool { return !t.AllowInsecure }

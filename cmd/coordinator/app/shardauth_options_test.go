package app

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/sharding/shardauth"
)

func TestShardAuthOptions(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantErr  string // "" for valid
		wantAuth any    // the Authenticator's type when valid
	}{
		{name: "token mode needs the ServiceAccount", wantErr: "--shard-service-account"},
		{name: "token mode", args: []string{"--shard-service-account=kshard-system/kshard-shard"}, wantAuth: &shardauth.TokenReview{}},
		{name: "ServiceAccount without namespace", args: []string{"--shard-service-account=kshard-shard"}, wantErr: "namespace/name"},
		{name: "ServiceAccount with an invalid namespace", args: []string{"--shard-service-account=Kshard_System/kshard-shard"}, wantErr: "namespace/name"},
		{name: "empty audience", args: []string{"--shard-service-account=ns/sa", "--shard-token-audience="}, wantErr: "--shard-token-audience"},
		{name: "the API server's default audience", args: []string{"--shard-service-account=ns/sa", "--shard-token-audience=https://kubernetes.default.svc"},
			wantErr: `--shard-token-audience="https://kubernetes.default.svc" is an audience the Kubernetes API server accepts`},
		{name: "kubeadm's audience with a trailing slash", args: []string{"--shard-service-account=ns/sa", "--shard-token-audience=https://kubernetes.default.svc.cluster.local/"},
			wantErr: `--shard-token-audience="https://kubernetes.default.svc.cluster.local/" is an audience the Kubernetes API server accepts`},
		{name: "k3s's audience", args: []string{"--shard-service-account=ns/sa", "--shard-token-audience=k3s"}, wantErr: `--shard-token-audience="k3s"`},
		{name: "an audience of the coordinator's own", args: []string{"--shard-service-account=ns/sa", "--shard-token-audience=kshard-coordinator.example.com"}, wantAuth: &shardauth.TokenReview{}},
		{name: "none, explicitly", args: []string{"--shard-auth=none"}, wantAuth: shardauth.Insecure{}},
		{name: "unknown mode", args: []string{"--shard-auth=mtls"}, wantErr: `want "token" or "none"`},
		{name: "no shards", args: []string{"--shard-auth=none", "--max-shards=0"}, wantErr: "--max-shards"},
		{name: "no shard per address", args: []string{"--shard-auth=none", "--max-shards-per-address=0"}, wantErr: "--max-shards-per-address=0 must be from 1 to --max-shards=1000"},
		{name: "more shards per address than shards", args: []string{"--shard-auth=none", "--max-shards=10", "--max-shards-per-address=11"}, wantErr: "--max-shards-per-address=11 must be from 1 to --max-shards=10"},
		{name: "many shards behind one address", args: []string{"--shard-auth=none", "--max-shards-per-address=200"}, wantAuth: shardauth.Insecure{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewShardAuthOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			a, err := o.authenticator(fake.NewClientset().AuthenticationV1(), logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			g, err := o.groupVerifier(fake.NewClientset().CoreV1())
			if err != nil {
				t.Fatal(err)
			}
			switch tc.wantAuth.(type) {
			case *shardauth.TokenReview:
				if _, ok := a.(*shardauth.TokenReview); !ok {
					t.Errorf("authenticator %T, want *shardauth.TokenReview", a)
				}
				// The group a hello claims is checked against the token's pod.
				if _, ok := g.(*shardauth.PodGroups); !ok {
					t.Errorf("group verifier %T, want *shardauth.PodGroups", g)
				}
			case shardauth.Insecure:
				if _, ok := a.(shardauth.Insecure); !ok {
					t.Errorf("authenticator %T, want shardauth.Insecure", a)
				}
				// Without identities, the group is trusted as the ID is.
				if g != nil {
					t.Errorf("group verifier %T with --shard-auth=none, want none", g)
				}
			}
		})
	}
}

// TestValidateChecksShardAuth: the command's Validate runs the block's checks, so a
// coordinator started without --shard-service-account (token mode by default) refuses to
// start instead of serving unverified shards.
func TestValidateChecksShardAuth(t *testing.T) {
	o := NewOptions()
	o.AdvertiseAddress = "127.0.0.1:9090"
	o.TLS.Insecure = true
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--shard-service-account") {
		t.Fatalf("Validate() = %v, want it to ask for --shard-service-account", err)
	}
	o.ShardAuth.ServiceAccount = "kshard-system/kshard-shard"
	if err := o.Validate(); err != nil {
		t.Errorf("Validate() with the ServiceAccount = %v", err)
	}
}

// TestAPIAudienceRefused: the coordinator learns the API server's audiences from its own
// ServiceAccount token (issued for them) and refuses a --shard-token-audience among them,
// whatever issuer the cluster has; other tokens say nothing.
func TestAPIAudienceRefused(t *testing.T) {
	jwt := func(aud string) string {
		enc := base64.RawURLEncoding.EncodeToString
		return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"aud":`+aud+`,"exp":4102444800}`)) + ".c2ln"
	}
	tests := []struct {
		name     string
		token    string // the coordinator's own token
		file     bool   // given as a file (in-cluster), else inline (a kubeconfig)
		audience string
		wantErr  string
	}{
		{name: "the issuer of a cloud cluster, from the token file", token: jwt(`["https://oidc.example.com/id/ABC"]`), file: true,
			audience: "https://oidc.example.com/id/ABC", wantErr: `--shard-token-audience="https://oidc.example.com/id/ABC" is an audience of the API server`},
		{name: "a single aud string", token: jwt(`"api.example"`), audience: "api.example", wantErr: `--shard-token-audience="api.example"`},
		{name: "the default audience is not the API server's", token: jwt(`["https://oidc.example.com/id/ABC"]`), file: true, audience: shardauth.DefaultAudience},
		{name: "a static token says nothing", token: "static-token", audience: "api.example"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &rest.Config{Host: "https://127.0.0.1:6443"}
			if tc.file {
				cfg.BearerTokenFile = filepath.Join(t.TempDir(), "token")
				if err := os.WriteFile(cfg.BearerTokenFile, []byte(tc.token+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				cfg.BearerToken = tc.token
			}
			o := NewShardAuthOptions()
			o.ServiceAccount, o.Audience = "kshard-system/kshard-shard", tc.audience
			_, err := o.Authenticator(cfg, logr.Discard())
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Authenticator() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Authenticator() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

package app

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"

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
		{name: "none, explicitly", args: []string{"--shard-auth=none"}, wantAuth: shardauth.Insecure{}},
		{name: "unknown mode", args: []string{"--shard-auth=mtls"}, wantErr: `want "token" or "none"`},
		{name: "no shards", args: []string{"--shard-auth=none", "--max-shards=0"}, wantErr: "--max-shards"},
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
			switch tc.wantAuth.(type) {
			case *shardauth.TokenReview:
				if _, ok := a.(*shardauth.TokenReview); !ok {
					t.Errorf("authenticator %T, want *shardauth.TokenReview", a)
				}
			case shardauth.Insecure:
				if _, ok := a.(shardauth.Insecure); !ok {
					t.Errorf("authenticator %T, want shardauth.Insecure", a)
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

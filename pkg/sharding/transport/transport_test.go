package transport

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kshard/kshard/test/testpki"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    TLSOptions
		server  bool
		wantErr string
	}{
		{name: "server plaintext asked", opts: TLSOptions{Insecure: true}, server: true},
		{name: "server nothing set", server: true, wantErr: "needs --grpc-tls-cert-file"},
		{name: "server cert only", opts: TLSOptions{CertFile: "c"}, server: true, wantErr: "go together"},
		{name: "server mtls", opts: TLSOptions{CertFile: "c", KeyFile: "k", CAFile: "ca"}, server: true},
		{name: "server tls without client ca", opts: TLSOptions{CertFile: "c", KeyFile: "k"}, server: true, wantErr: "--grpc-tls-client-ca-file"},
		{name: "server ca only", opts: TLSOptions{CAFile: "ca"}, server: true, wantErr: "needs --grpc-tls-cert-file"},
		{name: "client needs ca", opts: TLSOptions{CertFile: "c", KeyFile: "k"}, wantErr: "--grpc-tls-ca-file"},
		{name: "insecure and files", opts: TLSOptions{Insecure: true, CAFile: "ca"}, wantErr: "contradicts"},
		{name: "client tls", opts: TLSOptions{CAFile: "ca"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate(tc.server, "grpc-")
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestServerCredentialsRequireClientCA: a TLS server without a client CA is refused, not
// quietly served with server-only TLS that any client could reach.
func TestServerCredentialsRequireClientCA(t *testing.T) {
	pki := testpki.New(t)
	if _, err := ServerCredentials(TLSOptions{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}); err == nil || !strings.Contains(err.Error(), "client CA") {
		t.Fatalf("ServerCredentials without a client CA = %v, want an error naming the client CA", err)
	}
}

func TestMutualTLS(t *testing.T) {
	pki := testpki.New(t)
	other := testpki.New(t) // a second, unrelated CA

	creds, err := ServerCredentials(TLSOptions{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CA})
	must(t, err)
	srv := grpc.NewServer(append(ServerOptions(), grpc.Creds(creds))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	tests := []struct {
		name   string
		opts   TLSOptions
		wantOK bool
	}{
		{name: "client certificate from the CA", opts: TLSOptions{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, CAFile: pki.CA}, wantOK: true},
		{name: "no client certificate", opts: TLSOptions{CAFile: pki.CA}},
		{name: "certificate from another CA", opts: TLSOptions{CertFile: other.ClientCert, KeyFile: other.ClientKey, CAFile: pki.CA}},
		{name: "plaintext", opts: TLSOptions{Insecure: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := ClientCredentials(tc.opts)
			must(t, err)
			conn, err := grpc.NewClient(l.Addr().String(), append(DialOptions(), grpc.WithTransportCredentials(cc))...)
			must(t, err)
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if (err == nil) != tc.wantOK {
				t.Fatalf("health check error = %v, want ok=%v", err, tc.wantOK)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

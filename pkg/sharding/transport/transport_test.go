package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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

// writePair writes a certificate signed by parent (self-signed when parent is nil).
func writePair(t *testing.T, dir, name string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  isCA,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	must(t, os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writePair(t, dir, "ca", true, nil, nil)
	writePair(t, dir, "server", false, ca, caKey)
	writePair(t, dir, "client", false, ca, caKey)
	writePair(t, dir, "stranger", true, nil, nil)
	p := func(n string) string { return filepath.Join(dir, n) }

	creds, err := ServerCredentials(TLSOptions{CertFile: p("server.crt"), KeyFile: p("server.key"), CAFile: p("ca.crt")})
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
		{name: "client certificate from the CA", opts: TLSOptions{CertFile: p("client.crt"), KeyFile: p("client.key"), CAFile: p("ca.crt")}, wantOK: true},
		{name: "no client certificate", opts: TLSOptions{CAFile: p("ca.crt")}},
		{name: "certificate from another CA", opts: TLSOptions{CertFile: p("stranger.crt"), KeyFile: p("stranger.key"), CAFile: p("ca.crt")}},
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

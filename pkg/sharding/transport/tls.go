package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSOptions are the certificate flags of one side of the session.
type TLSOptions struct {
	// CertFile and KeyFile are this side's certificate: the server's serving certificate,
	// or the shard's client certificate for mutual TLS.
	CertFile, KeyFile string
	// CAFile verifies the peer: on the server it makes client certificates mandatory
	// (mutual TLS), and a server with TLS requires it; on the client it verifies the server.
	CAFile string
	// ServerName overrides the name the client expects in the server certificate.
	ServerName string
	// Insecure selects plaintext. It must be asked for explicitly.
	Insecure bool
}

// AddFlags registers the flags with the given prefix (e.g. "grpc-").
func (o *TLSOptions) AddFlags(fs *pflag.FlagSet, prefix string, server bool) {
	if server {
		fs.StringVar(&o.CertFile, prefix+"tls-cert-file", o.CertFile, "serving certificate (PEM) of the gRPC session server")
		fs.StringVar(&o.KeyFile, prefix+"tls-private-key-file", o.KeyFile, "private key (PEM) of --"+prefix+"tls-cert-file")
		fs.StringVar(&o.CAFile, prefix+"tls-client-ca-file", o.CAFile, "CA bundle (PEM) that client certificates must chain to (mutual TLS); required with TLS")
		fs.BoolVar(&o.Insecure, prefix+"insecure", o.Insecure, "serve plaintext gRPC (no TLS): only for local development")
		return
	}
	fs.StringVar(&o.CertFile, prefix+"tls-cert-file", o.CertFile, "client certificate (PEM) for mutual TLS with the coordinator")
	fs.StringVar(&o.KeyFile, prefix+"tls-private-key-file", o.KeyFile, "private key (PEM) of --"+prefix+"tls-cert-file")
	fs.StringVar(&o.CAFile, prefix+"tls-ca-file", o.CAFile, "CA bundle (PEM) that verifies the coordinator's certificate")
	fs.StringVar(&o.ServerName, prefix+"tls-server-name", o.ServerName, "name expected in the coordinator's certificate (default: the host of the address)")
	fs.BoolVar(&o.Insecure, prefix+"insecure", o.Insecure, "connect with plaintext gRPC (no TLS): only for local development")
}

// Validate checks that the options select one coherent mode.
func (o TLSOptions) Validate(server bool, prefix string) error {
	hasTLS := o.CertFile != "" || o.KeyFile != "" || o.CAFile != ""
	switch {
	case o.Insecure && hasTLS:
		return fmt.Errorf("--%sinsecure contradicts the TLS file flags: choose one", prefix)
	case o.Insecure:
		return nil
	case (o.CertFile == "") != (o.KeyFile == ""):
		return fmt.Errorf("--%stls-cert-file and --%stls-private-key-file go together", prefix, prefix)
	case server && o.CertFile == "":
		return fmt.Errorf("the gRPC server needs --%stls-cert-file and --%stls-private-key-file, or --%sinsecure for plaintext", prefix, prefix, prefix)
	case server && o.CAFile == "":
		// Server-only TLS would let any client that reaches the port open sessions: the
		// shard's certificate is the first gate, its token (shardauth) the second.
		return fmt.Errorf("the gRPC server with TLS needs --%stls-client-ca-file: shards must present a client certificate (mutual TLS)", prefix)
	case !server && o.CAFile == "":
		return fmt.Errorf("the gRPC client needs --%stls-ca-file to verify the coordinator, or --%sinsecure for plaintext", prefix, prefix)
	}
	return nil
}

// ServerCredentials builds the server's transport credentials.
func ServerCredentials(o TLSOptions) (credentials.TransportCredentials, error) {
	if o.Insecure {
		return insecure.NewCredentials(), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	// Read the key pair per handshake so a rotated certificate (cert-manager) is picked up
	// without a restart.
	if _, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile); err != nil {
		return nil, fmt.Errorf("loading serving certificate: %w", err)
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		return &c, err
	}
	if o.CAFile == "" {
		return nil, errors.New("the gRPC server with TLS needs a client CA: shards must present a client certificate (mutual TLS)")
	}
	pool, err := loadPool(o.CAFile)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	return credentials.NewTLS(cfg), nil
}

// ClientCredentials builds the shard's transport credentials.
func ClientCredentials(o TLSOptions) (credentials.TransportCredentials, error) {
	if o.Insecure {
		return insecure.NewCredentials(), nil
	}
	pool, err := loadPool(o.CAFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: o.ServerName}
	if o.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile); err != nil {
			return nil, fmt.Errorf("loading client certificate: %w", err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
			return &c, err
		}
	}
	return credentials.NewTLS(cfg), nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("CA bundle " + file + " holds no PEM certificate")
	}
	return pool, nil
}

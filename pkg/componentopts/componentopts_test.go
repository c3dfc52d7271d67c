package componentopts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

// TestRESTConfigContentType: built-in types travel as protobuf unless the flag says JSON,
// and responses uncompressed, as in kube-controller-manager (client-go alone would send
// and ask for JSON, gzipped).
func TestRESTConfigContentType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                     string
		args                     []string
		wantContent, wantAccepts string
	}{
		{name: "default is protobuf, JSON still accepted", wantContent: "application/vnd.kubernetes.protobuf",
			wantAccepts: "application/vnd.kubernetes.protobuf,application/json"},
		{name: "JSON", args: []string{"--kube-api-content-type=application/json"}, wantContent: "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCommon()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			c.AddFlags(fs, "metrics")
			if err := fs.Parse(append([]string{"--kubeconfig=" + path}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			cfg, err := c.RESTConfig("kshard-test")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ContentType != tt.wantContent || cfg.AcceptContentTypes != tt.wantAccepts || cfg.UserAgent != "kshard-test" || !cfg.DisableCompression {
				t.Errorf("RESTConfig() content type %q, accepts %q, user agent %q, compression disabled %t; want %q, %q, kshard-test, true",
					cfg.ContentType, cfg.AcceptContentTypes, cfg.UserAgent, cfg.DisableCompression, tt.wantContent, tt.wantAccepts)
			}
		})
	}
}

func TestValidateHostPort(t *testing.T) {
	tests := []struct {
		name, value string
		wantErr     string // "" for valid
	}{
		{name: "IPv4", value: "10.0.0.1:9090"},
		{name: "IPv6", value: "[fd00::1]:9090"},
		{name: "DNS name", value: "kshard-coordinator.kshard-system.svc:9090"},
		{name: "upper-case DNS name", value: "Coordinator.Example.com:9090"},
		{name: "space in the host, port out of range", value: "a b:99999", wantErr: `--addr="a b:99999": the host "a b" is neither an IP address nor a DNS name`},
		{name: "colons only", value: "::::", wantErr: `--addr="::::": want host:port`},
		{name: "no port", value: "10.0.0.1", wantErr: "want host:port"},
		{name: "empty host", value: ":9090", wantErr: "the host is empty"},
		{name: "port zero", value: "10.0.0.1:0", wantErr: `the port "0" is not a number from 1 to 65535`},
		{name: "named port", value: "10.0.0.1:grpc", wantErr: `the port "grpc"`},
		{name: "underscore in the host", value: "my_host:9090", wantErr: "neither an IP address nor a DNS name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateHostPort("addr", tt.value)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateHostPort(%q) = %v", tt.value, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ValidateHostPort(%q) = %v, want an error containing %q", tt.value, err, tt.wantErr)
			}
		})
	}
}

func TestValidateWorkers(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		wantErr bool
	}{
		{name: "one", n: 1},
		{name: "the bound", n: MaxWorkers},
		{name: "zero", n: 0, wantErr: true},
		{name: "negative", n: -1, wantErr: true},
		{name: "beyond the bound", n: MaxWorkers + 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateWorkers("concurrent-x-syncs", tt.n)
			if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), "--concurrent-x-syncs=")) {
				t.Errorf("ValidateWorkers(%d) = %v, want an error %t naming the flag", tt.n, err, tt.wantErr)
			}
		})
	}
}

package componentopts

import (
	"os"
	"path/filepath"
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

package componentopts

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/logging"
)

// DefaultHTTPBindAddress is where /metrics, /livez and /readyz are served by default.
const DefaultHTTPBindAddress = ":8080"

// Common are the flags of both binaries.
type Common struct {
	Kubeconfig      string
	HTTPBindAddress string
	EnablePprof     bool
	Logging         *logging.Options
}

// NewCommon returns the defaults.
func NewCommon() Common {
	return Common{HTTPBindAddress: DefaultHTTPBindAddress, Logging: logging.NewOptions()}
}

// PodIdentity is a replica's default name: $POD_NAME (set by the Helm chart from the
// downward API), else the host name, lower-cased as Kubernetes names are.
func PodIdentity() string {
	id := os.Getenv("POD_NAME")
	if id == "" {
		id, _ = os.Hostname()
	}
	return strings.ToLower(id)
}

// AddFlags registers the common flags; httpWhat lists what the HTTP endpoint serves.
func (c *Common) AddFlags(fs *pflag.FlagSet, httpWhat string) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "path to a kubeconfig; empty means in-cluster configuration")
	fs.StringVar(&c.HTTPBindAddress, "http-bind-address", c.HTTPBindAddress, "address of "+httpWhat)
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve /debug/pprof on the HTTP port")
	c.Logging.AddFlags(fs)
}

// Validate reports bad common flags.
func (c *Common) Validate() error { return c.Logging.Validate() }

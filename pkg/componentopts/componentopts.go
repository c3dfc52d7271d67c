package componentopts

import (
	"errors"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/kubeclient"
	"github.com/kshard/kshard/pkg/logging"
)

// DefaultHTTPBindAddress is where /metrics, /livez and /readyz are served by default.
const DefaultHTTPBindAddress = ":8080"

// Common are the flags of both binaries.
type Common struct {
	Kubeconfig string
	// KubeAPIContentType is kube-controller-manager's --kube-api-content-type: the
	// encoding of requests and responses of built-in types (protobuf by default).
	KubeAPIContentType string
	HTTPBindAddress    string
	EnablePprof        bool
	Logging            *logging.Options
}

// NewCommon returns the defaults.
func NewCommon() Common {
	return Common{KubeAPIContentType: kubeclient.DefaultContentType, HTTPBindAddress: DefaultHTTPBindAddress, Logging: logging.NewOptions()}
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
	fs.StringVar(&c.KubeAPIContentType, "kube-api-content-type", c.KubeAPIContentType, "content type of requests sent to the API server for built-in types "+
		"(application/vnd.kubernetes.protobuf or application/json); custom resources always use JSON")
	fs.StringVar(&c.HTTPBindAddress, "http-bind-address", c.HTTPBindAddress, "address of "+httpWhat)
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve /debug/pprof on the HTTP port")
	c.Logging.AddFlags(fs)
}

// Validate reports bad common flags.
func (c *Common) Validate() error {
	return errors.Join(kubeclient.ValidateContentType("kube-api-content-type", c.KubeAPIContentType), c.Logging.Validate())
}

// RESTConfig returns the client configuration of c's --kubeconfig (in-cluster when
// empty) with c's content type and the given user agent.
func (c *Common) RESTConfig(userAgent string) (*rest.Config, error) {
	cfg, err := kubeclient.Config(c.Kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	kubeclient.SetContentType(cfg, c.KubeAPIContentType)
	return cfg, nil
}

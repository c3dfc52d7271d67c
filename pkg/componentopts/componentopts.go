package componentopts

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
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

// ValidateHostPort checks that value, the value of --flag, is host:port as a peer dials
// it: the host an IP address or a DNS name (RFC 1123), the port a number from 1 to
// 65535. net.SplitHostPort alone takes "a b:99999", which only fails when the address is
// first dialled, far from the flag that caused it (or, advertised, at every shard).
func ValidateHostPort(flag, value string) error {
	host, port, err := net.SplitHostPort(value)
	if err != nil {
		return fmt.Errorf("--%s=%q: want host:port: %w", flag, value, err)
	}
	var errs []string
	if host == "" {
		errs = append(errs, "the host is empty")
	} else if net.ParseIP(host) == nil {
		if msgs := validation.IsDNS1123Subdomain(strings.ToLower(host)); len(msgs) > 0 {
			errs = append(errs, fmt.Sprintf("the host %q is neither an IP address nor a DNS name: %s", host, strings.Join(msgs, "; ")))
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs = append(errs, fmt.Sprintf("the port %q is not a number from 1 to 65535", port))
	}
	if len(errs) > 0 {
		return fmt.Errorf("--%s=%q: %s", flag, value, strings.Join(errs, "; "))
	}
	return nil
}

// MaxWorkers bounds every worker-count flag (--concurrent-…-syncs, --warmup-concurrency).
// kube-controller-manager's defaults are 1 to 20 (--concurrent-gc-syncs; most are 5, the
// namespace controller's 10), and a shard's requests are capped by --kube-api-qps anyway,
// so workers far beyond that only queue behind the rate limiter while each holds a
// goroutine and its objects; 1000 leaves 50 times the largest default and refuses a
// slipped digit (10000, 100000) that would start that many goroutines per controller.
const MaxWorkers = 1000

// ValidateWithin checks that n, the value of --flag, is from lo to hi, with
// kube-controller-manager's message for its bounded controller flags ("… must not be less
// than 1, but got 0"), so that a flag kshard shares with it fails with the same words.
func ValidateWithin(flag string, n, lo, hi int) error {
	switch {
	case n < lo:
		return fmt.Errorf("%s must not be less than %d, but got %d", flag, lo, n)
	case n > hi:
		return fmt.Errorf("%s must not be more than %d, but got %d", flag, hi, n)
	}
	return nil
}

// ValidateWorkers checks that n, the value of --flag, is from 1 to MaxWorkers.
func ValidateWorkers(flag string, n int) error {
	if n < 1 || n > MaxWorkers {
		return fmt.Errorf("--%s=%d must be from 1 to %d", flag, n, MaxWorkers)
	}
	return nil
}

package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/controllers"
)

// KCM is an upstream kube-controller-manager a test started beside the cluster's own,
// running only the controllers it was given (and the HousekeepingControllers the cluster's
// own does not run, unless KCMOptions.NoHousekeeping): the reference side of a benchmark on the
// same control plane as kshard's runs, so that both load the same API server.
type KCM struct {
	*Process
	// URL is the https address of its secure port; /healthz, /readyz and /metrics are
	// served there without credentials.
	URL string
}

// KCMOptions configure StartKCM.
type KCMOptions struct {
	// Controllers is the --controllers list (e.g. "deployment,replicaset").
	Controllers []string
	// Args are added to the flags (e.g. --kube-api-qps=20); flags not given keep
	// kube-controller-manager's defaults.
	Args []string
	// NoHousekeeping runs exactly Controllers, without the HousekeepingControllers the
	// cluster's kube-controller-manager does not run, which StartKCM otherwise adds (as
	// StartShard does for shards): without them no pod can be created in a namespace the
	// test makes.
	NoHousekeeping bool
}

// StartKCM starts the kube-controller-manager built by `make tools` against f's control
// plane, with the cluster's kube-controller-manager credentials, its own service account
// per controller (--use-service-account-credentials, as hack/cluster.sh runs it, so that
// every controller has its own client and rate limiter), no leader election, and a
// secure port of its own. It waits until /healthz answers; the process is killed when the
// test ends. The caller makes sure no other process runs the same controllers on f.
func (f *Framework) StartKCM(t testing.TB, name string, opts KCMOptions) *KCM {
	t.Helper()
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "tools.sh"), "path", "kube-controller-manager").Output()
	if err != nil {
		t.Fatalf("locating kube-controller-manager (make tools): %v", err)
	}
	bin := strings.TrimSpace(string(out))
	dir := f.ClusterDir()
	kubeconfig := filepath.Join(dir, "kube-controller-manager.kubeconfig")
	port := FreePort(t)
	list := slices.Clone(opts.Controllers)
	if !opts.NoHousekeeping {
		for _, n := range f.missingHousekeeping() {
			named := func(e string) bool { return controllers.SameController(strings.TrimPrefix(e, "-"), n) }
			if !slices.ContainsFunc(list, named) {
				list = append(list, n)
			}
		}
	}
	args := []string{
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--leader-elect=false",
		"--controllers=" + strings.Join(list, ","),
		"--use-service-account-credentials=true",
		"--root-ca-file=" + filepath.Join(dir, "pki", "ca.crt"),
		"--requestheader-client-ca-file=" + filepath.Join(dir, "pki", "front-proxy-ca.crt"),
	}
	k := &KCM{Process: Start(t, name, bin, append(args, opts.Args...)...), URL: fmt.Sprintf("https://127.0.0.1:%d", port)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _, err := k.get(context.Background(), "/healthz")
		if err == nil && code == http.StatusOK {
			return k
		}
		if k.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not become healthy (last: %d %v); see %s", name, code, err, k.LogPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Metrics scrapes the process's /metrics.
func (k *KCM) Metrics(ctx context.Context) (Samples, error) {
	code, body, err := k.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: HTTP %d", k.URL, code)
	}
	return ParseMetrics(string(body)), nil
}

var insecureClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	// The secure port serves a self-signed certificate made at start-up.
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, test-only
}}

func (k *KCM) get(ctx context.Context, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.URL+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := insecureClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

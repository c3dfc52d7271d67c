package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kshard/kshard/pkg/controllers"
)

// UpstreamKubeconfigEnv names the variable that points the tests at an already running
// reference control plane instead of hack/cluster-upstream.sh's.
const UpstreamKubeconfigEnv = "KSHARD_UPSTREAM_KUBECONFIG"

var (
	upstreamOnce sync.Once
	upstream     *Framework
	upstreamErr  error
)

// Upstream returns a Framework connected to the reference control plane: a second local
// cluster (hack/cluster-upstream.sh, apiserver on 27443) whose kube-controller-manager
// runs every upstream controller. Differential tests and benchmarks compare kshard
// against it. Like Main does for the default cluster, it starts the reference cluster when
// it is not up (it never stops it: hack/test-integration.sh stops what it started), and
// fails the test when the cluster cannot be reached or does not run all of upstream's
// controllers.
func Upstream(t testing.TB) *Framework {
	t.Helper()
	upstreamOnce.Do(func() { upstream, upstreamErr = connectUpstream() })
	if upstreamErr != nil {
		t.Fatalf("the reference control plane (hack/cluster-upstream.sh): %v", upstreamErr)
	}
	return upstream
}

func connectUpstream() (*Framework, error) {
	script := filepath.Join(RepoRoot(), "hack", "cluster-upstream.sh")
	kubeconfig := os.Getenv(UpstreamKubeconfigEnv)
	explicit := kubeconfig != ""
	if !explicit {
		out, err := exec.Command(script, "env").Output()
		if err != nil {
			return nil, fmt.Errorf("%s env: %w", script, err)
		}
		kubeconfig = strings.TrimPrefix(strings.TrimSpace(string(out)), "KUBECONFIG=")
	}
	f, err := newFramework(kubeconfig)
	if err != nil {
		if explicit {
			return nil, fmt.Errorf("cluster of %s=%s is not reachable: %w", UpstreamKubeconfigEnv, kubeconfig, err)
		}
		cmd := exec.Command(script, "up")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s up: %w", script, err)
		}
		if f, err = newFramework(kubeconfig); err != nil {
			return nil, err
		}
	}
	ctrls, err := f.KCMControllers()
	if err != nil {
		return nil, err
	}
	if ctrls != "*" {
		return nil, fmt.Errorf("its kube-controller-manager runs --controllers=%s; the reference needs every upstream controller (*)", ctrls)
	}
	return f, nil
}

// ClusterDir is the folder hack/cluster.sh keeps the cluster's files in (the kubeconfig's
// folder): logs/, run/<process>.pid, kcm-controllers.
func (f *Framework) ClusterDir() string { return filepath.Dir(f.Kubeconfig) }

// KCMControllers returns the --controllers value the cluster's kube-controller-manager
// was started with, as hack/cluster.sh recorded it.
func (f *Framework) KCMControllers() (string, error) {
	b, err := os.ReadFile(filepath.Join(f.ClusterDir(), "kcm-controllers"))
	if err != nil {
		return "", fmt.Errorf("which controllers kube-controller-manager runs is unknown: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// KCMRuns reports whether the cluster's kube-controller-manager runs controller name
// (given --controllers as "*,-foo,bar"). Both name and the record may name a controller by
// kube-controller-manager's canonical name or its alias (controllers.Selection).
func (f *Framework) KCMRuns(name string) (bool, error) {
	list, err := f.KCMControllers()
	if err != nil {
		return false, err
	}
	var sel controllers.Selection
	for _, c := range strings.Split(list, ",") {
		sel = append(sel, strings.TrimSpace(c))
	}
	return sel.Enabled(name, true), nil
}

// ComponentPid returns the pid of a control plane process hack/cluster.sh started
// (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok), checking that
// the pid still runs that binary.
func (f *Framework) ComponentPid(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(f.ClusterDir(), "run", name+".pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file of %s: %w", name, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), name) {
		return 0, fmt.Errorf("%s (pid %d) is not running", name, pid)
	}
	return pid, nil
}

// RequireKCMWithout fails t unless the cluster's kube-controller-manager runs none of the
// named controllers, so that kshard's are the only ones working their objects.
func (f *Framework) RequireKCMWithout(t testing.TB, names ...string) {
	t.Helper()
	for _, c := range names {
		on, err := f.KCMRuns(c)
		if err != nil {
			t.Fatal(err)
		}
		if on {
			t.Fatalf("%s: kube-controller-manager runs the %s controller, so kshard's would not be the only one: restart it with hack/cluster.sh up", f.ClusterDir(), c)
		}
	}
}

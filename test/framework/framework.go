package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// SkipEnv names the variable that skips integration tests on purpose.
	SkipEnv = "KSHARD_SKIP_INTEGRATION"
	// RunLabel marks every namespace a test run creates, so leftovers can be found.
	RunLabel = "kshard.io/e2e-run"
)

// Framework is a connection to the local control plane shared by the tests of a package.
type Framework struct {
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string
	// Config is the admin REST config, with QPS raised for tests.
	Config *rest.Config
	// Client is an admin clientset.
	Client kubernetes.Interface
	// RunID is unique per test binary run and labels its namespaces.
	RunID string
}

var shared *Framework

// RepoRoot returns the repository's top folder, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Main is TestMain for integration test packages: it connects to (or starts) the local
// control plane, runs the tests and exits. It exits non-zero when the control plane cannot
// be reached, unless KSHARD_SKIP_INTEGRATION=1.
//
// When the tests are done it waits until no namespace is left Terminating
// (finishNamespaces), starting a kshard that runs the namespace controller for that when
// the cluster's kube-controller-manager does not; a namespace still Terminating after
// finishNamespacesTimeout fails the binary.
func Main(m *testing.M) {
	f := connectForMain()
	shared = f
	os.Exit(finishNamespacesAfter(f, "TestMain-"+strings.TrimSuffix(filepath.Base(os.Args[0]), ".test"), m.Run))
}

// connectForMain connects TestMain to the control plane, or exits: 0 when
// KSHARD_SKIP_INTEGRATION=1, 1 when the control plane cannot be reached.
func connectForMain() *Framework {
	if os.Getenv(SkipEnv) == "1" {
		fmt.Fprintf(os.Stderr, "integration tests skipped: %s=1\n", SkipEnv)
		os.Exit(0)
	}
	f, err := connect()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration tests need the local control plane: %v\n"+
			"start it with 'make cluster-up', or set %s=1 to skip on purpose\n", err, SkipEnv)
		os.Exit(1)
	}
	return f
}

// Get returns the package's framework; only valid in tests of a package whose TestMain
// calls Main.
func Get(t testing.TB) *Framework {
	t.Helper()
	if shared == nil {
		t.Fatal("framework.Get called without framework.Main in TestMain")
	}
	return shared
}

// connect reuses a running control plane or starts one through hack/cluster.sh.
func connect() (*Framework, error) {
	kubeconfig := os.Getenv("KSHARD_KUBECONFIG")
	if kubeconfig == "" {
		out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "cluster.sh"), "env").Output()
		if err != nil {
			return nil, fmt.Errorf("hack/cluster.sh env: %w", err)
		}
		kubeconfig = strings.TrimPrefix(strings.TrimSpace(string(out)), "KUBECONFIG=")
	}
	if f, err := newFramework(kubeconfig); err == nil {
		return f, nil
	}
	if os.Getenv("KSHARD_KUBECONFIG") != "" {
		// An explicitly named cluster is not ours to start.
		_, err := newFramework(kubeconfig)
		return nil, fmt.Errorf("cluster of KSHARD_KUBECONFIG=%s is not reachable: %w", kubeconfig, err)
	}
	cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "cluster.sh"), "up")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hack/cluster.sh up: %w", err)
	}
	return newFramework(kubeconfig)
}

func newFramework(kubeconfig string) (*Framework, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, fmt.Errorf("apiserver not ready: %w", err)
	}
	return &Framework{Kubeconfig: kubeconfig, Config: cfg, Client: cs, RunID: rand.String(6)}, nil
}

// Namespace creates a namespace for this test, named after it, and deletes it when the
// test ends. Extra labels are added to the namespace.
func (f *Framework) Namespace(t testing.TB, labels map[string]string) *corev1.Namespace {
	t.Helper()
	ns, err := f.createNamespace(t, metav1.ObjectMeta{GenerateName: namePrefix(t.Name())}, labels)
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns
}

// createNamespace creates a namespace of meta with the run's label and labels, deleted
// when t ends.
func (f *Framework) createNamespace(t testing.TB, meta metav1.ObjectMeta, labels map[string]string) (*corev1.Namespace, error) {
	meta.Labels = map[string]string{RunLabel: f.RunID}
	for k, v := range labels {
		meta.Labels[k] = v
	}
	ns, err := f.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: meta}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { f.DeleteNamespace(t, ns.Name) })
	return ns, nil
}

// WaitDefaultServiceAccount waits until namespace has its default ServiceAccount: a test
// that creates pods itself right after creating the namespace would otherwise race the
// serviceaccount controller, and the API server refuses pods without it.
func (f *Framework) WaitDefaultServiceAccount(t testing.TB, namespace string) {
	t.Helper()
	Eventually(t, 60*time.Second, "namespace "+namespace+" has its default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := f.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// DeleteNamespace deletes a namespace without waiting for its finalization, which the
// namespace controller does in the background.
func (f *Framework) DeleteNamespace(t testing.TB, name string) {
	t.Helper()
	err := f.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", name, err)
	}
}

// Eventually polls cond (Poll) and fails the test with what and the last error after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Poll calls cond every 200ms until it returns true without an error, and returns nil;
// after timeout it returns an error naming the last error cond returned. cond's error
// says why it is not true yet (a poll that errs is not done, whatever it returns). For a
// caller that reports the failure itself: with t.Errorf and more to log, or not at all.
func Poll(timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true,
		func(ctx context.Context) (bool, error) {
			ok, err := cond(ctx)
			if err != nil {
				// An error of the attempt the timeout cut short says only that: keep
				// the one before it, which says why the condition was not yet true.
				if last == nil || ctx.Err() == nil {
					last = err
				}
				return false, nil
			}
			return ok, nil
		})
	if err != nil {
		return fmt.Errorf("not true after %s (last error: %v)", timeout, last)
	}
	return nil
}

// namePrefix turns a test name into a valid namespace generateName prefix.
func namePrefix(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return "e2e-" + s + "-"
}

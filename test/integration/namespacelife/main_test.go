// Package namespacelife tests, end to end on the real local control plane, what every
// namespace gets as soon as it exists: the "default" ServiceAccount (the serviceaccount
// controller) and the kube-root-ca.crt ConfigMap (the root-ca-cert-publisher), created,
// repaired, put back after a delete, and not created in a terminating namespace; and how
// fast a new namespace gets both with three shards on a loaded cluster, including
// namespaces created while their partition moves to a fourth shard.
//
// As in test/integration/workloads, the tests run against whoever runs the controllers:
// TestMain starts kshard (one coordinator, three shards, with --root-ca-file naming a
// bundle of the cluster's CA and a CA of the test's own, so that the flag, not the
// fallback to the shards' client CA, is what is published) when the cluster's
// kube-controller-manager does not run them, and uses the cluster's otherwise. The
// latency test needs kshard and is skipped against the reference cluster.
package namespacelife

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/testpki"
)

// The controllers under test, as kube-controller-manager names them.
const (
	saController     = "serviceaccount"
	rootCAController = "root-ca-cert-publisher"
)

// kshardBundle is the --root-ca-file the package's shards were given, when kshard runs
// the root CA publisher.
var kshardBundle []byte

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{saController, rootCAController},
		Coordinators: 1,
		Shards:       3,
		ShardArgsFrom: func(t testing.TB, f *framework.Framework) ([]string, error) {
			clusterCA, err := os.ReadFile(filepath.Join(f.ClusterDir(), "pki", "ca.crt"))
			if err != nil {
				return nil, fmt.Errorf("the cluster's CA: %w", err)
			}
			extra, err := os.ReadFile(testpki.New(t).CA)
			if err != nil {
				return nil, err
			}
			kshardBundle = append(append(bytes.TrimRight(clusterCA, "\n"), '\n'), extra...)
			file := filepath.Join(t.TempDir(), "root-ca.crt")
			if err := os.WriteFile(file, kshardBundle, 0o600); err != nil {
				return nil, err
			}
			return []string{"--root-ca-file", file}, nil
		},
	})
}

// wantBundle returns the CA bundle kube-root-ca.crt must hold: the --root-ca-file of
// whoever runs the publisher (the package's shards, or the cluster's
// kube-controller-manager, whose flag is read from its command line).
func wantBundle(t *testing.T) []byte {
	t.Helper()
	c := framework.RunningControllers(t)
	if slices.Contains(c.ByKShard, rootCAController) {
		return kshardBundle
	}
	f := framework.Get(t)
	pid, err := f.ComponentPid("kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Split(string(cmdline), "\x00") {
		if file, ok := strings.CutPrefix(a, "--root-ca-file="); ok {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("kube-controller-manager (pid %d) runs without --root-ca-file", pid)
	return nil
}

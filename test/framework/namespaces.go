package framework

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceController is kube-controller-manager's name of the controller that finishes
// deleted namespaces.
const NamespaceController = "namespace"

// finishNamespacesTimeout bounds the wait at a test binary's end for deleted namespaces.
const finishNamespacesTimeout = 3 * time.Minute

// finishNamespaces waits, at the end of a test binary, until no namespace of the cluster
// is left Terminating, so that the next package starts on a cluster without the previous
// one's deleted namespaces (and their pods, Deployments, …). Once kshard runs the
// namespace controller the local kube-controller-manager does not, and a namespace a
// test deleted is finished only while some kshard runs it: running is the package's
// controllers (nil if none) when they include the namespace controller, else a kshard
// of one coordinator and one shard running only it is started for the wait. It returns
// how long the wait took, and an error naming what is still Terminating after
// finishNamespacesTimeout.
func finishNamespaces(t testing.TB, f *Framework, running *Controllers) (time.Duration, error) {
	start := time.Now()
	left, err := terminatingNamespaces(f)
	if err != nil || len(left) == 0 {
		return 0, err
	}
	if !namespaceControllerRuns(f, running) {
		k := f.NewKShard(t, KShardOptions{ShardArgs: []string{"--controllers", NamespaceController}})
		k.StartCoordinator("namespace-finisher-coordinator")
		k.StartShard("namespace-finisher-shard")
		defer k.KillAll()
	}
	ctx, cancel := context.WithTimeout(context.Background(), finishNamespacesTimeout)
	defer cancel()
	for {
		left, err = terminatingNamespaces(f)
		if err == nil && len(left) == 0 {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("namespaces still Terminating %s after the tests: %s (last error: %v)",
				finishNamespacesTimeout, strings.Join(left, "; "), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// namespaceControllerRuns reports whether the cluster's kube-controller-manager, or the
// package's running kshard, runs the namespace controller.
func namespaceControllerRuns(f *Framework, running *Controllers) bool {
	if os.Getenv(UpstreamControllersEnv) == "1" {
		return true
	}
	if on, err := f.KCMRuns(NamespaceController); err == nil && on {
		return true
	}
	if running == nil || running.KShard == nil || !slices.Contains(running.ByKShard, NamespaceController) {
		return false
	}
	return len(running.KShard.Live()) > 0
}

// terminatingNamespaces lists the cluster's namespaces being deleted, each with the
// message of its remaining-content conditions, sorted.
func terminatingNamespaces(f *Framework) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := f.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range list.Items {
		if ns.DeletionTimestamp == nil {
			continue
		}
		s := ns.Name
		for _, c := range ns.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				s += fmt.Sprintf(" [%s: %s]", c.Type, c.Message)
			}
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

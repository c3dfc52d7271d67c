package framework

import (
	"context"
	"fmt"
	"os"
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

// ownFinishTimeout bounds the wait for a package's own shards to finish its deleted
// namespaces (ControllersOptions.FinishNamespaces) before the finisher takes over.
const ownFinishTimeout = time.Minute

// finishNamespaces waits, at the end of a test binary (after the package's own kshard
// processes stopped and its cleanups deleted their namespaces), until no namespace of the
// cluster is left Terminating, so that the next package starts on a cluster without this
// one's deleted namespaces (and their pods, Deployments, …). Since kshard runs the
// namespace controller in place of the local kube-controller-manager, a deleted
// namespace is finished only while some kshard runs it: unless the cluster's
// kube-controller-manager does, a kshard of one coordinator and one shard running every
// kshard controller is started for the wait (the content of a namespace may wait for
// another controller's finalizer, as a Job's pods for the job controller's). It returns how long the wait took,
// and an error naming what is still Terminating after finishNamespacesTimeout.
func finishNamespaces(t testing.TB, f *Framework) (time.Duration, error) {
	start := time.Now()
	left, err := terminatingNamespaces(f)
	if err != nil || len(left) == 0 {
		return 0, err
	}
	if !kcmRunsNamespaceController(f) {
		// Every controller, not only the namespace controller: content may wait for
		// another's finalizer (a Job's pods for the job controller's tracking finalizer).
		k := f.NewKShard(t, KShardOptions{ShardArgs: []string{"--controllers", "*"}})
		k.StartCoordinator("namespace-finisher-coordinator")
		k.StartShard("namespace-finisher-shard")
		defer k.KillAll()
	}
	_, err = waitNamespacesFinished(f, finishNamespacesTimeout)
	return time.Since(start), err
}

// waitNamespacesFinished waits until no namespace of the cluster is Terminating, at most
// timeout, and returns how long it waited; the error names what is left.
func waitNamespacesFinished(f *Framework, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		left, err := terminatingNamespaces(f)
		if err == nil && len(left) == 0 {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("namespaces still Terminating %s after the tests: %s (last error: %v)",
				timeout, strings.Join(left, "; "), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// kcmRunsNamespaceController reports whether the cluster's kube-controller-manager runs
// the namespace controller (unknown counts as no: a second namespace controller does no
// harm, upstream's can run beside another that shares its finalizer).
func kcmRunsNamespaceController(f *Framework) bool {
	if os.Getenv(UpstreamControllersEnv) == "1" {
		return true
	}
	on, err := f.KCMRuns(NamespaceController)
	return err == nil && on
}

// finishNamespacesAfter runs body (a test binary's m.Run, with its cleanups) and then
// finishNamespaces, in a TestMain context of its own, and returns body's code, or 1 when
// namespaces were left Terminating.
func finishNamespacesAfter(f *Framework, name string, body func() int) int {
	code := body()
	tb := newMainTB(name + "-namespaces")
	if fin := tb.run(func() int {
		took, err := finishNamespaces(tb, f)
		if took > 0 {
			tb.Logf("waited %s for the namespaces deleted by the tests to be finished", took.Round(100*time.Millisecond))
		}
		if err != nil {
			tb.Fatalf("%v", err)
		}
		return 0
	}); fin != 0 && code == 0 {
		code = fin
	}
	return code
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

// Package hpa tests the horizontal pod autoscaler end to end on the real local control
// plane with its real metrics pipeline (hack/cluster.sh), and that pipeline itself
// (metrics_test.go: the values the HPA's own clients read back): metrics-server serving
// metrics.k8s.io from kwok's emulated kubelet resource metrics (a pod's CPU usage is its
// annotation kwok.x-k8s.io/usage-cpu), and the tests' metrics adapter serving
// custom.metrics.k8s.io and external.metrics.k8s.io from annotations and ConfigMaps
// (test/metricsadapter). TestMain starts kshard (one coordinator, two shards) running
// horizontalpodautoscaling, deployment and replicaset unless the cluster's
// kube-controller-manager runs them, with a sync period of 5 s and a scale-down window
// (for HPAs without behavior) of 60 s (--horizontal-pod-autoscaler-sync-period and
// -downscale-stabilization, upstream's flags) so that the tests wait less.
//
// Every test runs in parallel with every other: they spend their time waiting for
// metrics-server's scrapes and for windows, not computing. The handoff tests stop a shard
// each; they get shards of their own that join for them (claimVictim in handoff_test.go)
// and namespaces those shards own, so neither moves the other's namespace, and the other
// tests do not depend on which shard owns theirs.
package hpa

import (
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// syncPeriod is the shards' --horizontal-pod-autoscaler-sync-period, and
// downscaleWindow their --horizontal-pod-autoscaler-downscale-stabilization.
const (
	syncPeriod      = "5s"
	downscaleWindow = 60 * time.Second
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{"horizontalpodautoscaling", "deployment", "replicaset"},
		Coordinators: 1,
		Shards:       2,
		ShardArgs: []string{"--horizontal-pod-autoscaler-sync-period=" + syncPeriod,
			"--horizontal-pod-autoscaler-downscale-stabilization=" + downscaleWindow.String()},
		// Every test at once: a test waiting for its turn would add its waits to the
		// package's time.
		Parallel: 8,
		// The namespaces hold HPAs, Deployments, ReplicaSets, kwok's pods, ConfigMaps and
		// Events: nothing waits for a controller the shards do not run.
		FinishNamespaces: true,
	})
}

// Package workloadstress is the stress test of the workload controllers under sharding:
// shards run statefulset, daemonset, disruption (and pvc-protection and the garbage
// collector) while StatefulSets (OrderedReady and Parallel, RollingUpdate with a
// partition and with maxUnavailable), DaemonSets over tens of kwok nodes (RollingUpdate
// with maxSurge and with maxUnavailable) and PodDisruptionBudgets over the StatefulSets'
// pods (minAvailable and maxUnavailable, numbers and percentages) roll and change again
// and again, and the shard set is scaled out, scaled in, one shard is SIGKILLed and
// restarted. The invariants are checked at every instant the test's own watches observe
// (package invariant): never two pods of one StatefulSet ordinal, never more DaemonSet
// pods surging than maxSurge, never a budget's status above what some view of its
// healthy pods allows.
//
// It is skipped unless KSHARD_WORKLOAD_STRESS=1; `make workload-stress` runs it on the
// local control plane (about 10 minutes). Knobs: KSHARD_WORKLOAD_STRESS_NAMESPACES
// (default 24: one StatefulSet and one budget each), _NODES (30 kwok nodes of the test's
// own), _DAEMONSETS (6, in the first namespaces), _DURATION (8m of rollouts),
// _SEED (the drivers' random pauses). With KSHARD_UPSTREAM_CONTROLLERS=1, on a cluster
// whose kube-controller-manager runs every controller, it checks upstream's controllers
// the same way, without shards and their events.
package workloadstress

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

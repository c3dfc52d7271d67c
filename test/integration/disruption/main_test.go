// Package disruption tests the PodDisruptionBudget controller end to end on the real local
// control plane, where kwok makes pods Running and Ready (and fails those labelled
// kshard.io/kwok=fail): TestMain starts kshard (one coordinator, two shards) running
// disruption and the workload controllers the scenarios need (deployment, replicaset,
// replicationcontroller, statefulset) unless the cluster's kube-controller-manager runs
// them, so a StatefulSet's pods are real ones.
//
// The eviction checks go through the API server's eviction subresource, which decides
// from the status the controller writes; the drain check runs the real kubectl (hack/tools.sh
// path kubectl) against a kwok node of the test's own.
package disruption

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{"disruption", "deployment", "replicaset", "replicationcontroller", "statefulset"},
		Coordinators: 1,
		Shards:       2,
	})
}

// Package workloads tests the ReplicaSet, Deployment and ReplicationController behaviours
// end to end on the real local control plane, where kwok makes pods Running and Ready.
//
// The same tests run against upstream kube-controller-manager and against kshard: when the
// connected cluster's kube-controller-manager runs the replicaset, deployment and
// replicationcontroller controllers
// (hack/cluster-upstream.sh, or any cluster with KSHARD_UPSTREAM_CONTROLLERS=1) the tests
// use it; otherwise TestMain starts kshard (one coordinator, two shards running those
// controllers, and ResourceQuota, which the quota tests need) and stops it at the end. Point the tests at the reference cluster with
//
//	KSHARD_KUBECONFIG=$(hack/cluster-upstream.sh env | sed s/KUBECONFIG=//) go test ./test/integration/workloads/
//
// The kubectl tests run the real kubectl binary (hack/tools.sh path kubectl).
package workloads

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{"replicaset", "deployment", "replicationcontroller", "resourcequota"},
		Coordinators: 1,
		Shards:       2,
	})
}

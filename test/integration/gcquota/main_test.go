// Package gcquota tests the garbage collector and the ResourceQuota controller end to end
// on the real local control plane, against whoever runs them: TestMain starts kshard (one
// coordinator, three shards, so that a cluster-scoped owner's dependents live on several)
// for those the cluster's kube-controller-manager does not run. The Deployment and
// ReplicaSet controllers run too, for the three-level cascades. Point the tests at the
// reference cluster, where kube-controller-manager runs everything, with
//
//	KSHARD_UPSTREAM_CONTROLLERS=1 KSHARD_KUBECONFIG=$(hack/cluster-upstream.sh env | sed s/KUBECONFIG=//) go test ./test/integration/gcquota/
//
// The shards discover served resources every 2 s instead of 30 s
// (--served-discovery-period), so that the tests of a CRD created while they run do not
// wait half a minute; against upstream those tests wait up to its 30 s.
package gcquota

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		// The tests spend their time waiting for the controllers, not computing.
		Parallel:     8,
		Names:        []string{"garbagecollector", "resourcequota", "deployment", "replicaset", "pvc-protection"},
		Coordinators: 1,
		Shards:       3,
		ShardArgs:    []string{"--served-discovery-period=2s"},
	})
}

// Package volumes tests the PVC protection and ephemeral volume controllers end to end on
// the real local control plane, against whoever runs them: TestMain starts kshard (one
// coordinator, two shards) for those the cluster's kube-controller-manager does not run,
// with the garbage collector, which deletes an ephemeral volume's claim with its pod.
//
// The local control plane has no storage: a claim stays Pending unless a test binds it to
// a PersistentVolume of its own (hostPath, which the cluster's PV controller binds). A pod
// naming a Pending claim is never placed by the scheduler (its volume binding waits for
// the claim), so such pods are bound to a kwok node by spec.nodeName, as the scheduler
// would bind them; kwok's stages then run them. A pod of a Bound claim is scheduled onto
// the kwok nodes by the scheduler. Run them against the reference cluster, where
// kube-controller-manager runs everything, with KSHARD_UPSTREAM_CONTROLLERS=1 and
// KSHARD_KUBECONFIG pointing at it.
package volumes

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		// The tests spend their time waiting for the controllers, not computing.
		Parallel: 8,
		Names:    []string{"pvc-protection", "ephemeral-volume", "garbagecollector"},
		Shards:   2,
	})
}

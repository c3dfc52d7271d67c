// Package endpoints tests the controllers that keep a Service's endpoints (EndpointSlices,
// Endpoints, mirrored slices) end to end on the real local control plane, where kwok
// makes pods Running and Ready with pod IPs: TestMain starts kshard (one coordinator, two
// shards) running them, with the garbage collector that deletes a deleted Service's
// slices, unless the cluster's kube-controller-manager runs them.
//
// kshard's shards run with --max-endpoints-per-slice=3 so that a Service of a few pods is
// split over several slices; the tests read the limit from who runs the controller
// (upstream's default, 100, when the cluster's kube-controller-manager does). The tests
// but those that move a namespace between shards pass against upstream's controllers too
// (KSHARD_UPSTREAM_CONTROLLERS=1).
package endpoints

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{"endpointslice", "garbagecollector"},
		Coordinators: 1,
		Shards:       2,
		ShardArgs:    []string{"--max-endpoints-per-slice=3"},
		Parallel:     4,
	})
}

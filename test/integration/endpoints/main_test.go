// Package endpoints tests the controllers that keep a Service's endpoints (EndpointSlices,
// Endpoints, mirrored slices) end to end on the real local control plane: TestMain starts
// kshard (one coordinator, two shards) running them, unless the cluster's
// kube-controller-manager runs them.
package endpoints

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		// The tests spend their time waiting for the controllers, not computing.
		Parallel: 4,
		Names:    []string{"endpointslicemirroring"},
		Shards:   2,
	})
}

// Package daemonset tests the DaemonSet controller end to end on the real local control
// plane, where kwok nodes report Ready and kwok makes pods Running and Ready: TestMain
// starts kshard (one coordinator, two shards) running the daemonset controller. Every
// test creates its own kwok nodes, labelled with its namespace (its DaemonSets select
// them by that label, so the cluster's shared nodes and the other tests' nodes are not
// theirs), and deletes them when it ends. Against upstream:
//
//	KSHARD_UPSTREAM_CONTROLLERS=1 KSHARD_KUBECONFIG=<reference kubeconfig> go test ./test/integration/daemonset/
package daemonset

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Parallel:     4,
		Names:        []string{"daemonset"},
		Coordinators: 1,
		Shards:       2,
	})
}

// Package statefulset tests the StatefulSet controller end to end on the real local
// control plane, where kwok makes scheduled pods Running and Ready.
//
// The same tests run against upstream kube-controller-manager and against kshard: when
// the connected cluster's kube-controller-manager runs the statefulset controller
// (KSHARD_UPSTREAM_CONTROLLERS=1) the tests use it; otherwise TestMain starts kshard (one
// coordinator, two shards running statefulset and the garbage collector, which carries out
// the claims' retention policy) and stops it at the end. The handoff test needs kshard and
// is skipped against upstream.
package statefulset

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		// The tests spend their time waiting for the controllers, not computing.
		Parallel: 6,
		// The garbage collector carries out the claims' retention policy, and the PVC
		// protection controller lets a collected claim go (the cluster's
		// kube-controller-manager does not run it while kshard has it).
		Names:        []string{"statefulset", "garbagecollector", "pvc-protection"},
		Coordinators: 1,
		Shards:       2,
	})
}

// Package namespace tests the namespace controller end to end on the real local control
// plane: a deleted namespace's content (pods first, built-in types, a CRD's objects) is
// deleted and the namespace finished; content held by a foreign finalizer keeps it
// Terminating with upstream's conditions until the finalizer goes; an aggregated API
// that is down (an APIService whose Service does not exist) is reported in
// NamespaceDeletionDiscoveryFailure while the other groups' content is deleted; and a
// deletion interrupted by a graceful handoff or a SIGKILL of the namespace's shard is
// finished by the new owner.
//
// TestMain starts kshard (one coordinator, two shards, with pod identities and the
// server-side fence, so the new owner's deletes in a terminating namespace must pass the
// API server's owner check) unless the cluster's kube-controller-manager runs the
// namespace controller. The same tests, but for the handoff ones, run against upstream:
//
//	KSHARD_UPSTREAM_CONTROLLERS=1 KSHARD_KUBECONFIG=<reference kubeconfig> go test ./test/integration/namespace/
package namespace

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{framework.NamespaceController},
		Coordinators: 1,
		Shards:       2,
		Fence:        true,
	})
}

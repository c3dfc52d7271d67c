// Package batch tests the Job controller end to end on the real local control plane, where
// kwok runs the pods: a running Job pod succeeds at once, one labelled kshard.io/kwok=fail
// fails with the exit code of its annotation kshard.io/kwok-exit-code, one labelled
// kshard.io/kwok=run keeps running (hack/kwok-stages).
//
// As in test/integration/workloads, the tests use the cluster's kube-controller-manager
// when it runs the job controller (hack/cluster-upstream.sh), and otherwise start kshard
// (one coordinator, two shards running it):
//
//	KSHARD_KUBECONFIG=$(hack/cluster-upstream.sh env | sed s/KUBECONFIG=//) go test ./test/integration/batch/
package batch

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{"job"},
		Coordinators: 1,
		Shards:       2,
	})
}

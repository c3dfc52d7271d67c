// Package batch tests the batch controllers (Job, CronJob, TTL-after-finished) end to end
// on the real local control plane, where kwok runs the pods: a running Job pod succeeds at
// once, one labelled kshard.io/kwok=fail fails with the exit code of its annotation
// kshard.io/kwok-exit-code, one labelled kshard.io/kwok=run keeps running (hack/kwok-stages).
//
// As in test/integration/workloads, the tests run against whoever runs the controllers:
// TestMain starts kshard (one coordinator, two shards) for those the cluster's
// kube-controller-manager does not run, and uses the cluster's for the others. Point them
// at the reference cluster with
//
//	KSHARD_KUBECONFIG=$(hack/cluster-upstream.sh env | sed s/KUBECONFIG=//) go test ./test/integration/batch/
//
// The CronJob tests wait for real one-minute schedules; the tests run 8 at a time
// (ControllersOptions.Parallel) and take about a minute and a half together.
package batch

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		// The tests spend their time waiting for schedules and pods, not computing: at go
		// test's default (GOMAXPROCS: 2 on CI's machine) the package took four minutes
		// instead of one and a half.
		Parallel:     8,
		Names:        []string{"job", "cronjob", "ttl-after-finished"},
		Coordinators: 1,
		Shards:       2,
	})
}

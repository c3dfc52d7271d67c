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
//	KSHARD_KUBECONFIG=$(hack/cluster-upstream.sh env | sed s/KUBECONFIG=//) go test -parallel 8 ./test/integration/batch/
//
// The CronJob tests wait for real one-minute schedules; they run in parallel and take
// about three minutes together with -parallel 8 (go test runs GOMAXPROCS tests at once
// by default).
package batch

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) {
	framework.MainWithControllers(m, framework.ControllersOptions{
		Names:        []string{"job", "cronjob", "ttl-after-finished"},
		Coordinators: 1,
		Shards:       2,
	})
}

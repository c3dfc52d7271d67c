package batch

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/job"
	"github.com/kshard/kshard/test/framework"
)

// The side-by-side set-up: kube-controller-manager keeps its job controller on, a kshard
// started with --job-managed-by=kshard.io/job-controller works only the Jobs that name it.
// Each Job is completed by its own controller, told apart by the field manager of the
// status writes. Runs only when the cluster's kube-controller-manager runs the job
// controller (KSHARD_UPSTREAM_CONTROLLERS=1).
func TestJobBesideUpstream(t *testing.T) {
	c := framework.RunningControllers(t)
	if !c.Upstream() {
		t.Skip("kshard runs the job controller in takeover mode here; the side-by-side set-up needs upstream's job controller on")
	}
	f := framework.Get(t)
	k := f.NewKShard(t, framework.KShardOptions{ShardArgs: []string{"--controllers", "job", "--" + job.ManagedByFlag, job.ManagedByKShard}})
	k.StartCoordinator("coordinator-0")
	s := k.StartShard("shard-0")
	framework.WaitHTTP(t, s.HTTPURL+"/readyz", 90*time.Second)
	e := newEnv(t)
	e.create(newJob("kshard", 2, 3, func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To(job.ManagedByKShard) }))
	e.create(newJob("upstream", 2, 3))
	e.mustKubectl("wait", "--for=condition=complete", "job/kshard", "job/upstream", "--timeout=120s")
	for name, want := range map[string]string{"kshard": "kshard", "upstream": "kube-controller-manager"} {
		j := e.job(name)
		var managers []string
		for _, m := range j.ManagedFields {
			if m.Subresource == "status" {
				managers = append(managers, m.Manager)
			}
		}
		if len(managers) != 1 || !strings.HasPrefix(managers[0], want) {
			t.Errorf("job %s: status written by %v, want only %s", name, managers, want)
		}
		if j.Status.Succeeded != 3 {
			t.Errorf("job %s: succeeded %d", name, j.Status.Succeeded)
		}
	}
}

package batch

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// The shards export the job controller's series under upstream's names
// (job_controller_*, with the shard label): a Job that completes and one that fails add
// to them. Other tests run at the same time, so the counters must grow by at least what
// this test's Jobs did.
func TestJobControllerMetrics(t *testing.T) {
	t.Parallel()
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the job controller: its metrics are upstream's own")
	}
	var shards []*framework.Shard
	for _, s := range c.KShard.Shards {
		if !s.Exited() {
			shards = append(shards, s)
		}
	}
	sum := func(name string, match ...string) float64 {
		t.Helper()
		var total float64
		for _, s := range shards {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			v, err := framework.Metric(ctx, s.HTTPURL, name, match...)
			cancel()
			if err != nil {
				t.Fatalf("%s: %v", s.Name, err)
			}
			total += v
		}
		return total
	}
	type series struct {
		name  string
		match []string
		grow  float64
	}
	want := []series{
		{"job_controller_jobs_finished_total", []string{`completion_mode="NonIndexed"`, `result="succeeded"`, `reason="CompletionsReached"`}, 1},
		{"job_controller_jobs_finished_total", []string{`completion_mode="NonIndexed"`, `result="failed"`, `reason="BackoffLimitExceeded"`}, 1},
		{"job_controller_job_pods_finished_total", []string{`completion_mode="NonIndexed"`, `result="succeeded"`}, 2},
		{"job_controller_job_pods_finished_total", []string{`completion_mode="NonIndexed"`, `result="failed"`}, 1},
		{"job_controller_job_pods_creation_total", []string{`reason="new"`, `status="succeeded"`}, 3},
		{"job_controller_job_syncs_total", []string{`completion_mode="NonIndexed"`, `result="success"`}, 2},
		{"job_controller_job_sync_duration_seconds_count", []string{`completion_mode="NonIndexed"`, `result="success"`}, 2},
		{"job_controller_terminated_pods_tracking_finalizer_total", []string{`event="add"`}, 3},
		{"job_controller_terminated_pods_tracking_finalizer_total", []string{`event="delete"`}, 3},
	}
	before := make([]float64, len(want))
	for i, w := range want {
		before[i] = sum(w.name, w.match...)
	}
	e := newEnv(t)
	e.create(newJob("ok", 2, 2))
	e.create(newJob("ko", 1, 1, failing(2), func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To[int32](0) }))
	e.mustKubectl("wait", "--for=condition=complete", "job/ok", "--timeout=60s")
	e.mustKubectl("wait", "--for=condition=failed", "job/ko", "--timeout=60s")
	for i, w := range want {
		if after := sum(w.name, w.match...); after-before[i] < w.grow {
			t.Errorf("%s%v grew by %v (from %v), want at least %v", w.name, w.match, after-before[i], before[i], w.grow)
		}
	}
	for _, s := range shards {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		samples, err := framework.Scrape(ctx, s.HTTPURL)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, sm := range samples {
			if sm.Name == "job_controller_job_syncs_total" && sm.Labels["shard"] != s.Name {
				t.Errorf("%s: %s%v without the shard's shard label", s.Name, sm.Name, sm.Labels)
			}
		}
	}
}

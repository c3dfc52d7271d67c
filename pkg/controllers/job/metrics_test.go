package job

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
)

// withMetrics gives the fixture's controller metrics registered with a registry of its
// own, and returns the registry.
func withMetrics(t *testing.T, f *fixture) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl.jobMetrics = m
	return reg
}

// series gathers reg into "name{label=value,…}" → value for every series with a non-zero
// value: counters by their value, histograms by their sample count (name_count).
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name, v := mf.GetName(), 0.0
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				name, v = name+"_count", float64(m.GetHistogram().GetSampleCount())
			}
			if v == 0 {
				continue
			}
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

func diffSeries(got, want map[string]float64) string {
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(got))
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			fmt.Fprintf(&b, "\n  %s = %v, want %v", k, got[k], want[k])
		}
	}
	return b.String()
}

// TestSyncMetrics: the series one sync of a Job records, named and labelled as
// upstream's job controller records them.
func TestSyncMetrics(t *testing.T) {
	const (
		syncs    = "job_controller_job_syncs_total"
		duration = "job_controller_job_sync_duration_seconds_count"
	)
	failPolicy := func(j *batchv1.Job) {
		j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
			{Action: batchv1.PodFailurePolicyActionCount, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
				Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{5}}},
			{Action: batchv1.PodFailurePolicyActionFailJob, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		}}
	}
	exit := func(code int32) podOpt { return finishedWith(corev1.PodFailed, code, t0.Add(-30*time.Second)) }
	tests := []struct {
		name  string
		job   *batchv1.Job
		pods  []*corev1.Pod
		setup func(f *fixture)
		// want are the non-zero series after one sync of the Job.
		want map[string]float64
	}{
		{name: "new pods", job: newJob(2, 2), want: map[string]float64{
			syncs + "{action=pods_created,completion_mode=NonIndexed,result=success}":    1,
			duration + "{action=pods_created,completion_mode=NonIndexed,result=success}": 1,
			"job_controller_job_pods_creation_total{reason=new,status=succeeded}":        2,
		}},
		{name: "indexed", job: newJob(1, 3, indexed), want: map[string]float64{
			syncs + "{action=pods_created,completion_mode=Indexed,result=success}":    1,
			duration + "{action=pods_created,completion_mode=Indexed,result=success}": 1,
			"job_controller_job_pods_creation_total{reason=new,status=succeeded}":     1,
		}},
		{name: "nothing to do", job: newJob(1, 2), pods: []*corev1.Pod{newPod("a")}, want: map[string]float64{
			syncs + "{action=tracking,completion_mode=NonIndexed,result=success}":    1,
			duration + "{action=tracking,completion_mode=NonIndexed,result=success}": 1,
		}},
		{name: "surplus pod deleted", job: newJob(1, 5), pods: []*corev1.Pod{newPod("a"), newPod("b")}, want: map[string]float64{
			syncs + "{action=pods_deleted,completion_mode=NonIndexed,result=success}":    1,
			duration + "{action=pods_deleted,completion_mode=NonIndexed,result=success}": 1,
		}},
		{name: "suspended", job: newJob(1, 5, suspended(true)), want: map[string]float64{
			syncs + "{action=pods_deleted,completion_mode=NonIndexed,result=success}":    1,
			duration + "{action=pods_deleted,completion_mode=NonIndexed,result=success}": 1,
		}},
		{name: "expectations not met", job: newJob(2, 2), setup: func(f *fixture) { f.ctrl.expectations.ExpectCreations("ns/job", 1) },
			want: map[string]float64{
				syncs + "{action=reconciling,completion_mode=NonIndexed,result=success}":    1,
				duration + "{action=reconciling,completion_mode=NonIndexed,result=success}": 1,
			}},
		{name: "failed creates", job: newJob(3, 3), setup: func(f *fixture) {
			f.Client.PrependReactor("create", "pods", func(core.Action) (bool, runtime.Object, error) { return true, nil, errQuota })
		}, want: map[string]float64{
			// Slow start: the first create fails, the other two are not tried.
			syncs + "{action=pods_created,completion_mode=NonIndexed,result=error}":    1,
			duration + "{action=pods_created,completion_mode=NonIndexed,result=error}": 1,
			"job_controller_job_pods_creation_total{reason=new,status=failed}":         1,
		}},
		{name: "replacing a failed pod", job: newJob(1, 3, withStatus(batchv1.JobStatus{Failed: 1})),
			pods: []*corev1.Pod{newPod("a", failed(), untracked)}, want: map[string]float64{
				syncs + "{action=pods_created,completion_mode=NonIndexed,result=success}":                        1,
				duration + "{action=pods_created,completion_mode=NonIndexed,result=success}":                     1,
				"job_controller_job_pods_creation_total{reason=recreate_terminating_or_failed,status=succeeded}": 1,
			}},
		{name: "replacing a failed pod, only failed pods replaced", job: newJob(1, 3, withStatus(batchv1.JobStatus{Failed: 1}), func(j *batchv1.Job) {
			j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		}), pods: []*corev1.Pod{newPod("a", failed(), untracked)}, want: map[string]float64{
			syncs + "{action=pods_created,completion_mode=NonIndexed,result=success}":         1,
			duration + "{action=pods_created,completion_mode=NonIndexed,result=success}":      1,
			"job_controller_job_pods_creation_total{reason=recreate_failed,status=succeeded}": 1,
		}},
		{name: "replacing a terminating pod", job: newJob(2, 3), pods: []*corev1.Pod{newPod("a", deleting, untracked), newPod("b")},
			want: map[string]float64{
				syncs + "{action=pods_created,completion_mode=NonIndexed,result=success}":                        1,
				duration + "{action=pods_created,completion_mode=NonIndexed,result=success}":                     1,
				"job_controller_job_pods_creation_total{reason=recreate_terminating_or_failed,status=succeeded}": 1,
			}},
		{name: "complete", job: newJob(1, 1), pods: []*corev1.Pod{newPod("a", succeeded())}, want: map[string]float64{
			syncs + "{action=tracking,completion_mode=NonIndexed,result=success}":                                       1,
			duration + "{action=tracking,completion_mode=NonIndexed,result=success}":                                    1,
			"job_controller_job_pods_finished_total{completion_mode=NonIndexed,result=succeeded}":                       1,
			"job_controller_jobs_finished_total{completion_mode=NonIndexed,reason=CompletionsReached,result=succeeded}": 1,
		}},
		{name: "backoff limit exceeded", job: newJob(1, 1, backoffLimit(0)), pods: []*corev1.Pod{newPod("a", failed())},
			want: map[string]float64{
				syncs + "{action=reconciling,completion_mode=NonIndexed,result=success}":                                   1,
				duration + "{action=reconciling,completion_mode=NonIndexed,result=success}":                                1,
				"job_controller_job_pods_finished_total{completion_mode=NonIndexed,result=failed}":                         1,
				"job_controller_jobs_finished_total{completion_mode=NonIndexed,reason=BackoffLimitExceeded,result=failed}": 1,
			}},
		{name: "failure policy actions", job: newJob(3, 3, failPolicy),
			pods: []*corev1.Pod{newPod("ignored", exit(42)), newPod("counted", exit(5)), newPod("unmatched", exit(1))},
			want: map[string]float64{
				syncs + "{action=pods_created,completion_mode=NonIndexed,result=success}":          1,
				duration + "{action=pods_created,completion_mode=NonIndexed,result=success}":       1,
				"job_controller_job_pods_finished_total{completion_mode=NonIndexed,result=failed}": 2,
				"job_controller_pod_failures_handled_by_failure_policy_total{action=Ignore}":       1,
				"job_controller_pod_failures_handled_by_failure_policy_total{action=Count}":        1,
			}},
		{name: "failure policy FailJob", job: newJob(2, 2, failPolicy),
			pods: []*corev1.Pod{newPod("disrupted", exit(1), withCondition(corev1.DisruptionTarget)), newPod("running")},
			want: map[string]float64{
				syncs + "{action=reconciling,completion_mode=NonIndexed,result=success}":           1,
				duration + "{action=reconciling,completion_mode=NonIndexed,result=success}":        1,
				"job_controller_pod_failures_handled_by_failure_policy_total{action=FailJob}":      1,
				"job_controller_job_pods_finished_total{completion_mode=NonIndexed,result=failed}": 2,
			}},
		{name: "indexes of backoffLimitPerIndex", job: newJob(2, 3, indexed, func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex = ptr.To[int32](0)
		}), pods: []*corev1.Pod{newPod("a", index(0), succeeded()), newPod("b", index(1), failed())}, want: map[string]float64{
			syncs + "{action=pods_created,completion_mode=Indexed,result=success}":                           1,
			duration + "{action=pods_created,completion_mode=Indexed,result=success}":                        1,
			"job_controller_job_pods_creation_total{reason=recreate_terminating_or_failed,status=succeeded}": 1,
			"job_controller_job_finished_indexes_total{backoffLimit=perIndex,status=succeeded}":              1,
			"job_controller_job_finished_indexes_total{backoffLimit=perIndex,status=failed}":                 1,
			"job_controller_job_pods_finished_total{completion_mode=Indexed,result=succeeded}":               1,
			"job_controller_job_pods_finished_total{completion_mode=Indexed,result=failed}":                  1,
		}},
		{name: "completed indexes, global backoff limit", job: newJob(1, 2, indexed),
			pods: []*corev1.Pod{newPod("a", index(0), succeeded())}, want: map[string]float64{
				syncs + "{action=pods_created,completion_mode=Indexed,result=success}":             1,
				duration + "{action=pods_created,completion_mode=Indexed,result=success}":          1,
				"job_controller_job_pods_creation_total{reason=new,status=succeeded}":              1,
				"job_controller_job_finished_indexes_total{backoffLimit=global,status=succeeded}":  1,
				"job_controller_job_pods_finished_total{completion_mode=Indexed,result=succeeded}": 1,
			}},
		{name: "managed by another controller: not a sync", job: newJob(1, 1, func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/other") }),
			want: map[string]float64{}},
		{name: "finished: not a sync", job: newJob(1, 1, withStatus(batchv1.JobStatus{Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}})), want: map[string]float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, objs(tc.job, tc.pods...)...)
			reg := withMetrics(t, f)
			if tc.setup != nil {
				tc.setup(f)
			}
			_ = f.Sync("ns/job")
			if d := diffSeries(series(t, reg), tc.want); d != "" {
				t.Errorf("series differ:%s", d)
			}
		})
	}
}

// TestJobsByExternalController: a Job the controller does not work that enters its cache
// is counted under its managedBy; with --job-managed-by=kshard.io/job-controller a Job
// without managedBy is kube-controller-manager's.
func TestJobsByExternalController(t *testing.T) {
	tests := []struct {
		name      string
		managedBy string // the controller's
		job       *string
		want      map[string]float64
	}{
		{name: "no managedBy", managedBy: ManagedByUpstream, want: map[string]float64{}},
		{name: "upstream's own value", managedBy: ManagedByUpstream, job: ptr.To(ManagedByUpstream), want: map[string]float64{}},
		{name: "another controller", managedBy: ManagedByUpstream, job: ptr.To("kueue.x-k8s.io/multikueue"),
			want: map[string]float64{"job_controller_jobs_by_external_controller_total{controller_name=kueue.x-k8s.io/multikueue}": 1}},
		{name: "kshard mode, kshard's Job", managedBy: ManagedByKShard, job: ptr.To(ManagedByKShard), want: map[string]float64{}},
		{name: "kshard mode, no managedBy", managedBy: ManagedByKShard,
			want: map[string]float64{"job_controller_jobs_by_external_controller_total{controller_name=kubernetes.io/job-controller}": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureWith(t, Options{ManagedBy: tc.managedBy})
			reg := withMetrics(t, f)
			f.ctrl.addJob(f0(), newJob(1, 1, func(j *batchv1.Job) { j.Spec.ManagedBy = tc.job }))
			if d := diffSeries(series(t, reg), tc.want); d != "" {
				t.Errorf("series differ:%s", d)
			}
		})
	}
}

// TestTerminatedPodsTrackingFinalizerMetric: the pod handlers count pods entering ("add")
// and leaving ("delete") the state "terminated with the tracking finalizer".
func TestTerminatedPodsTrackingFinalizerMetric(t *testing.T) {
	const name = "job_controller_terminated_pods_tracking_finalizer_total"
	tests := []struct {
		name          string
		event         func(c *Controller, old, cur *corev1.Pod)
		old, cur      *corev1.Pod
		wantAdd, wDel float64
	}{
		{name: "a running pod arrives", event: add, cur: newPod("a")},
		{name: "a succeeded pod with the finalizer arrives", event: add, cur: newPod("a", succeeded()), wantAdd: 1},
		{name: "a succeeded pod without it arrives", event: add, cur: newPod("a", succeeded(), untracked)},
		{name: "a pod fails", event: update, old: newPod("a"), cur: newPod("a", failed(), rvOf("2")), wantAdd: 1},
		{name: "its finalizer is removed", event: update, old: newPod("a", failed()), cur: newPod("a", failed(), untracked, rvOf("2")), wDel: 1},
		{name: "a terminated pod with it leaves the cache", event: finalDelete, old: newPod("a", succeeded()), wDel: 1},
		{name: "a running pod's deletion begins", event: update, old: newPod("a"), cur: newPod("a", deleting, rvOf("2"))},
		{name: "a terminated pod's deletion begins", event: update, old: newPod("a", succeeded()), cur: newPod("a", succeeded(), deleting, rvOf("2"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, newJob(1, 1))
			reg := withMetrics(t, f)
			tc.event(f.ctrl, tc.old, tc.cur)
			got := series(t, reg)
			if a, d := got[name+"{event=add}"], got[name+"{event=delete}"]; a != tc.wantAdd || d != tc.wDel {
				t.Errorf("add %v delete %v, want %v %v", a, d, tc.wantAdd, tc.wDel)
			}
		})
	}
}

func add(c *Controller, _, cur *corev1.Pod)         { c.addPod(f0(), cur) }
func update(c *Controller, old, cur *corev1.Pod)    { c.updatePod(f0(), old, cur) }
func finalDelete(c *Controller, old, _ *corev1.Pod) { c.deletePod(f0(), old, true) }

func rvOf(v string) podOpt { return func(p *corev1.Pod) { p.ResourceVersion = v } }

// TestSyncWaitsForItsOwnWrites: a sync right after one that created pods does nothing
// until the pod cache has reached the creates' resourceVersion, and counts the skip under
// stale_sync_skips_total; a Job deleted meanwhile forgets the writes.
func TestSyncWaitsForItsOwnWrites(t *testing.T) {
	f := newFixture(t, newJob(1, 1), newPod("unrelated", rvOf("10"), func(p *corev1.Pod) { p.OwnerReferences, p.Labels = nil, nil }))
	reg := withMetrics(t, f)
	f.Client.PrependReactor("create", "pods", func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		pod.Name, pod.Namespace, pod.ResourceVersion = pod.GenerateName+"1", a.GetNamespace(), "50"
		return true, pod, nil
	})
	f.MustSync("ns/job")
	if n := len(f.createdPods()); n != 1 {
		t.Fatalf("created %d pods", n)
	}
	var stale *consistency.StaleError
	if err := f.Sync("ns/job"); !errors.As(err, &stale) || stale.Resource != podsResource {
		t.Fatalf("second sync = %v, want a stale pod cache", err)
	}
	if got := testutil.ToFloat64(f.ctrl.jobMetrics.StaleSyncSkips.WithLabelValues("", "pods")); got != 1 {
		t.Errorf("stale_sync_skips_total{resource=pods} = %v", got)
	}
	if got := series(t, reg)["job_controller_job_syncs_total{action=pods_created,completion_mode=NonIndexed,result=success}"]; got != 1 {
		t.Errorf("syncs %v: the skipped sync counted as a sync", got)
	}
	f.Cache(newPod("later", rvOf("50"), func(p *corev1.Pod) { p.OwnerReferences, p.Labels = nil, nil }))
	if err := f.Sync("ns/job"); err != nil {
		t.Fatalf("sync once the cache caught up = %v", err)
	}

	// The pods of a Job that is not in the cache are not waited for.
	f.ctrl.wrotePod(newPod("orphaned", rvOf("99"), func(p *corev1.Pod) { p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = "gone", "uid-gone" }))
	if err := f.ctrl.consistency.Ready("ns/gone"); err != nil {
		t.Errorf("a write for a Job not in the cache was recorded: %v", err)
	}
	// A Job that goes away forgets what was written for it.
	f.ctrl.wrotePod(newPod("another", rvOf("99")))
	if err := f.ctrl.consistency.Ready("ns/job"); err == nil {
		t.Fatal("the write of pod another was not recorded")
	}
	f.ctrl.deleteJob(f0(), newJob(1, 1))
	if err := f.Sync("ns/job"); err != nil {
		t.Fatalf("sync after the Job's deletion = %v", err)
	}
}

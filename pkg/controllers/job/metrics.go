package job

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// metricsSubsystem is kube-controller-manager's subsystem of the job controller's series:
// the names below are upstream's, so that dashboards and alerts written for
// kube-controller-manager's job controller read kshard's shards unchanged.
const metricsSubsystem = "job_controller"

// The values of the action label of job_sync_duration_seconds and job_syncs_total: what a
// sync did.
const (
	// actionReconciling: the sync did not manage pods (expectations not yet met, the Job
	// is ending or being deleted).
	actionReconciling = "reconciling"
	// actionTracking: pods were managed and none had to be created or deleted.
	actionTracking = "tracking"
	// actionPodsCreated: pods were wanted (created, or held back by the failure backoff).
	actionPodsCreated = "pods_created"
	// actionPodsDeleted: surplus pods, or the pods of a suspended Job, were deleted.
	actionPodsDeleted = "pods_deleted"
)

// The values of the result and status labels.
const (
	resultSucceeded = "succeeded"
	resultFailed    = "failed"
)

// The values of the reason label of job_pods_creation_total: why pods were created.
const (
	creationNew                         = "new"
	creationRecreateTerminatingOrFailed = "recreate_terminating_or_failed"
	creationRecreateFailed              = "recreate_failed"
)

// Metrics are the job controller's Prometheus series, named, labelled and recorded as
// kube-controller-manager 1.37's job controller records them (see docs/observability.md).
// Under sharding each shard counts what it did; sum over the shard label for the figure
// one kube-controller-manager would show.
type Metrics struct {
	// SyncDuration and Syncs: job_sync_duration_seconds and job_syncs_total
	// {completion_mode,result,action}, one per sync of a Job that is worked (not of a
	// Job deleted, finished, managed by another controller, or held back by a stale
	// cache).
	SyncDuration *prometheus.HistogramVec
	Syncs        *prometheus.CounterVec
	// Finished: jobs_finished_total{completion_mode,result,reason}, once per Job when its
	// Complete or Failed condition is written.
	Finished *prometheus.CounterVec
	// ByExternalController: jobs_by_external_controller_total{controller_name}, for every
	// Job this controller does not work that enters its cache.
	ByExternalController *prometheus.CounterVec
	// PodsFinished: job_pods_finished_total{completion_mode,result}, the growth of the
	// status' succeeded and failed counters written by the controller.
	PodsFinished *prometheus.CounterVec
	// FailurePolicy: pod_failures_handled_by_failure_policy_total{action}, failed pods
	// that matched a podFailurePolicy rule, by the rule's action.
	FailurePolicy *prometheus.CounterVec
	// TerminatedWithFinalizer: terminated_pods_tracking_finalizer_total{event}, "add"
	// when a pod in the cache becomes Succeeded or Failed with the tracking finalizer (or
	// enters the cache so), "delete" when such a pod loses the finalizer or leaves the
	// cache.
	TerminatedWithFinalizer *prometheus.CounterVec
	// FinishedIndexes: job_finished_indexes_total{status,backoffLimit}, indexes of
	// Indexed Jobs newly written as completed or failed.
	FinishedIndexes *prometheus.CounterVec
	// PodsCreation: job_pods_creation_total{reason,status}, pod creates by why they were
	// made and whether they succeeded.
	PodsCreation *prometheus.CounterVec
	// StaleSyncSkips: stale_sync_skips_total{group,resource}, syncs put off because an
	// informer had not yet seen the controller's own last write of that resource.
	StaleSyncSkips *prometheus.CounterVec
}

// NewMetrics registers the job controller's series with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: metricsSubsystem, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: metricsSubsystem, Name: "job_sync_duration_seconds",
			Help:    "The time it took to sync a job.",
			Buckets: prometheus.ExponentialBuckets(0.004, 2, 15),
		}, []string{"completion_mode", "result", "action"}),
		Syncs:    counter("job_syncs_total", "The number of job syncs.", "completion_mode", "result", "action"),
		Finished: counter("jobs_finished_total", "The number of finished jobs.", "completion_mode", "result", "reason"),
		ByExternalController: counter("jobs_by_external_controller_total",
			"The number of Jobs managed by an external controller.", "controller_name"),
		PodsFinished: counter("job_pods_finished_total", "The number of finished Pods that are fully tracked.",
			"completion_mode", "result"),
		FailurePolicy: counter("pod_failures_handled_by_failure_policy_total",
			`The number of failed Pods handled by failure policy, by the action of the matched rule: "FailJob", "Ignore", "Count" or "FailIndex".`,
			"action"),
		TerminatedWithFinalizer: counter("terminated_pods_tracking_finalizer_total",
			`The number of terminated pods (phase=Failed|Succeeded) that have the finalizer batch.kubernetes.io/job-tracking; the event label is "add" or "delete".`,
			"event"),
		FinishedIndexes: counter("job_finished_indexes_total",
			`The number of finished indexes; status is "succeeded" or "failed", backoffLimit "perIndex" or "global".`,
			"status", "backoffLimit"),
		PodsCreation: counter("job_pods_creation_total",
			`The number of Pods created by the Job controller, by the reason for the creation ("new", "recreate_terminating_or_failed", "recreate_failed") and its status ("succeeded", "failed").`,
			"reason", "status"),
		StaleSyncSkips: counter("stale_sync_skips_total", "Total number of Job syncs skipped due to a stale watch cache.",
			"group", "resource"),
	}
	if err := promutil.Register(reg, m.SyncDuration, m.Syncs, m.Finished, m.ByExternalController, m.PodsFinished,
		m.FailurePolicy, m.TerminatedWithFinalizer, m.FinishedIndexes, m.PodsCreation, m.StaleSyncSkips); err != nil {
		return nil, err
	}
	return m, nil
}

// completionModeLabel is the completion_mode label of job: "Indexed" or "NonIndexed".
func completionModeLabel(job *batchv1.Job) string {
	if isIndexed(job) {
		return string(batchv1.IndexedCompletion)
	}
	return string(batchv1.NonIndexedCompletion)
}

// observeSync records one sync of job that took took and ended with err after action.
func (m *Metrics) observeSync(job *batchv1.Job, action string, took time.Duration, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	mode := completionModeLabel(job)
	m.SyncDuration.WithLabelValues(mode, result, action).Observe(took.Seconds())
	m.Syncs.WithLabelValues(mode, result, action).Inc()
}

// jobFinished records a Job whose final condition f was written.
func (m *Metrics) jobFinished(job *batchv1.Job, f *batchv1.JobCondition) {
	result := resultFailed
	if f.Type == batchv1.JobComplete {
		result = resultSucceeded
	}
	m.Finished.WithLabelValues(completionModeLabel(job), result, f.Reason).Inc()
}

// podsFinished records what a status write added to the counters of job since old: pods
// succeeded and failed (for Indexed Jobs, succeeded is the growth of completedIndexes, so
// that an index counted again after completions shrank is not), and newly completed and
// failed indexes.
func (m *Metrics) podsFinished(log klog.Logger, job *batchv1.Job, old *batchv1.JobStatus) {
	mode := completionModeLabel(job)
	var succeeded int
	if isIndexed(job) {
		completions := int(*job.Spec.Completions)
		if job.Status.CompletedIndexes != old.CompletedIndexes {
			succeeded = countIndexes(log, &job.Status.CompletedIndexes, completions) - countIndexes(log, &old.CompletedIndexes, completions)
		}
		limit := "global"
		if hasBackoffLimitPerIndex(job) {
			limit = "perIndex"
		}
		m.FinishedIndexes.WithLabelValues(resultSucceeded, limit).Add(float64(succeeded))
		if hasBackoffLimitPerIndex(job) && !ptr.Equal(job.Status.FailedIndexes, old.FailedIndexes) {
			if d := countIndexes(log, job.Status.FailedIndexes, completions) - countIndexes(log, old.FailedIndexes, completions); d > 0 {
				m.FinishedIndexes.WithLabelValues(resultFailed, limit).Add(float64(d))
			}
		}
	} else {
		succeeded = int(job.Status.Succeeded) - int(old.Succeeded)
	}
	m.PodsFinished.WithLabelValues(mode, resultSucceeded).Add(float64(succeeded))
	m.PodsFinished.WithLabelValues(mode, resultFailed).Add(float64(job.Status.Failed - old.Failed))
}

// countIndexes is how many indexes below completions s lists (none when s is nil).
func countIndexes(log klog.Logger, s *string, completions int) int {
	if s == nil {
		return 0
	}
	return parseIndexes(log, *s, completions).total()
}

// failurePolicyActions records the failed pods each podFailurePolicy action handled.
func (m *Metrics) failurePolicyActions(byAction map[batchv1.PodFailurePolicyAction]int) {
	for action, n := range byAction {
		m.FailurePolicy.WithLabelValues(string(action)).Add(float64(n))
	}
}

// podsCreated records the outcome of one sync's pod creates for job: new pods, or
// replacements of failed (or, unless only failed pods are replaced, terminating) ones.
func (m *Metrics) podsCreated(job *batchv1.Job, jc *syncContext, succeeded, failed int32) {
	reason := creationNew
	switch {
	case onlyReplaceFailed(job) && jc.failed > 0:
		reason = creationRecreateFailed
	case jc.failed > 0 || jc.terminating > 0:
		reason = creationRecreateTerminatingOrFailed
	}
	if succeeded > 0 {
		m.PodsCreation.WithLabelValues(reason, resultSucceeded).Add(float64(succeeded))
	}
	if failed > 0 {
		m.PodsCreation.WithLabelValues(reason, resultFailed).Add(float64(failed))
	}
}

// terminatedWithFinalizer records a pod entering or leaving the state "terminated and
// holding the tracking finalizer" between old and cur (nil for a pod not in the cache).
func (m *Metrics) terminatedWithFinalizer(old, cur *corev1.Pod) {
	was, is := terminatedWithFinalizer(old), terminatedWithFinalizer(cur)
	switch {
	case !was && is:
		m.TerminatedWithFinalizer.WithLabelValues("add").Inc()
	case was && !is:
		m.TerminatedWithFinalizer.WithLabelValues("delete").Inc()
	}
}

func terminatedWithFinalizer(p *corev1.Pod) bool {
	return p != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) && hasTrackingFinalizer(p)
}

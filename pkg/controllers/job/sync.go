package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// syncContext is what one sync of a Job works with.
type syncContext struct {
	job  *batchv1.Job // a copy, whose status the sync edits
	pods []*corev1.Pod
	// finished is the condition the Job is to end with (FailureTarget, SuccessCriteriaMet,
	// then Failed or Complete), nil while it runs.
	finished    *batchv1.JobCondition
	activePods  []*corev1.Pod
	succeeded   int32
	failed      int32
	ready       int32
	terminating int32
	// prevSucceededIndexes are status.completedIndexes, succeededIndexes those plus the
	// indexes of newly succeeded pods (Indexed Jobs).
	prevSucceededIndexes indexSet
	succeededIndexes     indexSet
	// failedIndexes is set with backoffLimitPerIndex.
	failedIndexes *indexSet
	backoff       backoffRecord
	// rmFinalizers are pods whose finalizer removal was sent but not yet seen.
	rmFinalizers sets.Set[types.UID]
	uncounted    uncounted
	// delayedDeletion is, per index, the failed pod whose finalizer stays until its
	// replacement exists (backoffLimitPerIndex).
	delayedDeletion map[int]*corev1.Pod
}

// uncounted are the UIDs in status.uncountedTerminatedPods.
type uncounted struct{ succeeded, failed sets.Set[types.UID] }

// sync reconciles one Job.
func (c *Controller) sync(ctx context.Context, key string) (rerr error) {
	ctx, log, ns, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		return err
	}
	if ns == "" || name == "" {
		return fmt.Errorf("invalid job key %q: either namespace or name is missing", key)
	}
	start := c.clock.Now()
	defer func() { log.V(4).Info("Finished syncing job", "elapsed", c.clock.Since(start)) }()

	// Not before the caches show this controller's own last writes for the Job: a sync
	// on an older cache could count or create again what the last one did.
	if err := c.consistency.Ready(key); err != nil {
		var stale *consistency.StaleError
		if errors.As(err, &stale) {
			c.jobMetrics.StaleSyncSkips.WithLabelValues(stale.Resource.Group, stale.Resource.Resource).Inc()
		}
		return err
	}
	shared, err := c.jobLister.Jobs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("Job has been deleted")
		c.expectations.Forget(key)
		c.finalizers.forget(key)
		c.consistency.Clear(key, "")
		c.backoff.remove(key)
		return nil
	}
	if err != nil {
		return err
	}
	if !c.handles(shared) {
		log.V(2).Info("Skip syncing the job as it is managed by an external controller", "uid", shared.UID, "controllerName", ptr.Deref(shared.Spec.ManagedBy, ""))
		return nil
	}
	job := shared.DeepCopy()
	if isFinished(job) {
		c.backoff.remove(key)
		c.consistency.Clear(key, job.UID)
		c.finished.Delete(job.UID)
		return nil
	}
	if _, ok := c.finished.Load(job.UID); ok {
		log.V(2).Info("Skip syncing the job as its marked finished but the corresponding update event is not yet received", "uid", job.UID)
		return nil
	}
	if m := job.Spec.CompletionMode; m != nil && *m != batchv1.NonIndexedCompletion && *m != batchv1.IndexedCompletion {
		c.recorder.Event(job, corev1.EventTypeWarning, "UnknownCompletionMode", "Skipped Job sync because completion mode is unknown")
		return nil
	}
	action := actionReconciling
	defer func() { c.jobMetrics.observeSync(job, action, c.clock.Since(start), rerr) }()
	if job.Status.UncountedTerminatedPods == nil {
		job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}

	// Expectations first: a pod that enters the cache after this check only defers the
	// Job to its next sync.
	satisfied := c.expectations.Satisfied(key)
	pods, err := c.podsOf(ctx, job)
	if err != nil {
		return err
	}
	active := podutil.FilterActive(pods)
	jc := &syncContext{
		job:          job,
		pods:         pods,
		activePods:   active,
		ready:        countReady(active),
		terminating:  int32(len(filterTerminating(pods))),
		rmFinalizers: c.finalizers.expected(key),
		uncounted: uncounted{
			succeeded: sets.New(job.Status.UncountedTerminatedPods.Succeeded...),
			failed:    sets.New(job.Status.UncountedTerminatedPods.Failed...),
		},
	}
	nActive := int32(len(active))
	newSucceeded, newFailed := newlyFinished(jc)
	jc.succeeded = job.Status.Succeeded + int32(len(newSucceeded)) + int32(jc.uncounted.succeeded.Len())
	jc.failed = job.Status.Failed + int32(countedFailures(job, newFailed)) + int32(jc.uncounted.failed.Len())

	if job.Status.StartTime == nil && !isSuspended(job) {
		job.Status.StartTime = ptr.To(metav1.NewTime(c.clock.Now()))
	}
	jc.backoff = c.backoff.next(key, newSucceeded, newFailed)

	// The end state, in upstream's order: an earlier SuccessCriteriaMet or FailureTarget
	// stands; then failures (podFailurePolicy's FailJob, backoffLimit, the active
	// deadline, failed indexes); then successes (successPolicy, completions).
	jc.finished = successCriteriaMet(job)
	if jc.finished == nil {
		if ft := findCondition(job.Status.Conditions, batchv1.JobFailureTarget); ft != nil && ft.Status == corev1.ConditionTrue {
			jc.finished = c.condition(batchv1.JobFailed, ft.Reason, ft.Message)
		} else if msg := failJobMessage(job, pods); msg != nil {
			jc.finished = c.condition(batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, *msg)
		}
	}
	if jc.finished == nil {
		switch {
		case jc.failed > *job.Spec.BackoffLimit || pastBackoffLimitOnFailure(job, pods):
			jc.finished = c.condition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
		case c.pastActiveDeadline(job):
			jc.finished = c.condition(batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")
		case job.Spec.ActiveDeadlineSeconds != nil && !isSuspended(job):
			left := time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second - c.clock.Since(job.Status.StartTime.Time)
			log.V(2).Info("Job has activeDeadlineSeconds configuration. Will sync this job again", "nextSyncIn", left)
			c.queue.AddAfter(key, left)
		}
	}
	if isIndexed(job) {
		jc.prevSucceededIndexes, jc.succeededIndexes = succeededIndexes(log, job, pods)
		jc.succeeded = int32(jc.succeededIndexes.total())
		if hasBackoffLimitPerIndex(job) {
			fi := failedIndexes(log, job, pods)
			jc.failedIndexes = &fi
			if jc.finished == nil {
				if job.Spec.MaxFailedIndexes != nil && fi.total() > int(*job.Spec.MaxFailedIndexes) {
					jc.finished = c.condition(batchv1.JobFailureTarget, batchv1.JobReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes")
				} else if fi.total() > 0 && fi.total()+jc.succeededIndexes.total() >= int(*job.Spec.Completions) {
					jc.finished = c.condition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes, "Job has failed indexes")
				}
			}
			jc.delayedDeletion = delayedDeletionPerIndex(log, jc)
		}
		if jc.finished == nil {
			if msg, ok := matchSuccessPolicy(log, job.Spec.SuccessPolicy, *job.Spec.Completions, jc.succeededIndexes); ok {
				jc.finished = c.condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonSuccessPolicy, msg)
			}
		}
	}

	suspendChanged := false
	var manageErr error
	if jc.finished != nil {
		// The Job ends: its active pods go (their finalizers are removed below).
		deletedReady, deleted, err := c.deleteActivePods(ctx, job, jc.activePods)
		if deleted != nActive || !satisfied {
			// Pods may remain, or pods not yet in the cache: not finished yet.
			jc.finished = nil
		}
		nActive -= deleted
		jc.terminating += deleted
		jc.ready -= deletedReady
		manageErr = err
	} else {
		managed := false
		if satisfied && job.DeletionTimestamp == nil {
			nActive, action, manageErr = c.manage(ctx, jc)
			managed = true
		}
		var complete bool
		if job.Spec.Completions == nil {
			// Without completions the first success completes the Job once nothing runs.
			complete = jc.succeeded > 0 && nActive == 0
		} else {
			complete = jc.succeeded >= *job.Spec.Completions && nActive == 0
		}
		switch {
		case complete:
			jc.finished = c.condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, "Reached expected number of succeeded pods")
		case managed && isSuspended(job):
			var changed bool
			job.Status.Conditions, changed = c.ensureCondition(job.Status.Conditions, batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended")
			if changed {
				suspendChanged = true
				c.recorder.Event(job, corev1.EventTypeNormal, "Suspended", "Job suspended")
				// MutableSchedulingDirectivesForSuspendedJobs (on in 1.37): a suspended
				// Job has no start time.
				job.Status.StartTime = nil
			}
		case managed:
			var changed bool
			job.Status.Conditions, changed = c.ensureCondition(job.Status.Conditions, batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "Job resumed")
			if changed {
				suspendChanged = true
				c.recorder.Event(job, corev1.EventTypeNormal, "Resumed", "Job resumed")
				// activeDeadlineSeconds counts the time a Job is continuously active.
				job.Status.StartTime = ptr.To(metav1.NewTime(c.clock.Now()))
			}
		}
	}

	needsUpdate := suspendChanged || nActive != job.Status.Active || !ptr.Equal(&jc.ready, job.Status.Ready) ||
		!ptr.Equal(&jc.terminating, job.Status.Terminating)
	job.Status.Active = nActive
	job.Status.Ready = ptr.To(jc.ready)
	job.Status.Terminating = ptr.To(jc.terminating)
	if err := c.trackStatus(ctx, jc, needsUpdate); err != nil {
		return fmt.Errorf("tracking status: %w", err)
	}
	return manageErr
}

// podsOf returns the Job's pods, adopting matching orphans (with the tracking finalizer)
// and releasing owned pods its selector no longer matches. The returned pods are shared
// with the cache, except adopted ones, which are copies with the finalizer.
func (c *Controller) podsOf(ctx context.Context, job *batchv1.Job) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("couldn't convert Job selector: %v", err)
	}
	candidates, err := podutil.ByController(c.podIndexer, podutil.Owner{
		Namespace: job.Namespace, Kind: kind.Kind, Name: job.Name, UID: job.UID}, true)
	if err != nil {
		return nil, err
	}
	m := &claim.Manager[*corev1.Pod]{
		Controller: job, Kind: kind, Selector: sel, Finalizers: []string{batchv1.JobTrackingFinalizer},
		Fresh: func(ctx context.Context) (metav1.Object, error) {
			fresh, err := c.client.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return fresh, nil
		},
		Patch: func(ctx context.Context, name string, patch []byte) error {
			return c.patchPod(ctx, job.Namespace, name, patch)
		},
	}
	owned, err := m.Claim(ctx, candidates)
	for i, p := range owned {
		if metav1.GetControllerOfNoCopy(p) == nil && !hasTrackingFinalizer(p) {
			// Adopted just now: the patch added the finalizer.
			p = p.DeepCopy()
			p.Finalizers = append(p.Finalizers, batchv1.JobTrackingFinalizer)
			owned[i] = p
		}
	}
	return owned, err
}

// newlyFinished returns the tracked pods that succeeded or failed and are not yet counted
// (neither in the counters nor in uncountedTerminatedPods).
func newlyFinished(jc *syncContext) (succeeded, failed []*corev1.Pod) {
	succeeded = trackedPods(jc, jc.uncounted.succeeded)
	succeeded = filterPods(succeeded, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	failed = trackedPods(jc, jc.uncounted.failed)
	failed = filterPods(failed, func(p *corev1.Pod) bool { return isPodFailed(p, jc.job) })
	return succeeded, failed
}

// trackedPods returns the pods that hold the tracking finalizer (no removal pending), are
// not in skip, and, for Indexed Jobs, have a valid index.
func trackedPods(jc *syncContext, skip sets.Set[types.UID]) []*corev1.Pod {
	return filterPods(jc.pods, func(p *corev1.Pod) bool {
		if !hasTrackingFinalizer(p) || skip.Has(p.UID) || jc.rmFinalizers.Has(p.UID) {
			return false
		}
		return !isIndexed(jc.job) || validIndex(jc.job, p)
	})
}

// countedFailures is how many of the failed pods count against backoffLimit.
func countedFailures(job *batchv1.Job, failed []*corev1.Pod) int {
	n := 0
	for _, p := range failed {
		if matchFailurePolicy(job.Spec.PodFailurePolicy, p).counts {
			n++
		}
	}
	return n
}

// isPodFailed: Failed pods, and, unless only failed pods are replaced
// (podReplacementPolicy Failed), pods being deleted that did not succeed: an orphaned or
// evicted pod may never reach the Failed phase.
func isPodFailed(p *corev1.Pod, job *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if onlyReplaceFailed(job) {
		return false
	}
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded
}

func onlyReplaceFailed(job *batchv1.Job) bool {
	return job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batchv1.Failed
}

func isSuspended(job *batchv1.Job) bool { return job.Spec.Suspend != nil && *job.Spec.Suspend }

// pastBackoffLimitOnFailure: with restartPolicy OnFailure the containers' restarts of
// running and pending pods count against backoffLimit.
func pastBackoffLimitOnFailure(job *batchv1.Job, pods []*corev1.Pod) bool {
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		return false
	}
	var restarts int32
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning && p.Status.Phase != corev1.PodPending {
			continue
		}
		for _, s := range p.Status.InitContainerStatuses {
			restarts += s.RestartCount
		}
		for _, s := range p.Status.ContainerStatuses {
			restarts += s.RestartCount
		}
	}
	if *job.Spec.BackoffLimit == 0 {
		return restarts > 0
	}
	return restarts >= *job.Spec.BackoffLimit
}

func (c *Controller) pastActiveDeadline(job *batchv1.Job) bool {
	if job.Spec.ActiveDeadlineSeconds == nil || job.Status.StartTime == nil || isSuspended(job) {
		return false
	}
	return c.clock.Since(job.Status.StartTime.Time) >= time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second
}

func (c *Controller) condition(t batchv1.JobConditionType, reason, message string) *batchv1.JobCondition {
	return newCondition(t, corev1.ConditionTrue, reason, message, c.clock.Now())
}

func newCondition(t batchv1.JobConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) *batchv1.JobCondition {
	return &batchv1.JobCondition{Type: t, Status: status, Reason: reason, Message: message,
		LastProbeTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
}

// ensureCondition sets the condition of type t, replacing one that differs; a condition
// that does not exist is not added as False.
func (c *Controller) ensureCondition(list []batchv1.JobCondition, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, message string) ([]batchv1.JobCondition, bool) {
	if cur := findCondition(list, t); cur != nil {
		if cur.Status == status && cur.Reason == reason && cur.Message == message {
			return list, false
		}
		*cur = *newCondition(t, status, reason, message, c.clock.Now())
		return list, true
	}
	if status == corev1.ConditionFalse {
		return list, false
	}
	return append(list, *newCondition(t, status, reason, message, c.clock.Now())), true
}

func findCondition(list []batchv1.JobCondition, t batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

func countReady(pods []*corev1.Pod) int32 {
	var n int32
	for _, p := range pods {
		if podutil.IsReady(p) {
			n++
		}
	}
	return n
}

func filterTerminating(pods []*corev1.Pod) []*corev1.Pod { return podutil.FilterTerminating(pods) }

func filterPods(pods []*corev1.Pod, keep func(*corev1.Pod) bool) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

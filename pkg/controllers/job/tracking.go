package job

import (
	"context"
	"fmt"
	"sort"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// trackStatus counts finished pods exactly once, through the tracking finalizer:
//
//  1. every finished pod still holding the finalizer is put into
//     status.uncountedTerminatedPods (Indexed Jobs: its index into completedIndexes)
//     and the status is written;
//  2. only then the finalizers of those pods are removed;
//  3. the pods whose finalizer is gone move from uncountedTerminatedPods into the
//     succeeded and failed counters, written with the next status update.
//
// A crash between 2 and 3 leaves the pods in uncountedTerminatedPods without a
// finalizer: the next sync (on this shard or the next owner of the namespace) counts them
// in step 3 and never again in step 1. A crash between 1 and 2 leaves them listed and
// still holding the finalizer: step 1 skips listed pods. At most maxUncountedPods are taken
// per sync. Finally the Job ends (Complete or Failed) once no pod is uncounted and none is
// terminating.
func (c *Controller) trackStatus(ctx context.Context, jc *syncContext, needsFlush bool) error {
	log := klog.FromContext(ctx)
	job := jc.job
	indexed := isIndexed(job)
	if indexed {
		// Completed indexes are added in order.
		sort.SliceStable(jc.pods, func(i, j int) bool { return completionIndex(jc.pods[i]) < completionIndex(jc.pods[j]) })
	}
	withFinalizer := sets.New[types.UID]()
	for _, p := range jc.pods {
		if hasTrackingFinalizer(p) && !jc.rmFinalizers.Has(p.UID) {
			withFinalizer.Insert(p.UID)
		}
	}
	// The counters before this sync, to record what its status writes add (metrics).
	old := job.Status
	if countUncountedWithoutFinalizer(&job.Status, withFinalizer) {
		needsFlush = true
	}
	status := job.Status.UncountedTerminatedPods
	byAction := map[batchv1.PodFailurePolicyAction]int{}
	var toRemove []*corev1.Pod
	var newIndexes []int
	capped := false
	for _, p := range jc.pods {
		if !hasTrackingFinalizer(p) || jc.rmFinalizers.Has(p.UID) {
			continue // counted in an earlier sync
		}
		failed := isPodFailed(p, job)
		if !canRemoveFinalizer(log, jc, p, failed) {
			continue
		}
		toRemove = append(toRemove, p)
		switch {
		case p.Status.Phase == corev1.PodSucceeded && !jc.uncounted.failed.Has(p.UID):
			if indexed {
				// The index alone keeps a success from being counted twice.
				if ix := completionIndex(p); validIndex(job, p) && !jc.prevSucceededIndexes.has(ix) {
					newIndexes = append(newIndexes, ix)
					needsFlush = true
				}
			} else if !jc.uncounted.succeeded.Has(p.UID) {
				needsFlush = true
				status.Succeeded = append(status.Succeeded, p.UID)
			}
		case failed || (jc.finished != nil && !isSuccessCriteriaMet(jc.finished)):
			// A Job that fails counts every pod that has not succeeded as failed.
			if jc.uncounted.failed.Has(p.UID) || (indexed && !validIndex(job, p)) {
				break
			}
			m := matchFailurePolicy(job.Spec.PodFailurePolicy, p)
			if m.action != nil {
				byAction[*m.action]++
			}
			if m.counts {
				needsFlush = true
				status.Failed = append(status.Failed, p.UID)
			}
		}
		if len(newIndexes)+len(status.Succeeded)+len(status.Failed) >= maxUncountedPods {
			// Enough for one sync: the status stays small and big Jobs do not starve
			// others. The status and pod updates bring the Job back.
			capped = true
			break
		}
	}
	if indexed {
		jc.succeededIndexes = jc.succeededIndexes.with(newIndexes)
		s := jc.succeededIndexes.String()
		if s != job.Status.CompletedIndexes {
			needsFlush = true
		}
		job.Status.Succeeded = int32(jc.succeededIndexes.total())
		job.Status.CompletedIndexes = s
		var failedStr *string
		if jc.failedIndexes != nil {
			failedStr = ptr.To(jc.failedIndexes.String())
		}
		if !ptr.Equal(job.Status.FailedIndexes, failedStr) {
			job.Status.FailedIndexes = failedStr
			needsFlush = true
		}
	}
	// The interim condition is written before any finalizer goes; the final one
	// (Failed, Complete) waits until every pod is counted and gone.
	if jc.finished != nil && jc.finished.Type == batchv1.JobFailureTarget {
		job.Status.Conditions = append(job.Status.Conditions, *jc.finished)
		needsFlush = true
		jc.finished = c.condition(batchv1.JobFailed, jc.finished.Reason, jc.finished.Message)
	}
	if isSuccessCriteriaMet(jc.finished) {
		if successCriteriaMet(job) == nil {
			job.Status.Conditions = append(job.Status.Conditions, *jc.finished)
			needsFlush = true
		}
		jc.finished = c.condition(batchv1.JobComplete, jc.finished.Reason, jc.finished.Message)
	}
	needsFlush, err := c.flushAndRemoveFinalizers(ctx, jc, toRemove, withFinalizer, &old, byAction, needsFlush)
	if err != nil {
		return err
	}
	done := !capped && c.enactFinished(log, jc)
	if done || needsFlush {
		updated, err := c.updateStatus(ctx, jc.job)
		if err != nil {
			return fmt.Errorf("removing uncounted pods from status: %w", err)
		}
		if done {
			c.recordFinished(updated, jc.finished)
			c.jobMetrics.jobFinished(updated, jc.finished)
			c.finished.Store(updated.UID, struct{}{})
		}
		c.jobMetrics.podsFinished(log, updated, &old)
	}
	return nil
}

// canRemoveFinalizer: a pod's finalizer goes when the Job ends or is deleted, when the
// pod succeeded, or when it failed — unless it is its index's last failure whose
// replacement is not created yet (backoffLimitPerIndex).
func canRemoveFinalizer(log klog.Logger, jc *syncContext, pod *corev1.Pod, failed bool) bool {
	if jc.job.DeletionTimestamp != nil || jc.finished != nil || pod.Status.Phase == corev1.PodSucceeded {
		return true
	}
	if !failed {
		return false
	}
	if hasBackoffLimitPerIndex(jc.job) {
		if ix := completionIndex(pod); ix != noIndex {
			if p, ok := jc.delayedDeletion[ix]; ok && p.UID == pod.UID {
				log.V(3).Info("Delaying pod finalizer removal to await for pod recreation within the index", "pod", klog.KObj(pod))
				return false
			}
		}
	}
	return true
}

// flushAndRemoveFinalizers writes the status when it changed (the new uncounted pods and
// interim conditions), then removes the finalizers of toRemove and moves the pods whose
// finalizer is gone into the counters. It returns whether the status has changes not yet
// written. old are the counters last written (the metrics record what a write adds to
// them), byAction the failed pods each podFailurePolicy action handled in this sync.
func (c *Controller) flushAndRemoveFinalizers(ctx context.Context, jc *syncContext, toRemove []*corev1.Pod, withFinalizer sets.Set[types.UID],
	old *batchv1.JobStatus, byAction map[batchv1.PodFailurePolicyAction]int, needsFlush bool) (bool, error) {
	if needsFlush {
		updated, err := c.updateStatus(ctx, jc.job)
		if err != nil {
			return needsFlush, fmt.Errorf("adding uncounted pods to status: %w", err)
		}
		jc.job = updated
		c.backoff.update(keyOf(updated), jc.backoff)
		c.jobMetrics.podsFinished(klog.FromContext(ctx), updated, old)
		*old = updated.Status
		needsFlush = false
	}
	c.jobMetrics.failurePolicyActions(byAction)
	var rmErr error
	if len(toRemove) > 0 {
		var removed []bool
		removed, rmErr = c.removeFinalizers(ctx, keyOf(jc.job), toRemove)
		for i, p := range toRemove {
			if removed[i] {
				withFinalizer.Delete(p.UID)
			}
		}
	}
	if countUncountedWithoutFinalizer(&jc.job.Status, withFinalizer) {
		needsFlush = true
	}
	if rmErr != nil && needsFlush {
		// Keep the partial progress.
		if _, err := c.updateStatus(ctx, jc.job); err != nil {
			return needsFlush, fmt.Errorf("removing uncounted pods from status: %w", err)
		}
	}
	return needsFlush, rmErr
}

// countUncountedWithoutFinalizer moves the uncounted pods that no longer hold the
// finalizer into the succeeded and failed counters; it reports a change.
func countUncountedWithoutFinalizer(status *batchv1.JobStatus, withFinalizer sets.Set[types.UID]) bool {
	u := status.UncountedTerminatedPods
	if u == nil {
		return false
	}
	keep := func(uids []types.UID) []types.UID {
		var out []types.UID
		for _, uid := range uids {
			if withFinalizer.Has(uid) {
				out = append(out, uid)
			}
		}
		return out
	}
	changed := false
	if s := keep(u.Succeeded); len(s) != len(u.Succeeded) {
		status.Succeeded += int32(len(u.Succeeded) - len(s))
		u.Succeeded, changed = s, true
	}
	if f := keep(u.Failed); len(f) != len(u.Failed) {
		status.Failed += int32(len(u.Failed) - len(f))
		u.Failed, changed = f, true
	}
	return changed
}

// removeFinalizers removes the tracking finalizer of pods in parallel; removed[i] says
// whether pods[i]'s is gone (a pod that no longer exists counts as removed).
func (c *Controller) removeFinalizers(ctx context.Context, key string, pods []*corev1.Pod) ([]bool, error) {
	removed := make([]bool, len(pods))
	uids := make([]types.UID, len(pods))
	for i, p := range pods {
		uids[i] = p.UID
	}
	c.finalizers.expectRemoved(key, uids)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i, pod := range pods {
		patch := removeFinalizerPatch(pod)
		if patch == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.patchPod(ctx, pod.Namespace, pod.Name, patch)
			if err != nil {
				// No update will show this removal.
				c.finalizers.removalObserved(key, pod.UID)
				if !apierrors.IsNotFound(err) {
					utilruntime.HandleErrorWithContext(ctx, err, "removing tracking finalizer", "pod", klog.KObj(pod))
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
			removed[i] = true
		}()
	}
	wg.Wait()
	return removed, first
}

// enactFinished sets the final condition (and completionTime) once no pod is uncounted
// or terminating; it reports whether it did.
func (c *Controller) enactFinished(log klog.Logger, jc *syncContext) bool {
	if jc.finished == nil {
		return false
	}
	job := jc.job
	if u := job.Status.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		log.V(4).Info("Delaying marking the Job as finished, because there are still uncounted pod(s)", "condition", jc.finished.Type, "count", len(u.Succeeded)+len(u.Failed))
		return false
	}
	if jc.terminating > 0 {
		log.V(4).Info("Delaying marking the Job as finished, because there are still terminating pod(s)", "condition", jc.finished.Type, "count", jc.terminating)
		return false
	}
	f := jc.finished
	job.Status.Conditions, _ = c.ensureCondition(job.Status.Conditions, f.Type, f.Status, f.Reason, f.Message)
	if f.Type == batchv1.JobComplete {
		job.Status.CompletionTime = &f.LastTransitionTime
	}
	return true
}

// recordFinished records the events of a Job that ended.
func (c *Controller) recordFinished(job *batchv1.Job, f *batchv1.JobCondition) {
	if f.Type == batchv1.JobComplete {
		if job.Spec.Completions != nil && job.Status.Succeeded > *job.Spec.Completions {
			c.recorder.Event(job, corev1.EventTypeWarning, "TooManySucceededPods", "Too many succeeded pods running after completion count reached")
		}
		c.recorder.Event(job, corev1.EventTypeNormal, "Completed", "Job completed")
		return
	}
	c.recorder.Event(job, corev1.EventTypeWarning, f.Reason, f.Message)
}

// updateStatus writes job's status; the Job's next sync waits until the cache shows it.
func (c *Controller) updateStatus(ctx context.Context, job *batchv1.Job) (*batchv1.Job, error) {
	updated, err := c.client.BatchV1().Jobs(job.Namespace).UpdateStatus(ctx, job, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	c.consistency.Wrote(keyOf(updated), updated.UID, jobsResource, updated.ResourceVersion)
	return updated, nil
}

package cronjob

import (
	"context"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// pruneHistory deletes cj's finished Jobs beyond its history limits (succeeded ones
// beyond successfulJobsHistoryLimit, failed ones beyond failedJobsHistoryLimit), oldest
// first, and reports whether cj's status changed.
func (c *Controller) pruneHistory(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) bool {
	if cj.Spec.SuccessfulJobsHistoryLimit == nil && cj.Spec.FailedJobsHistoryLimit == nil {
		return false
	}
	var done, failed []*batchv1.Job
	for _, j := range jobs {
		switch t, _ := finished(j); t {
		case batchv1.JobComplete:
			done = append(done, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	changed := false
	if l := cj.Spec.SuccessfulJobsHistoryLimit; l != nil && c.deleteOldest(ctx, cj, done, *l) {
		changed = true
	}
	if l := cj.Spec.FailedJobsHistoryLimit; l != nil && c.deleteOldest(ctx, cj, failed, *l) {
		changed = true
	}
	return changed
}

// deleteOldest deletes all but the keep newest of jobs, by start time (Jobs not started
// count as newest; equal times by name), and reports whether any was deleted.
func (c *Controller) deleteOldest(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job, keep int32) bool {
	n := len(jobs) - int(keep)
	if n <= 0 {
		return false
	}
	klog.FromContext(ctx).V(4).Info("deleting jobs beyond the history limit", "delete", n, "jobs", len(jobs))
	jobs = slices.Clone(jobs)
	slices.SortFunc(jobs, byStartTime)
	deleted := false
	for _, j := range jobs[:n] {
		if c.deleteJobOf(ctx, cj, j) {
			deleted = true
		}
	}
	return deleted
}

// byStartTime orders Jobs by status.startTime, unstarted ones last, then by name.
func byStartTime(a, b *batchv1.Job) int {
	as, bs := a.Status.StartTime, b.Status.StartTime
	switch {
	case as == nil && bs != nil:
		return 1
	case as != nil && bs == nil:
		return -1
	case as.Equal(bs):
		return strings.Compare(a.Name, b.Name)
	case as.Before(bs):
		return -1
	default:
		return 1
	}
}

// deleteJobOf deletes job (its pods in the background) and drops it from cj's
// status.active, recording "SuccessfulDelete", or "FailedDelete" when the delete fails.
func (c *Controller) deleteJobOf(ctx context.Context, cj *batchv1.CronJob, job *batchv1.Job) bool {
	background := metav1.DeletePropagationBackground
	err := c.client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &background})
	if err != nil {
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedDelete, "Deleted job: %v", err)
		klog.FromContext(ctx).Error(err, "deleting job of cronjob", "job", job.Name)
		return false
	}
	removeActive(cj, job.UID)
	c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted job %v", job.Name)
	return true
}

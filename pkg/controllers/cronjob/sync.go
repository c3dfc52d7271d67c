package cronjob

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
)

// Event reasons, as upstream words them.
const (
	ReasonSawCompletedJob            = "SawCompletedJob"
	ReasonUnexpectedJob              = "UnexpectedJob"
	ReasonMissingJob                 = "MissingJob"
	ReasonUnknownTimeZone            = "UnknownTimeZone"
	ReasonUnparseableSchedule        = "UnparseableSchedule"
	ReasonUnParseableCronJobSchedule = "UnParseableCronJobSchedule"
	ReasonUnsupportedSchedule        = "UnsupportedSchedule"
	ReasonInvalidSchedule            = "InvalidSchedule"
	ReasonTooManyMissedTimes         = "TooManyMissedTimes"
	ReasonMissSchedule               = "MissSchedule"
	ReasonJobAlreadyActive           = "JobAlreadyActive"
	ReasonFailedGet                  = "FailedGet"
	ReasonFailedCreate               = "FailedCreate"
	ReasonSuccessfulCreate           = "SuccessfulCreate"
	ReasonFailedDelete               = "FailedDelete"
	ReasonSuccessfulDelete           = "SuccessfulDelete"
)

// sync reconciles the CronJob key ("namespace/name") and, when the CronJob has a next
// schedule time, queues the key again for it.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	after, err := c.syncCronJob(ctx, namespace, name)
	if err != nil {
		return err
	}
	if after != nil {
		log.V(4).Info("requeueing for the next schedule time", "after", *after)
		c.queue.AddAfter(key, *after)
	}
	return nil
}

// syncCronJob is one sync; it returns when to look at the CronJob again. As upstream, an
// error of the scheduling step does not retry the key when a next schedule time is known
// (that sync will retry it), but a failed status write always does.
func (c *Controller) syncCronJob(ctx context.Context, namespace, name string) (*time.Duration, error) {
	log := klog.FromContext(ctx)
	cached, err := c.cjLister.CronJobs(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("cronjob gone")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	jobs, err := c.jobsOf(cached)
	if err != nil {
		return nil, err
	}
	cj := cached.DeepCopy()
	pruned := c.pruneHistory(ctx, cj, jobs)
	cj, after, changed, syncErr := c.schedule(ctx, cj, jobs)
	if syncErr != nil {
		log.V(2).Info("error reconciling cronjob", "err", syncErr.Error())
	}
	if pruned || changed {
		if _, err := c.client.BatchV1().CronJobs(cj.Namespace).UpdateStatus(ctx, cj, metav1.UpdateOptions{}); err != nil {
			log.V(2).Info("unable to update cronjob status", "resourceVersion", cj.ResourceVersion, "err", err.Error())
			return nil, err
		}
	}
	if after != nil {
		return after, nil
	}
	return nil, syncErr
}

// schedule brings cj's status.active and lastSuccessfulTime up to date with its Jobs and
// starts the Job of its most recent unmet schedule time, if its policies allow. It returns
// cj (replaced by a fresh copy from the API server when the cache's was behind), when to
// sync again, and whether the status changed.
func (c *Controller) schedule(ctx context.Context, cj *batchv1.CronJob, jobs []*batchv1.Job) (*batchv1.CronJob, *time.Duration, bool, error) {
	log := klog.FromContext(ctx)
	now := c.clock.Now()
	changed := false

	owned := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		owned[string(j.UID)] = true
		listed := isActive(cj, j.UID)
		cond, done := finished(j)
		switch {
		case !listed && !done:
			// An unfinished Job of ours that status.active does not list: the cached
			// CronJob may be older than our own last status write; ask the API server.
			fresh, err := c.client.BatchV1().CronJobs(cj.Namespace).Get(ctx, cj.Name, metav1.GetOptions{})
			if err != nil {
				return cj, nil, changed, err
			}
			if isActive(fresh, j.UID) {
				cj = fresh
				continue
			}
			c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnexpectedJob,
				"Saw a job that the controller did not create or forgot: %s", j.Name)
		case done:
			if listed {
				removeActive(cj, j.UID)
				c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSawCompletedJob, "Saw completed job: %s, condition: %v", j.Name, cond)
				changed = true
			}
			if succeeded(j) {
				last := cj.Status.LastSuccessfulTime
				if last == nil || (j.Status.CompletionTime != nil && j.Status.CompletionTime.After(last.Time)) {
					cj.Status.LastSuccessfulTime = j.Status.CompletionTime
					changed = true
				}
			}
		}
	}

	// Jobs listed as active that the cache does not have: gone, unless the API server
	// still has them (a cache behind).
	for _, r := range cj.Status.Active {
		if owned[string(r.UID)] {
			continue
		}
		_, err := c.client.BatchV1().Jobs(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonMissingJob, "Active job went missing: %v", r.Name)
			removeActive(cj, r.UID)
			changed = true
		case err != nil:
			return cj, nil, changed, err
		}
	}

	if cj.DeletionTimestamp != nil {
		return cj, nil, changed, nil // being deleted: status only
	}
	if tz := cj.Spec.TimeZone; tz != nil {
		if _, err := time.LoadLocation(*tz); err != nil {
			log.V(4).Info("not starting job: invalid timeZone", "timeZone", *tz, "err", err.Error())
			c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnknownTimeZone, "invalid timeZone: %q: %s", *tz, err)
			return cj, nil, changed, nil
		}
	}
	if ptr.Deref(cj.Spec.Suspend, false) {
		log.V(4).Info("not starting job: suspended")
		return cj, nil, changed, nil
	}
	sched, err := parseSchedule(scheduleSpec(cj, c.recorder))
	if err != nil {
		log.V(2).Info("unparseable schedule", "schedule", cj.Spec.Schedule, "err", err.Error())
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonUnparseableSchedule, "unparseable schedule: %q : %s", cj.Spec.Schedule, err)
		return cj, nil, changed, nil
	}
	t, err := c.unmetScheduleTime(cj, now, sched)
	if err != nil {
		log.V(2).Info("invalid schedule", "schedule", cj.Spec.Schedule, "err", err.Error())
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonInvalidSchedule, "invalid schedule: %s : %s", cj.Spec.Schedule, err)
		return cj, nil, changed, nil
	}
	next := func() *time.Duration { d := requeueAfter(cj, now, sched); return &d }
	if t == nil {
		log.V(4).Info("no unmet start times")
		return cj, next(), changed, nil
	}
	if d := cj.Spec.StartingDeadlineSeconds; d != nil && t.Add(time.Duration(*d)*time.Second).Before(now) {
		log.V(4).Info("missed starting window", "scheduledTime", *t)
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonMissSchedule, "Missed scheduled time to start a job: %s", t.UTC().Format(time.RFC1123Z))
		return cj, next(), changed, nil
	}
	if isActiveByName(cj, cj.Namespace, jobName(cj, *t)) || cj.Status.LastScheduleTime.Equal(&metav1.Time{Time: *t}) {
		log.V(4).Info("not starting job: schedule time already processed", "scheduledTime", *t)
		return cj, next(), changed, nil
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ForbidConcurrent && len(cj.Status.Active) > 0 {
		log.V(4).Info("not starting job: a prior one is still running and concurrencyPolicy is Forbid")
		c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonJobAlreadyActive, "Not starting job because prior execution is running and concurrency policy is Forbid")
		return cj, next(), changed, nil
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ReplaceConcurrent {
		for _, r := range cj.Status.Active {
			log.V(4).Info("deleting job still running at the next schedule time", "job", r.Name)
			job, err := c.client.BatchV1().Jobs(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedGet, "Get job: %v", err)
				return cj, nil, changed, err
			}
			if !c.deleteJobOf(ctx, cj, job) {
				return cj, nil, changed, fmt.Errorf("could not replace job %s/%s", job.Namespace, job.Name)
			}
			changed = true
		}
	}

	want, err := newJob(cj, *t)
	if err != nil {
		log.Error(err, "unable to make job from template")
		return cj, nil, changed, err
	}
	job, err := c.client.BatchV1().Jobs(cj.Namespace).Create(ctx, want, metav1.CreateOptions{})
	existed := false
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return cj, nil, changed, err // every create fails until the namespace is gone
	case apierrors.IsAlreadyExists(err):
		// Either someone else made it, or we did and the status write that should have
		// listed it was lost (a crash, a handoff): adopt ours into status.active.
		existed = true
		job, err = c.client.BatchV1().Jobs(cj.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return cj, nil, changed, err
		}
		if !metav1.IsControlledBy(job, cj) || isActive(cj, job.UID) {
			return cj, nil, changed, nil
		}
	case err != nil:
		c.recorder.Eventf(cj, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating job: %v", err)
		return cj, nil, changed, err
	}
	if existed {
		log.Info("job already exists", "job", job.Name)
	} else {
		log.V(4).Info("created job", "job", job.Name, "scheduledTime", *t)
		c.recorder.Eventf(cj, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created job %v", job.Name)
	}
	cj.Status.Active = append(cj.Status.Active, jobRef(job))
	cj.Status.LastScheduleTime = &metav1.Time{Time: *t}
	return cj, next(), true, nil
}

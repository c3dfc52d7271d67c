package batch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const cronComponent = "cronjob-controller"

// A CronJob on a one-minute schedule runs once per schedule time: Jobs named
// <cronjob>-<minutes since the epoch> with the scheduled-timestamp annotation of that
// minute, consecutive, none twice; lastScheduleTime and lastSuccessfulTime follow, and
// with successfulJobsHistoryLimit 1 only the newest succeeded Job is kept.
func TestCronJobRunsOncePerSchedule(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	cronWaitNextMinute(10 * time.Second)
	e.createCronJob(newCronJob("every", "*/1 * * * *", func(cj *batchv1.CronJob) {
		cj.Spec.SuccessfulJobsHistoryLimit = ptr.To[int32](1)
	}))
	seen := map[string]time.Time{} // Job name → scheduled time, over the whole test
	record := func(jobs []batchv1.Job) error {
		for _, j := range jobs {
			ts, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation])
			if err != nil {
				return fmt.Errorf("job %s: scheduled-timestamp annotation: %v", j.Name, err)
			}
			if want := fmt.Sprintf("every-%d", ts.Unix()/60); j.Name != want {
				return fmt.Errorf("job %s scheduled at %s: want name %s", j.Name, ts, want)
			}
			if ts.Second() != 0 {
				return fmt.Errorf("job %s scheduled at %s, not on a minute", j.Name, ts)
			}
			seen[j.Name] = ts
		}
		return nil
	}
	e.eventually(200*time.Second, "two schedule times run and completed", func(ctx context.Context) error {
		jobs, err := e.jobsOf(ctx, "every")
		if err != nil {
			return err
		}
		if err := record(jobs); err != nil {
			t.Fatal(err)
		}
		cj, err := e.cronJob(ctx, "every")
		if err != nil {
			return err
		}
		if len(seen) < 2 || cj.Status.LastSuccessfulTime == nil || len(cj.Status.Active) > 0 {
			return fmt.Errorf("jobs seen %v, status %+v", seen, cj.Status)
		}
		// A Job just created at a schedule time is not yet in the status the controller
		// writes right after: until it is, status.active looks empty.
		for name, ts := range seen {
			if last := cj.Status.LastScheduleTime; last == nil || last.Time.Before(ts) {
				return fmt.Errorf("job %s scheduled at %s, lastScheduleTime %v: the status is behind", name, ts, last)
			}
		}
		return nil
	})
	// The history limit leaves the newest succeeded Job only.
	e.eventually(60*time.Second, "history limit 1", func(ctx context.Context) error {
		jobs, err := e.jobsOf(ctx, "every")
		if err != nil {
			return err
		}
		var done []string
		for _, j := range jobs {
			if cronFinishedAs(&j) == batchv1.JobComplete && j.DeletionTimestamp == nil {
				done = append(done, j.Name)
			}
		}
		if len(done) != 1 {
			return fmt.Errorf("succeeded jobs %v, want 1", done)
		}
		return nil
	})
	ctx := context.Background()
	cj, err := e.cronJob(ctx, "every")
	if err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	for _, ts := range seen {
		times = append(times, ts)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		if times[i].Sub(times[i-1]) != time.Minute {
			t.Errorf("schedule times %v are not consecutive minutes", times)
		}
	}
	if last := cj.Status.LastScheduleTime; last == nil || last.Time.Before(times[len(times)-1]) {
		t.Errorf("lastScheduleTime %v, latest job's time %v", last, times[len(times)-1])
	}
	creates := e.eventCount(ctx, "every", "SuccessfulCreate", cronComponent)
	if int(creates) < len(seen) {
		t.Errorf("%d SuccessfulCreate events for %d jobs", creates, len(seen))
	}
	e.waitEvent("every", "SuccessfulDelete") // of the job beyond the history limit
	if n := e.eventCount(ctx, "every", "UnexpectedJob", cronComponent); n != 0 {
		t.Errorf("%d UnexpectedJob events", n)
	}
	// kubectl reads it as on a stock cluster: not suspended, ACTIVE 0, LAST SCHEDULE set.
	out := e.kubectl("get", "cronjob", "every", "--no-headers")
	if c := cronColumns(out); c == nil || c.suspend != "False" || c.active != "0" || c.last == "<none>" {
		t.Errorf("kubectl get cronjob: %q", out)
	}
}

// Forbid: while a Job runs, the next schedule time starts nothing and says so.
func TestCronJobForbid(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	cronWaitNextMinute(10 * time.Second)
	e.createCronJob(newCronJob("forbid", "*/1 * * * *", stuck, func(cj *batchv1.CronJob) {
		cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent
	}))
	e.eventually(200*time.Second, "JobAlreadyActive at the second schedule time", func(ctx context.Context) error {
		if n := e.eventCount(ctx, "forbid", "JobAlreadyActive", cronComponent); n == 0 {
			return fmt.Errorf("no JobAlreadyActive event")
		}
		return nil
	})
	ctx := context.Background()
	jobs, err := e.jobsOf(ctx, "forbid")
	if err != nil {
		t.Fatal(err)
	}
	cj, err := e.cronJob(ctx, "forbid")
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || len(cj.Status.Active) != 1 || cj.Status.Active[0].Name != jobs[0].Name {
		t.Errorf("jobs %v, status.active %v: want the one first job", cronJobNames(jobs), cj.Status.Active)
	}
}

// Replace: at the next schedule time the running Job is deleted and a new one started.
func TestCronJobReplace(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	cronWaitNextMinute(10 * time.Second)
	e.createCronJob(newCronJob("replace", "*/1 * * * *", stuck, func(cj *batchv1.CronJob) {
		cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent
	}))
	var first string
	e.eventually(140*time.Second, "the first job", func(ctx context.Context) error {
		cj, err := e.cronJob(ctx, "replace")
		if err != nil {
			return err
		}
		if len(cj.Status.Active) != 1 {
			return fmt.Errorf("status.active %v", cj.Status.Active)
		}
		first = cj.Status.Active[0].Name
		return nil
	})
	e.eventually(100*time.Second, "the first job replaced by the second", func(ctx context.Context) error {
		cj, err := e.cronJob(ctx, "replace")
		if err != nil {
			return err
		}
		if len(cj.Status.Active) != 1 || cj.Status.Active[0].Name == first {
			return fmt.Errorf("status.active %v (first job %s)", cj.Status.Active, first)
		}
		jobs, err := e.jobsOf(ctx, "replace")
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if j.Name == first && j.DeletionTimestamp == nil {
				return fmt.Errorf("first job %s still there", first)
			}
		}
		return nil
	})
	e.waitEvent("replace", "SuccessfulDelete")
}

// `kubectl create job --from=cronjob/…` makes a Job of the CronJob's template, controlled
// by it; the controller does not list it as active (it did not create it), reports it,
// and takes its completion as the CronJob's lastSuccessfulTime, as upstream.
func TestKubectlCreateJobFromCronJob(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	e.createCronJob(newCronJob("manual", "0 0 1 1 *", func(cj *batchv1.CronJob) { cj.Spec.Suspend = ptr.To(true) }))
	e.kubectl("create", "job", "by-hand", "--from=cronjob/manual")
	e.eventually(90*time.Second, "the manual job completes and counts as the CronJob's success", func(ctx context.Context) error {
		j, err := e.cs.BatchV1().Jobs(e.ns).Get(ctx, "by-hand", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cronFinishedAs(j) != batchv1.JobComplete {
			return fmt.Errorf("job status %+v", j.Status)
		}
		if j.Annotations["cronjob.kubernetes.io/instantiate"] != "manual" || j.Labels["cronjob"] != "manual" {
			return fmt.Errorf("job metadata: labels %v annotations %v", j.Labels, j.Annotations)
		}
		cj, err := e.cronJob(ctx, "manual")
		if err != nil {
			return err
		}
		if cj.Status.LastSuccessfulTime == nil || !cj.Status.LastSuccessfulTime.Equal(j.Status.CompletionTime) {
			return fmt.Errorf("lastSuccessfulTime %v, job completed at %v", cj.Status.LastSuccessfulTime, j.Status.CompletionTime)
		}
		return nil
	})
	out := e.kubectl("get", "cronjob", "manual", "--no-headers")
	if c := cronColumns(out); c == nil || c.suspend != "True" || c.active != "0" || c.last != "<none>" {
		t.Errorf("kubectl get cronjob: %q (want suspended, 0 active, no last schedule)", out)
	}
}

// columns are the last columns of a `kubectl get cronjob --no-headers` line (NAME,
// SCHEDULE (which has spaces), TIMEZONE, SUSPEND, ACTIVE, LAST SCHEDULE, AGE).
type columns struct{ timeZone, suspend, active, last, age string }

func cronColumns(line string) *columns {
	f := strings.Fields(line)
	n := len(f)
	if n < 7 {
		return nil
	}
	return &columns{timeZone: f[n-5], suspend: f[n-4], active: f[n-3], last: f[n-2], age: f[n-1]}
}

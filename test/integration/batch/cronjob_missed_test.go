package batch

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// catchUp gives a suspended CronJob the lastScheduleTime last (as if its controller had
// been down since), then resumes it.
func (e *cronEnv) catchUp(name string, last time.Time) {
	e.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cj, err := e.cronJob(ctx, name)
		if err != nil {
			return err
		}
		cj.Status.LastScheduleTime = ptr.To(metav1.NewTime(last))
		_, err = e.cs.BatchV1().CronJobs(e.ns).UpdateStatus(ctx, cj, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("cronjob %s: lastScheduleTime: %v", name, err)
	}
	e.kubectl("patch", "cronjob/"+name, "--type=merge", "-p", `{"spec":{"suspend":false}}`)
}

// Missed schedules, without waiting for one: a CronJob whose lastScheduleTime lies three
// hours back on a one-minute schedule has missed more than 100 start times (the
// TooManyMissedTimes warning) and starts only the latest; one with a daily schedule in
// Asia/Kolkata (UTC+5:30) whose time passed ten minutes ago starts that day's run,
// scheduled at that local time (Job name and scheduled-timestamp annotation), and kubectl
// shows its time zone.
func TestCronJobMissedStartTimes(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	daily := resumed.In(kolkata).Add(-10 * time.Minute).Truncate(time.Minute)
	e.createCronJob(newCronJob("minutely", "*/1 * * * *", func(cj *batchv1.CronJob) { cj.Spec.Suspend = ptr.To(true) }))
	e.createCronJob(newCronJob("daily", fmt.Sprintf("%d %d * * *", daily.Minute(), daily.Hour()), func(cj *batchv1.CronJob) {
		cj.Spec.Suspend = ptr.To(true)
		cj.Spec.TimeZone = ptr.To("Asia/Kolkata")
	}))
	e.catchUp("minutely", resumed.Add(-3*time.Hour))
	e.catchUp("daily", resumed.Add(-25*time.Hour))

	e.eventually(30*time.Second, "the latest missed minute started, with TooManyMissedTimes", func(ctx context.Context) error {
		jobs, err := e.jobsOf(ctx, "minutely")
		if err != nil {
			return err
		}
		if len(jobs) == 0 {
			return fmt.Errorf("no job")
		}
		if n := e.eventCount(ctx, "minutely", "TooManyMissedTimes", cronComponent); n == 0 {
			return fmt.Errorf("no TooManyMissedTimes event")
		}
		for _, j := range jobs {
			ts, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation])
			if err != nil {
				t.Fatalf("job %s: %v", j.Name, err)
			}
			if ts.Before(resumed.Truncate(time.Minute)) {
				t.Fatalf("job %s scheduled at %s, before the latest missed time %s: a missed time other than the latest ran", j.Name, ts, resumed.Truncate(time.Minute))
			}
		}
		return nil
	})

	e.eventually(30*time.Second, "today's daily run started at its Kolkata time", func(ctx context.Context) error {
		jobs, err := e.jobsOf(ctx, "daily")
		if err != nil {
			return err
		}
		if len(jobs) != 1 {
			return fmt.Errorf("jobs %v", cronJobNames(jobs))
		}
		j := jobs[0]
		if want := fmt.Sprintf("daily-%d", daily.Unix()/60); j.Name != want {
			t.Errorf("job %s, want %s", j.Name, want)
		}
		if got, want := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation], daily.Format(time.RFC3339); got != want {
			t.Errorf("scheduled-timestamp %q, want %q", got, want)
		}
		cj, err := e.cronJob(ctx, "daily")
		if err != nil {
			return err
		}
		if last := cj.Status.LastScheduleTime; last == nil || !last.Time.Equal(daily) {
			return fmt.Errorf("lastScheduleTime %v, want %s", last, daily)
		}
		return nil
	})
	if n := e.eventCount(context.Background(), "daily", "TooManyMissedTimes", cronComponent); n != 0 {
		t.Errorf("%d TooManyMissedTimes events for two missed daily times", n)
	}
	if c := cronColumns(e.kubectl("get", "cronjob", "daily", "--no-headers")); c == nil || c.timeZone != "Asia/Kolkata" {
		t.Errorf("kubectl get cronjob columns %+v", c)
	}
}

// failedJobsHistoryLimit: of the failed Jobs of a CronJob only the newest limit stay; the
// older are deleted (SuccessfulDelete). The Jobs are made with
// `kubectl create job --from=cronjob/…`, which the CronJob controls.
func TestCronJobFailedJobsHistoryLimit(t *testing.T) {
	t.Parallel()
	e := newCronEnv(t)
	e.createCronJob(newCronJob("history", "0 0 1 1 *", func(cj *batchv1.CronJob) {
		cj.Spec.Suspend = ptr.To(true)
		cj.Spec.FailedJobsHistoryLimit = ptr.To[int32](1)
		js := &cj.Spec.JobTemplate.Spec
		js.BackoffLimit = ptr.To[int32](0)
		js.Template.Labels = map[string]string{kwokLabel: "fail"}
	}))
	failed := func(name string) {
		e.eventually(60*time.Second, "job "+name+" failed", func(ctx context.Context) error {
			j, err := e.cs.BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cronFinishedAs(j) != batchv1.JobFailed {
				return fmt.Errorf("status %+v", j.Status)
			}
			return nil
		})
	}
	e.kubectl("create", "job", "first", "--from=cronjob/history")
	failed("first")
	e.kubectl("create", "job", "second", "--from=cronjob/history")
	failed("second")
	e.eventually(30*time.Second, "the older failed job deleted", func(ctx context.Context) error {
		jobs, err := e.jobsOf(ctx, "history")
		if err != nil {
			return err
		}
		var left []string
		for _, j := range jobs {
			if j.DeletionTimestamp == nil {
				left = append(left, j.Name)
			}
		}
		if len(left) != 1 || left[0] != "second" {
			return fmt.Errorf("jobs %v, want only second", left)
		}
		return nil
	})
	e.eventually(15*time.Second, "the SuccessfulDelete event", func(ctx context.Context) error {
		for _, ev := range e.events(ctx, "history") {
			if ev.Reason == "SuccessfulDelete" && ev.Source.Component == cronComponent && ev.Type == corev1.EventTypeNormal && ev.Message == "Deleted job first" {
				return nil
			}
		}
		return fmt.Errorf("no SuccessfulDelete event \"Deleted job first\"")
	})
}

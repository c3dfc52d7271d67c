package cronjob

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestHandlers(t *testing.T) {
	cj := newCronJob("cron", "*/5 * * * *", lastScheduled(t0))
	other := newCronJob("other", "@hourly")
	mine := jobOf(cj, t0)
	orphan := jobOf(cj, t0)
	orphan.OwnerReferences = nil
	stranger := jobOf(cj, t0)
	stranger.OwnerReferences[0].UID = "uid-of-a-namesake"
	bumped := func(j *batchv1.Job) *batchv1.Job { j = j.DeepCopy(); j.ResourceVersion = "2"; return j }
	withSchedule := func(s string) *batchv1.CronJob { c := cj.DeepCopy(); c.Spec.Schedule = s; return c }
	withZone := func(z string) *batchv1.CronJob { c := cj.DeepCopy(); timeZone(z)(c); return c }
	withSuspend := func() *batchv1.CronJob { c := cj.DeepCopy(); suspended()(c); return c }

	for _, tc := range []struct {
		name       string
		event      func(f *fixture)
		wantKeys   []string
		wantAfter  map[string]time.Duration
		wantEvents []string
	}{
		{name: "cronjob added", event: func(f *fixture) { f.ctrl.addCronJob(other) }, wantKeys: []string{"ns/other"}},
		{name: "cronjob deleted (tombstone)", event: func(f *fixture) {
			f.ctrl.deleteCronJob(toolscache.DeletedFinalStateUnknown{Key: "ns/other", Obj: other})
		}, wantKeys: []string{"ns/other"}},
		{name: "spec change other than the schedule: now", event: func(f *fixture) {
			f.ctrl.updateCronJob(controllertest.Logger(f.T), cj, withSuspend())
		}, wantKeys: []string{key}},
		{name: "schedule change: at the next time of the new schedule", event: func(f *fixture) {
			f.ctrl.updateCronJob(controllertest.Logger(f.T), cj, withSchedule("*/2 * * * *"))
		}, wantAfter: map[string]time.Duration{key: 60*time.Second + nextScheduleDelta}},
		{name: "time zone change too", event: func(f *fixture) {
			f.ctrl.updateCronJob(controllertest.Logger(f.T), cj, withZone("UTC"))
		}, wantAfter: map[string]time.Duration{key: 4*time.Minute + nextScheduleDelta}},
		{name: "an unparseable new schedule: an event, no enqueue", event: func(f *fixture) {
			f.ctrl.updateCronJob(controllertest.Logger(f.T), cj, withSchedule("never"))
		}, wantEvents: []string{"Warning UnParseableCronJobSchedule"}},
		{name: "job added: its CronJob", event: func(f *fixture) { f.ctrl.addJob(mine) }, wantKeys: []string{key}},
		{name: "orphan job: nothing", event: func(f *fixture) { f.ctrl.addJob(orphan) }},
		{name: "job of a namesake CronJob (UID differs): nothing", event: func(f *fixture) { f.ctrl.addJob(stranger) }},
		{name: "job updated", event: func(f *fixture) { f.ctrl.updateJob(mine, bumped(mine)) }, wantKeys: []string{key}},
		{name: "job resync (same resourceVersion): nothing", event: func(f *fixture) { f.ctrl.updateJob(mine, mine) }},
		{name: "job released: its old CronJob", event: func(f *fixture) { f.ctrl.updateJob(mine, bumped(orphan)) },
			wantKeys: []string{key}},
		{name: "job deleted (tombstone)", event: func(f *fixture) {
			f.ctrl.deleteJob(toolscache.DeletedFinalStateUnknown{Key: "ns/" + mine.Name, Obj: mine})
		}, wantKeys: []string{key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t0.Add(time.Minute), cj, other)
			tc.event(f)
			if got := f.Queue.Keys(); !slices.Equal(got, tc.wantKeys) {
				t.Errorf("queued %v, want %v", got, tc.wantKeys)
			}
			got := f.Queue.Delayed()
			if len(got) != len(tc.wantAfter) {
				t.Errorf("delayed %v, want %v", got, tc.wantAfter)
			}
			for k, d := range tc.wantAfter {
				if got[k] != d {
					t.Errorf("delayed %s after %v, want %v", k, got[k], d)
				}
			}
			if got := f.reasons(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events %v, want %v", got, tc.wantEvents)
			}
		})
	}
}

func TestJobIndex(t *testing.T) {
	cj := newCronJob("cron", "@hourly")
	mine, orphan := jobOf(cj, t0), jobOf(cj, t0.Add(time.Hour))
	orphan.OwnerReferences = []metav1.OwnerReference{}
	f := newFixture(t, t0, cj, mine, orphan)
	got, err := f.ctrl.jobsOf(cj)
	if err != nil || len(got) != 1 || got[0].Name != mine.Name {
		t.Errorf("jobsOf = %v, %v", got, err)
	}
}

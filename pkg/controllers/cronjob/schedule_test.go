package cronjob

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/tools/record"
)

func TestScheduleSpec(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cj        *batchv1.CronJob
		want      string
		wantEvent bool
	}{
		{name: "plain", cj: newCronJob("a", "*/5 * * * *"), want: "*/5 * * * *"},
		{name: "timeZone prefixes TZ=", cj: newCronJob("a", "0 9 * * *", timeZone("Asia/Tokyo")), want: "TZ=Asia/Tokyo 0 9 * * *"},
		{name: "unknown timeZone is left out", cj: newCronJob("a", "0 9 * * *", timeZone("Mars/Olympus")), want: "0 9 * * *"},
		{name: "TZ in the schedule is kept, with a warning", cj: newCronJob("a", "TZ=UTC 0 9 * * *", timeZone("Asia/Tokyo")),
			want: "TZ=UTC 0 9 * * *", wantEvent: true},
		{name: "CRON_TZ too", cj: newCronJob("a", "CRON_TZ=UTC @hourly"), want: "CRON_TZ=UTC @hourly", wantEvent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			if got := scheduleSpec(tc.cj, rec); got != tc.want {
				t.Errorf("scheduleSpec = %q, want %q", got, tc.want)
			}
			if got := len(rec.Events) == 1; got != tc.wantEvent {
				t.Errorf("UnsupportedSchedule event: %v, want %v", got, tc.wantEvent)
			}
			if scheduleSpec(tc.cj, nil) != tc.want {
				t.Error("without a recorder the spec differs")
			}
		})
	}
}

func TestParseSchedule(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		wantErr bool
	}{
		{spec: "*/1 * * * *"}, {spec: "@hourly"}, {spec: "@daily"}, {spec: "@every 90s"},
		{spec: "30 6-16/4 * * 1-5"}, {spec: "TZ=Europe/Paris 0 9 * * *"},
		{spec: "", wantErr: true}, {spec: "* * * *", wantErr: true}, {spec: "61 * * * *", wantErr: true},
		{spec: "@fortnightly", wantErr: true}, {spec: "TZ=Nowhere/Land * * * * *", wantErr: true},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := parseSchedule(tc.spec)
			if (err != nil) != tc.wantErr {
				t.Errorf("parseSchedule(%q) error = %v, want error %v", tc.spec, err, tc.wantErr)
			}
		})
	}
}

func TestUnmetScheduleTime(t *testing.T) {
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	for _, tc := range []struct {
		name          string
		cj            *batchv1.CronJob
		now           time.Time
		want          *time.Time
		wantTooMany   bool
		wantErr       bool
		wantRequeueIn time.Duration
	}{
		{name: "before the first schedule time", cj: newCronJob("a", "*/1 * * * *", createdAt(t0.Add(-10*time.Second))),
			now: t0.Add(-5 * time.Second), wantRequeueIn: 5*time.Second + nextScheduleDelta},
		{name: "the first schedule time fell", cj: newCronJob("a", "*/1 * * * *", createdAt(t0.Add(-10*time.Second))),
			now: t0.Add(30 * time.Second), want: at(0), wantRequeueIn: 30*time.Second + nextScheduleDelta},
		{name: "the time of lastScheduleTime is not unmet", cj: newCronJob("a", "*/1 * * * *", lastScheduled(t0)),
			now: t0.Add(30 * time.Second), wantRequeueIn: 30*time.Second + nextScheduleDelta},
		{name: "several missed: the most recent", cj: newCronJob("a", "@hourly", lastScheduled(t0)),
			now: t0.Add(5*time.Hour + 30*time.Minute), want: at(5 * time.Hour), wantRequeueIn: 30*time.Minute + nextScheduleDelta},
		{name: "irregular schedule", cj: newCronJob("a", "30 6-16/4 * * 1-5", lastScheduled(time.Date(2026, 4, 27, 6, 30, 0, 0, time.UTC))),
			// Monday 27 April 06:30 → Friday 1 May 12:00: the last was Friday 10:30.
			now: t0, want: ptrTime(time.Date(2026, 5, 1, 10, 30, 0, 0, time.UTC)), wantRequeueIn: 2*time.Hour + 30*time.Minute + nextScheduleDelta},
		{name: "startingDeadlineSeconds hides older times", cj: newCronJob("a", "*/1 * * * *", lastScheduled(t0.Add(-time.Hour)), deadline(10)),
			now: t0.Add(30 * time.Second), wantRequeueIn: 30*time.Second + nextScheduleDelta},
		{name: "within startingDeadlineSeconds", cj: newCronJob("a", "*/1 * * * *", lastScheduled(t0.Add(-time.Hour)), deadline(60)),
			now: t0.Add(30 * time.Second), want: at(0), wantRequeueIn: 30*time.Second + nextScheduleDelta},
		{name: "more than 100 missed", cj: newCronJob("a", "*/1 * * * *", createdAt(t0.Add(-3*time.Hour))),
			now: t0.Add(time.Second), want: at(0), wantTooMany: true, wantRequeueIn: 59*time.Second + nextScheduleDelta},
		{name: "exactly 100 missed is not too many", cj: newCronJob("a", "*/1 * * * *", createdAt(t0.Add(-100*time.Minute))),
			now: t0.Add(time.Second), want: at(0), wantRequeueIn: 59*time.Second + nextScheduleDelta},
		{name: "a deadline bounds the count", cj: newCronJob("a", "*/1 * * * *", createdAt(t0.Add(-3*time.Hour)), deadline(200)),
			now: t0.Add(time.Second), want: at(0), wantRequeueIn: 59*time.Second + nextScheduleDelta},
		{name: "time zone", cj: newCronJob("a", "0 9 * * *", timeZone("Asia/Tokyo"), createdAt(t0.Add(-48*time.Hour))),
			// 09:00 in Tokyo is 00:00 UTC; now is 12:00 UTC on 1 May.
			now: t0, want: at(-12 * time.Hour), wantRequeueIn: 12*time.Hour + nextScheduleDelta},
		{name: "@every counts from the last schedule time", cj: newCronJob("a", "@every 90s", lastScheduled(t0)),
			now: t0.Add(200 * time.Second), want: at(180 * time.Second), wantRequeueIn: 70*time.Second + nextScheduleDelta},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.now)
			sched, err := parseSchedule(scheduleSpec(tc.cj, nil))
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.ctrl.unmetScheduleTime(tc.cj, tc.now, sched)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error %v", err, tc.wantErr)
			}
			if !equalTimes(got, tc.want) {
				t.Errorf("unmet = %v, want %v", got, tc.want)
			}
			if tooMany := len(f.Events()) > 0; tooMany != tc.wantTooMany {
				t.Errorf("TooManyMissedTimes event: %v, want %v", tooMany, tc.wantTooMany)
			}
			cj := tc.cj.DeepCopy()
			if got != nil {
				cj.Status.LastScheduleTime = metaTime(*got) // as after the Job was created
			}
			if d := requeueAfter(cj, tc.now, sched); d != tc.wantRequeueIn {
				t.Errorf("requeueAfter = %v, want %v", d, tc.wantRequeueIn)
			}
		})
	}
}

// A schedule that parses but never falls is an error, and requeues from now.
func TestImpossibleSchedule(t *testing.T) {
	cj := newCronJob("a", "59 23 31 2 *")
	sched, err := parseSchedule(cj.Spec.Schedule)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := missedSince(cj, t0, sched, true); err == nil {
		t.Error("no error for 31 February")
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

func equalTimes(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

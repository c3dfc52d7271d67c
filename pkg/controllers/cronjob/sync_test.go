package cronjob

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	core "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const key = "ns/cron"

func TestSync(t *testing.T) {
	min := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	every := func(opts ...cjOpt) *batchv1.CronJob {
		return newCronJob("cron", "*/1 * * * *", append([]cjOpt{lastScheduled(min(-1))}, opts...)...)
	}
	base := every()
	prev := jobOf(base, min(-1))
	prevDone := jobOf(base, min(-1), completeAt(min(-1).Add(20*time.Second)))
	prevFailed := jobOf(base, min(-1), failedAt(min(-1).Add(20*time.Second)))

	for _, tc := range []struct {
		name      string
		cj        *batchv1.CronJob
		jobs      []*batchv1.Job // in the cache and the API
		apiOnly   []*batchv1.Job // in the API, not yet in the cache
		now       time.Time
		createErr error

		wantCreate   string   // the name of the Job created, if any
		wantDeletes  []string // Jobs deleted
		wantReasons  []string // "Type Reason" of the events, sorted
		wantActive   []string // status.active after the sync (when the status is written)
		wantLast     *time.Time
		wantSuccess  *time.Time
		wantNoStatus bool
		wantRequeue  time.Duration // 0: none
		wantErr      bool
	}{
		{name: "nothing due yet", cj: every(), now: min(0).Add(-time.Second) /* 11:59:59 */, wantNoStatus: true,
			wantRequeue: time.Second + nextScheduleDelta},
		{name: "a schedule time fell: its Job is created", cj: every(), now: min(0).Add(2 * time.Second),
			wantCreate: "cron-29627280", wantReasons: []string{"Normal SuccessfulCreate"}, wantActive: []string{"cron-29627280"},
			wantLast: ptrTime(min(0)), wantRequeue: 58*time.Second + nextScheduleDelta},
		{name: "already processed: lastScheduleTime", cj: every(lastScheduled(min(0))), now: min(0).Add(2 * time.Second),
			wantNoStatus: true, wantRequeue: 58*time.Second + nextScheduleDelta},
		{name: "already processed: in status.active by name", cj: every(active(jobOf(base, min(0)))), jobs: []*batchv1.Job{jobOf(base, min(0))},
			now: min(0).Add(2 * time.Second), wantNoStatus: true, wantRequeue: 58*time.Second + nextScheduleDelta},
		{name: "Allow runs beside an active Job", cj: every(active(prev)), jobs: []*batchv1.Job{prev}, now: min(0),
			wantCreate: "cron-29627280", wantReasons: []string{"Normal SuccessfulCreate"},
			wantActive: []string{prev.Name, "cron-29627280"}, wantLast: ptrTime(min(0)), wantRequeue: time.Minute + nextScheduleDelta},
		{name: "Forbid skips while a Job is active", cj: every(policy(batchv1.ForbidConcurrent), active(prev)), jobs: []*batchv1.Job{prev},
			now: min(0), wantReasons: []string{"Normal JobAlreadyActive"}, wantNoStatus: true, wantRequeue: time.Minute + nextScheduleDelta},
		{name: "Forbid runs when the active Job finished", cj: every(policy(batchv1.ForbidConcurrent), active(prevDone)),
			jobs: []*batchv1.Job{prevDone}, now: min(0),
			wantCreate: "cron-29627280", wantReasons: []string{"Normal SawCompletedJob", "Normal SuccessfulCreate"},
			wantActive: []string{"cron-29627280"}, wantLast: ptrTime(min(0)), wantSuccess: ptrTime(min(-1).Add(20 * time.Second)),
			wantRequeue: time.Minute + nextScheduleDelta},
		{name: "Replace deletes the active Job first", cj: every(policy(batchv1.ReplaceConcurrent), active(prev)), jobs: []*batchv1.Job{prev},
			now: min(0), wantCreate: "cron-29627280", wantDeletes: []string{prev.Name},
			wantReasons: []string{"Normal SuccessfulCreate", "Normal SuccessfulDelete"},
			wantActive:  []string{"cron-29627280"}, wantLast: ptrTime(min(0)), wantRequeue: time.Minute + nextScheduleDelta},
		{name: "a failed Job leaves status.active, lastSuccessfulTime unchanged", cj: every(lastScheduled(min(0)), active(prevFailed)),
			jobs: []*batchv1.Job{prevFailed}, now: min(0).Add(30 * time.Second),
			wantReasons: []string{"Normal SawCompletedJob"}, wantActive: []string{}, wantLast: ptrTime(min(0)),
			wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "a succeeded Job not listed still sets lastSuccessfulTime", cj: every(lastScheduled(min(0))),
			jobs: []*batchv1.Job{prevDone}, now: min(0).Add(30 * time.Second),
			wantLast: ptrTime(min(0)), wantSuccess: ptrTime(min(-1).Add(20 * time.Second)), wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "an active Job gone from cache and API is missing", cj: every(lastScheduled(min(0)), active(prev)),
			now: min(0).Add(30 * time.Second), wantReasons: []string{"Normal MissingJob"}, wantActive: []string{},
			wantLast: ptrTime(min(0)), wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "an active Job the cache lacks but the API has stays", cj: every(lastScheduled(min(0)), active(prev)),
			apiOnly: []*batchv1.Job{prev}, now: min(0).Add(30 * time.Second),
			wantNoStatus: true, wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "an unexpected Job is reported, not adopted", cj: every(lastScheduled(min(0))),
			jobs: []*batchv1.Job{jobOf(base, min(-5))}, now: min(0).Add(30 * time.Second),
			wantReasons: []string{"Warning UnexpectedJob"}, wantNoStatus: true, wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "past startingDeadlineSeconds: MissSchedule", cj: every(deadline(10)), now: min(0).Add(30 * time.Second),
			// The deadline hides 12:00 from the search: nothing unmet, requeue at 12:01.
			wantNoStatus: true, wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "within startingDeadlineSeconds", cj: every(deadline(60)), now: min(0).Add(30 * time.Second),
			wantCreate: "cron-29627280", wantReasons: []string{"Normal SuccessfulCreate"}, wantActive: []string{"cron-29627280"},
			wantLast: ptrTime(min(0)), wantRequeue: 30*time.Second + nextScheduleDelta},
		{name: "too many missed: warns and runs the latest", cj: newCronJob("cron", "*/1 * * * *", createdAt(t0.Add(-3*time.Hour))),
			now: min(0), wantCreate: "cron-29627280", wantReasons: []string{"Normal SuccessfulCreate", "Warning TooManyMissedTimes"},
			wantActive: []string{"cron-29627280"}, wantLast: ptrTime(min(0)), wantRequeue: time.Minute + nextScheduleDelta},
		{name: "suspended: no Job, no requeue", cj: every(suspended()), now: min(0), wantNoStatus: true},
		{name: "suspended still tracks its Jobs", cj: every(suspended(), active(prevDone)), jobs: []*batchv1.Job{prevDone}, now: min(0),
			wantReasons: []string{"Normal SawCompletedJob"}, wantActive: []string{}, wantLast: ptrTime(min(-1)),
			wantSuccess: ptrTime(min(-1).Add(20 * time.Second))},
		{name: "being deleted: no Job", cj: every(deletingCJ()), now: min(0), wantNoStatus: true},
		{name: "unknown time zone", cj: every(timeZone("Mars/Olympus")), now: min(0),
			wantReasons: []string{"Warning UnknownTimeZone"}, wantNoStatus: true},
		{name: "unparseable schedule", cj: newCronJob("cron", "every minute"), now: min(0),
			wantReasons: []string{"Warning UnparseableSchedule"}, wantNoStatus: true},
		{name: "impossible schedule", cj: newCronJob("cron", "59 23 31 2 *"), now: min(0),
			wantReasons: []string{"Warning InvalidSchedule"}, wantNoStatus: true},
		{name: "TZ in the schedule warns but runs", cj: newCronJob("cron", "TZ=UTC */1 * * * *", lastScheduled(min(-1))), now: min(0),
			wantCreate: "cron-29627280", wantReasons: []string{"Normal SuccessfulCreate", "Warning UnsupportedSchedule"},
			wantActive: []string{"cron-29627280"}, wantLast: ptrTime(min(0)), wantRequeue: time.Minute + nextScheduleDelta},
		{name: "history limits prune before scheduling", cj: every(history(ptrInt32(0), nil)), jobs: []*batchv1.Job{prevDone},
			now: min(0), wantCreate: "cron-29627280", wantDeletes: []string{prevDone.Name},
			wantReasons: []string{"Normal SuccessfulCreate", "Normal SuccessfulDelete"}, wantActive: []string{"cron-29627280"},
			// As upstream: the Job just deleted still counts for lastSuccessfulTime.
			wantLast: ptrTime(min(0)), wantSuccess: ptrTime(min(-1).Add(20 * time.Second)), wantRequeue: time.Minute + nextScheduleDelta},
		{name: "a failed create is an error and an event", cj: every(), now: min(0), createErr: errors.New("boom"),
			wantCreate: "cron-29627280", wantReasons: []string{"Warning FailedCreate"}, wantNoStatus: true, wantErr: true},
		{name: "a terminating namespace: error, no event", cj: every(), now: min(0),
			createErr:  controllertest.TerminatingNamespaceError(schema.GroupResource{Group: "batch", Resource: "jobs"}, "ns"),
			wantCreate: "cron-29627280", wantNoStatus: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.now, objs(tc.cj, tc.jobs...)...)
			for _, j := range tc.apiOnly {
				if err := f.Client.Tracker().Add(j); err != nil {
					t.Fatal(err)
				}
			}
			if tc.createErr != nil {
				f.Client.PrependReactor("create", "jobs", func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.createErr
				})
			}
			err := f.Sync(key)
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			var created string
			if js := f.createdJobs(); len(js) > 1 {
				t.Fatalf("%d jobs created", len(js))
			} else if len(js) == 1 {
				created = js[0].Name
			}
			if created != tc.wantCreate {
				t.Errorf("created %q, want %q", created, tc.wantCreate)
			}
			var deleted []string
			for _, a := range f.actions() {
				if name, ok := strings.CutPrefix(a, "delete jobs "); ok {
					deleted = append(deleted, name)
				}
			}
			if !slices.Equal(deleted, tc.wantDeletes) {
				t.Errorf("deleted %v, want %v", deleted, tc.wantDeletes)
			}
			if got := f.reasons(); !slices.Equal(got, tc.wantReasons) {
				t.Errorf("events %v, want %v", got, tc.wantReasons)
			}
			st := f.lastStatus()
			switch {
			case tc.wantNoStatus && st != nil:
				t.Errorf("status written: %+v", st.Status)
			case !tc.wantNoStatus && st == nil:
				t.Errorf("no status written")
			case st != nil:
				var names []string
				for _, r := range st.Status.Active {
					names = append(names, r.Name)
				}
				if !slices.Equal(names, tc.wantActive) {
					t.Errorf("status.active %v, want %v", names, tc.wantActive)
				}
				if !equalTimes(timeOf(st.Status.LastScheduleTime), tc.wantLast) {
					t.Errorf("lastScheduleTime %v, want %v", st.Status.LastScheduleTime, tc.wantLast)
				}
				if !equalTimes(timeOf(st.Status.LastSuccessfulTime), tc.wantSuccess) {
					t.Errorf("lastSuccessfulTime %v, want %v", st.Status.LastSuccessfulTime, tc.wantSuccess)
				}
			}
			d, ok := f.Queue.After(key)
			switch {
			case tc.wantRequeue == 0 && ok:
				t.Errorf("requeued after %v, want no requeue", d)
			case tc.wantRequeue != 0 && d != tc.wantRequeue:
				t.Errorf("requeued after %v (%v), want %v", d, ok, tc.wantRequeue)
			}
		})
	}
}

// The Job of a schedule time is created once, whoever syncs: a sync that finds it already
// there (its creator's status write was lost to a crash or a handoff) adopts it into
// status.active instead of creating another, and a sync after that does nothing.
func TestScheduleRunsOnceAcrossOwners(t *testing.T) {
	at := t0.Add(2 * time.Second)
	cj := newCronJob("cron", "*/1 * * * *", lastScheduled(t0.Add(-time.Minute)))

	// The old owner creates the Job of 12:00, and its status write fails.
	old := newFixture(t, at, cj)
	old.Client.PrependReactor("update", "cronjobs", func(a core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "cronjobs"}, "cron", errors.New("fenced"))
	})
	if err := old.Sync(key); err == nil {
		t.Fatal("the old owner's sync did not fail")
	}
	jobs := old.apiJobs()
	if len(jobs) != 1 {
		t.Fatalf("old owner created %d jobs", len(jobs))
	}
	job := jobs[0]

	// The new owner starts with the objects as the API server has them, and syncs every
	// CronJob of the namespace when it starts working it.
	for _, delay := range []time.Duration{0, 30 * time.Second} {
		nu := newFixture(t, at.Add(delay), cj, job)
		nu.MustSync(key)
		if n := len(nu.apiJobs()); n != 1 {
			t.Fatalf("new owner (after %v): %d jobs in the API, want 1", delay, n)
		}
		// It tried to create it (the name is the lock), found it, and listed it.
		acts := nu.actions()
		if !slices.Contains(acts, "get jobs "+job.Name) {
			t.Errorf("actions %v", acts)
		}
		st := nu.lastStatus()
		if st == nil || len(st.Status.Active) != 1 || st.Status.Active[0].UID != job.UID ||
			!st.Status.LastScheduleTime.Time.Equal(t0) {
			t.Fatalf("status after adoption: %+v", st)
		}
		if got := nu.reasons(); !slices.Equal(got, []string{"Warning UnexpectedJob"}) {
			t.Errorf("events %v", got)
		}
		// Its next sync (the status now in the cache) does nothing until 12:01.
		nu.Cache(st)
		nu.Client.ClearActions()
		nu.MustSync(key)
		if acts := nu.actions(); len(acts) != 0 {
			t.Errorf("second sync acted: %v", acts)
		}
		if d, _ := nu.Queue.After(key); d != time.Minute-2*time.Second-delay+nextScheduleDelta {
			t.Errorf("requeue after %v", d)
		}
	}
}

// A schedule time that fell while nobody worked the namespace runs once on the new owner
// when it is within startingDeadlineSeconds, and not at all past it.
func TestScheduleMissedDuringHandoff(t *testing.T) {
	for _, tc := range []struct {
		name       string
		late       time.Duration
		wantCreate bool
		wantEvents []string
	}{
		{name: "within the deadline", late: 20 * time.Second, wantCreate: true, wantEvents: []string{"Normal SuccessfulCreate"}},
		{name: "past the deadline", late: 45 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cj := newCronJob("cron", "*/1 * * * *", lastScheduled(t0.Add(-time.Minute)), deadline(30))
			f := newFixture(t, t0.Add(tc.late), cj)
			f.MustSync(key)
			created := f.createdJobs()
			if (len(created) == 1) != tc.wantCreate || len(created) > 1 {
				t.Fatalf("created %d jobs", len(created))
			}
			if got := f.reasons(); !slices.Equal(got, tc.wantEvents) {
				t.Errorf("events %v, want %v", got, tc.wantEvents)
			}
			if !tc.wantCreate {
				return
			}
			// A second enqueue of the key before the status reached the cache: the Job
			// is in the cache but not in the cached status.active; the API server's
			// CronJob lists it, and that is the one the sync goes on with: nothing is
			// created and nothing reported.
			f.Cache(f.apiJobs()[0])
			f.Client.ClearActions()
			f.MustSync(key)
			if n := len(f.apiJobs()); n != 1 {
				t.Errorf("after the second sync %d jobs in the API, want 1", n)
			}
			if got := f.reasons(); len(got) != 0 {
				t.Errorf("second sync recorded %v", got)
			}
		})
	}
}

// The scheduled-timestamp annotation is what `kubectl get cronjob` and `kubectl get job`
// readers use; the Job carries it and the template's metadata.
func TestCreatedJob(t *testing.T) {
	f := newFixture(t, t0.Add(time.Second), newCronJob("cron", "0 21 * * *", timeZone("Asia/Tokyo"), createdAt(t0.Add(-time.Hour))))
	f.MustSync(key)
	jobs := f.createdJobs()
	if len(jobs) != 1 {
		t.Fatalf("created %d jobs", len(jobs))
	}
	j := jobs[0]
	if j.Name != "cron-29627280" ||
		j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] != "2026-05-01T21:00:00+09:00" ||
		j.Labels["app"] != "cron" || metav1.GetControllerOf(j).UID != "uid-cron" {
		t.Errorf("job %+v", j.ObjectMeta)
	}
	if got := f.Events(); len(got) != 1 || got[0] != "Normal SuccessfulCreate Created job cron-29627280" {
		t.Errorf("events %q", got)
	}
}

func ptrInt32(v int32) *int32 { return &v }

func timeOf(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	return &t.Time
}

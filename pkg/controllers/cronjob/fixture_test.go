package cronjob

import (
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' reference time, on a whole hour.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose informer caches the test fills by
// hand (sample-controller style): the informers never run.
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
}

func newFixture(t *testing.T, now time.Time, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(now)}
	f.Client.PrependReactor("create", "jobs", apiServerFields)
	ctrl, err := newController(f.ControllerContext(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Seed(objs...)
	return f
}

// apiServerFields is a reactor that sets what the API server sets on a created Job.
func apiServerFields(a core.Action) (bool, runtime.Object, error) {
	job := a.(core.CreateAction).GetObject().(*batchv1.Job)
	job.UID = types.UID("uid-" + job.Name)
	job.ResourceVersion = "1"
	job.Namespace = a.GetNamespace()
	return false, nil, nil
}

// actions returns the fake client's requests as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string {
	return controllertest.Actions(f.Client, controllertest.Reads|controllertest.ObjectNames)
}

// apiJobs returns the Jobs the fake API server holds, by name.
func (f *fixture) apiJobs() []*batchv1.Job {
	return controllertest.Stored[*batchv1.Job](f.T, f.Client, "ns")
}

// createdJobs returns the Jobs the controller asked to create (whether or not the create
// succeeded).
func (f *fixture) createdJobs() []*batchv1.Job { return controllertest.Created[*batchv1.Job](f.Client) }

// lastStatus returns the CronJob of the last status update, or nil.
func (f *fixture) lastStatus() *batchv1.CronJob {
	cjs := controllertest.StatusUpdates[*batchv1.CronJob](f.Client)
	if len(cjs) == 0 {
		return nil
	}
	return cjs[len(cjs)-1]
}

// reasons drains the events and returns "Type Reason" of each, sorted.
func (f *fixture) reasons() []string {
	var out []string
	for _, e := range f.Events() {
		parts := strings.SplitN(e, " ", 3)
		out = append(out, parts[0]+" "+parts[1])
	}
	sort.Strings(out)
	return out
}

// --- object builders ---

type cjOpt func(*batchv1.CronJob)

func newCronJob(name, schedule string, opts ...cjOpt) *batchv1.CronJob {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			ResourceVersion: "1", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: batchv1.CronJobSpec{
			Schedule:          schedule,
			ConcurrencyPolicy: batchv1.AllowConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cron"},
					Annotations: map[string]string{"note": "x"}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
					Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "c", Image: "img"}}},
				}},
			},
		},
	}
	for _, o := range opts {
		o(cj)
	}
	return cj
}

func createdAt(t time.Time) cjOpt {
	return func(cj *batchv1.CronJob) { cj.CreationTimestamp = metav1.NewTime(t) }
}

func lastScheduled(t time.Time) cjOpt {
	return func(cj *batchv1.CronJob) { cj.Status.LastScheduleTime = ptr.To(metav1.NewTime(t)) }
}

func policy(p batchv1.ConcurrencyPolicy) cjOpt {
	return func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = p }
}

func deadline(s int64) cjOpt {
	return func(cj *batchv1.CronJob) { cj.Spec.StartingDeadlineSeconds = ptr.To(s) }
}

func suspended() cjOpt { return func(cj *batchv1.CronJob) { cj.Spec.Suspend = ptr.To(true) } }

func timeZone(tz string) cjOpt { return func(cj *batchv1.CronJob) { cj.Spec.TimeZone = ptr.To(tz) } }

func history(succeeded, failed *int32) cjOpt {
	return func(cj *batchv1.CronJob) {
		cj.Spec.SuccessfulJobsHistoryLimit, cj.Spec.FailedJobsHistoryLimit = succeeded, failed
	}
}

func deletingCJ() cjOpt {
	return func(cj *batchv1.CronJob) { cj.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }
}

// active lists jobs in status.active.
func active(jobs ...*batchv1.Job) cjOpt {
	return func(cj *batchv1.CronJob) {
		for _, j := range jobs {
			cj.Status.Active = append(cj.Status.Active, jobRef(j))
		}
	}
}

type jobOpt func(*batchv1.Job)

// jobOf returns the Job cj creates for its schedule time t.
func jobOf(cj *batchv1.CronJob, t time.Time, opts ...jobOpt) *batchv1.Job {
	j, err := newJob(cj, t)
	if err != nil {
		panic(err)
	}
	j.Namespace, j.UID, j.ResourceVersion = cj.Namespace, types.UID("uid-"+j.Name), "1"
	j.Status.StartTime = ptr.To(metav1.NewTime(t))
	for _, o := range opts {
		o(j)
	}
	return j
}

func completeAt(t time.Time) jobOpt {
	return func(j *batchv1.Job) {
		j.Status.CompletionTime = ptr.To(metav1.NewTime(t))
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t)})
	}
}

func failedAt(t time.Time) jobOpt {
	return func(j *batchv1.Job) {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailed,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t)})
	}
}

func notStarted() jobOpt { return func(j *batchv1.Job) { j.Status.StartTime = nil } }

func objs(cj *batchv1.CronJob, jobs ...*batchv1.Job) []runtime.Object {
	return append([]runtime.Object{cj}, controllertest.Objects(jobs...)...)
}

func metaTime(t time.Time) *metav1.Time { x := metav1.NewTime(t); return &x }

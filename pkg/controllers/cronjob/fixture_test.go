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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' reference time, on a whole hour.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose informer caches the test fills by
// hand (sample-controller style): the informers never run.
type fixture struct {
	t        *testing.T
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	ctrl     *Controller
	queue    *controllertest.Queue
	recorder *record.FakeRecorder
	clock    *clocktesting.FakeClock
}

func newFixture(t *testing.T, now time.Time, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: fake.NewClientset(objs...), recorder: record.NewFakeRecorder(1000),
		clock: clocktesting.NewFakeClock(now)}
	f.client.PrependReactor("create", "jobs", apiServerFields)
	f.factory = informers.NewSharedInformerFactory(f.client, 0)
	f.queue = controllertest.NewQueue()
	t.Cleanup(f.queue.ShutDown)
	log, _ := ktesting.NewTestContext(t)
	c := controllertest.Context(Descriptor(), f.factory, f.queue)
	c.Client, c.Recorder, c.Logger = f.client, f.recorder, log
	ctrl, err := newController(c, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	for _, o := range objs {
		f.cache(o)
	}
	f.queue.Keys()
	f.client.ClearActions()
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

// cache puts obj into the controller's informer cache without running handlers.
func (f *fixture) cache(o runtime.Object) {
	f.t.Helper()
	if err := f.indexerOf(o).Add(o); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) indexerOf(o runtime.Object) toolscache.Indexer {
	f.t.Helper()
	idx, err := controllertest.Informers{SharedInformerFactory: f.factory}.Indexer(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return idx
}

func (f *fixture) sync(key string) error {
	_, ctx := ktesting.NewTestContext(f.t)
	return f.ctrl.sync(ctx, key)
}

func (f *fixture) mustSync(key string) {
	f.t.Helper()
	if err := f.sync(key); err != nil {
		f.t.Fatalf("sync %s: %v", key, err)
	}
}

// actions returns the fake client's actions as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string {
	var out []string
	for _, a := range f.client.Actions() {
		res := a.GetResource().Resource
		if a.GetSubresource() != "" {
			res += "/" + a.GetSubresource()
		}
		s := a.GetVerb() + " " + res
		switch a := a.(type) {
		case core.DeleteAction:
			s += " " + a.GetName()
		case core.GetAction:
			s += " " + a.GetName()
		case core.CreateAction:
			if m, ok := a.GetObject().(metav1.Object); ok {
				s += " " + m.GetName()
			}
		}
		out = append(out, s)
	}
	return out
}

// apiJobs returns the Jobs the fake API server holds.
func (f *fixture) apiJobs() []batchv1.Job {
	f.t.Helper()
	l, err := f.client.Tracker().List(batchv1.SchemeGroupVersion.WithResource("jobs"), batchv1.SchemeGroupVersion.WithKind("Job"), "ns")
	if err != nil {
		f.t.Fatal(err)
	}
	return l.(*batchv1.JobList).Items
}

// createdJobs returns the Jobs the controller asked to create (whether or not the create
// succeeded).
func (f *fixture) createdJobs() []*batchv1.Job {
	var out []*batchv1.Job
	for _, a := range f.client.Actions() {
		if c, ok := a.(core.CreateAction); ok && a.GetResource().Resource == "jobs" {
			out = append(out, c.GetObject().(*batchv1.Job))
		}
	}
	return out
}

// lastStatus returns the CronJob of the last status update, or nil.
func (f *fixture) lastStatus() *batchv1.CronJob {
	acts := f.client.Actions()
	for i := len(acts) - 1; i >= 0; i-- {
		if u, ok := acts[i].(core.UpdateAction); ok && acts[i].GetSubresource() == "status" {
			return u.GetObject().(*batchv1.CronJob)
		}
	}
	return nil
}

// events drains the recorded events ("Type Reason Message").
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// reasons drains the events and returns "Type Reason" of each, sorted.
func (f *fixture) reasons() []string {
	var out []string
	for _, e := range f.events() {
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
	out := []runtime.Object{cj}
	for _, j := range jobs {
		out = append(out, j)
	}
	return out
}

func metaTime(t time.Time) *metav1.Time { x := metav1.NewTime(t); return &x }

func (f *fixture) log() klog.Logger { l, _ := ktesting.NewTestContext(f.t); return l }

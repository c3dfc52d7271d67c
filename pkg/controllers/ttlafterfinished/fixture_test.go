package ttlafterfinished

import (
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
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose Job cache the test fills by hand.
type fixture struct {
	t      *testing.T
	client *fake.Clientset
	ctrl   *Controller
	queue  *controllertest.Queue
	clock  *clocktesting.FakeClock
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []*batchv1.Job, api ...*batchv1.Job) *fixture {
	t.Helper()
	var objs []runtime.Object
	for _, j := range api {
		objs = append(objs, j)
	}
	f := &fixture{t: t, client: fake.NewClientset(objs...), clock: clocktesting.NewFakeClock(t0)}
	factory := informers.NewSharedInformerFactory(f.client, 0)
	f.queue = controllertest.NewQueue()
	t.Cleanup(f.queue.ShutDown)
	log, _ := ktesting.NewTestContext(t)
	c := controllertest.Context(Descriptor(), factory, f.queue)
	c.Client, c.Logger = f.client, log
	ctrl, err := newController(c, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	idx := factory.Batch().V1().Jobs().Informer().GetIndexer()
	for _, j := range cached {
		if err := idx.Add(j); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) sync(key string) error {
	_, ctx := ktesting.NewTestContext(f.t)
	return f.ctrl.sync(ctx, key)
}

// actions returns the fake client's actions as "verb resource name".
func (f *fixture) actions() []string {
	var out []string
	for _, a := range f.client.Actions() {
		s := a.GetVerb() + " " + a.GetResource().Resource
		switch a := a.(type) {
		case core.DeleteAction:
			s += " " + a.GetName()
		case core.GetAction:
			s += " " + a.GetName()
		}
		out = append(out, s)
	}
	return out
}

// deleteOptions returns the options of the first delete.
func (f *fixture) deleteOptions() *metav1.DeleteOptions {
	for _, a := range f.client.Actions() {
		if d, ok := a.(core.DeleteAction); ok {
			o := d.GetDeleteOptions()
			return &o
		}
	}
	return nil
}

type jobOpt func(*batchv1.Job)

func newJob(name string, opts ...jobOpt) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
		ResourceVersion: "1"}}
	for _, o := range opts {
		o(j)
	}
	return j
}

func ttl(s int32) jobOpt { return func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = ptr.To(s) } }

func condition(t batchv1.JobConditionType, status corev1.ConditionStatus, at time.Time) jobOpt {
	return func(j *batchv1.Job) {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: t, Status: status,
			LastTransitionTime: metav1.NewTime(at)})
	}
}

func completeAt(at time.Time) jobOpt { return condition(batchv1.JobComplete, corev1.ConditionTrue, at) }

func failedAt(at time.Time) jobOpt { return condition(batchv1.JobFailed, corev1.ConditionTrue, at) }

func deleting() jobOpt {
	return func(j *batchv1.Job) { j.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }
}

func uid(u string) jobOpt { return func(j *batchv1.Job) { j.UID = types.UID(u) } }

func logger(t *testing.T) klog.Logger { l, _ := ktesting.NewTestContext(t); return l }

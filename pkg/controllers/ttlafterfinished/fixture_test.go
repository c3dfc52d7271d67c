package ttlafterfinished

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller on a fake clientset whose Job cache the test fills by hand.
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
}

// newFixture caches cached and serves api from the fake API server.
func newFixture(t *testing.T, cached []*batchv1.Job, api ...*batchv1.Job) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), controllertest.Objects(api...)...), clock: clocktesting.NewFakeClock(t0)}
	ctrl, err := newController(f.ControllerContext(), f.clock)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
	f.Cache(controllertest.Objects(cached...)...)
	return f
}

// actions returns the fake client's requests as "verb resource name".
func (f *fixture) actions() []string { return controllertest.Actions(f.Client, controllertest.Reads) }

// deleteOptions returns the options of the first delete.
func (f *fixture) deleteOptions() *metav1.DeleteOptions {
	for _, a := range f.Client.Actions() {
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

package job

import (
	"fmt"
	"sort"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

var (
	jobsGVR = batchv1.SchemeGroupVersion.WithResource("jobs")
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
)

// fixture is a controller on a fake clientset whose informer caches the test fills by
// hand (sample-controller style): the informers never run.
type fixture struct {
	*controllertest.Fixture
	ctrl  *Controller
	clock *clocktesting.FakeClock
	opts  Options
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	return newFixtureWith(t, Options{ManagedBy: ManagedByUpstream}, objs...)
}

func newFixtureWith(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{Fixture: controllertest.NewFixture(t, Descriptor(), objs...), clock: clocktesting.NewFakeClock(t0), opts: opts}
	controllertest.GenerateNames(f.Client, "pods")
	controllertest.StatusSubresource(f.Client, jobsGVR)
	f.buildController()
	f.Seed(objs...)
	return f
}

// restart builds a new controller (empty memory, empty caches) on the same API state, as
// a restarted process or the next owner of the namespace would; call refresh to fill the
// caches from the API.
func (f *fixture) restart() {
	f.Restart()
	f.buildController()
}

func (f *fixture) buildController() {
	f.T.Helper()
	ctrl, err := newController(f.ControllerContext(), f.opts, f.clock)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(ctrl.orphans.ShutDown)
	f.ctrl, f.SyncFunc = ctrl, ctrl.sync
}

// orphans returns the controller's orphan-pod queue.
func (f *fixture) orphans() *controllertest.Queue {
	f.T.Helper()
	q, ok := f.ctrl.orphans.(*controllertest.Queue)
	if !ok {
		f.T.Fatalf("the orphan-pod queue is a %T, not the fixture's", f.ctrl.orphans)
	}
	return q
}

// refresh replaces the caches' content with the fake API server's objects.
func (f *fixture) refresh() {
	f.T.Helper()
	for _, idx := range []toolscache.Indexer{f.Indexer(&batchv1.Job{}), f.Indexer(&corev1.Pod{})} {
		for _, old := range idx.List() {
			_ = idx.Delete(old)
		}
	}
	for _, j := range controllertest.Stored[*batchv1.Job](f.T, f.Client, "ns") {
		f.Cache(j)
	}
	for _, p := range f.apiPods() {
		f.Cache(p)
	}
}

// actions returns the fake client's writes as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string { return controllertest.Actions(f.Client, controllertest.Writes) }

// createdPods returns the pods the controller created, by name.
func (f *fixture) createdPods() []*corev1.Pod {
	out := controllertest.Created[*corev1.Pod](f.Client)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// statuses returns the statuses the controller wrote, in order.
func (f *fixture) statuses() []batchv1.JobStatus {
	var out []batchv1.JobStatus
	for _, j := range controllertest.StatusUpdates[*batchv1.Job](f.Client) {
		out = append(out, j.Status)
	}
	return out
}

// apiJob returns the Job the fake API server holds.
func (f *fixture) apiJob(name string) *batchv1.Job {
	return controllertest.Get[*batchv1.Job](f.T, f.Client, "ns", name)
}

// apiPods returns the pods the fake API server holds, by name.
func (f *fixture) apiPods() []*corev1.Pod {
	return controllertest.Stored[*corev1.Pod](f.T, f.Client, "ns")
}

// --- object builders ---

var selectorLabels = map[string]string{"batch.kubernetes.io/controller-uid": "uid-job", "batch.kubernetes.io/job-name": "job"}

type jobOpt func(*batchv1.Job)

func newJob(parallelism, completions int32, opts ...jobOpt) *batchv1.Job {
	labels := map[string]string{}
	for k, v := range selectorLabels {
		labels[k] = v
	}
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", UID: "uid-job", Generation: 1, ResourceVersion: "1"},
		Spec: batchv1.JobSpec{
			Parallelism:    ptr.To(parallelism),
			Completions:    ptr.To(completions),
			BackoffLimit:   ptr.To[int32](6),
			CompletionMode: ptr.To(batchv1.NonIndexedCompletion),
			Selector:       &metav1.LabelSelector{MatchLabels: selectorLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
	for _, o := range opts {
		o(j)
	}
	return j
}

func indexed(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }

func noCompletions(j *batchv1.Job) { j.Spec.Completions = nil }

func suspended(s bool) jobOpt { return func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(s) } }

func backoffLimit(n int32) jobOpt { return func(j *batchv1.Job) { j.Spec.BackoffLimit = ptr.To(n) } }

func started(t time.Time) jobOpt {
	return func(j *batchv1.Job) { j.Status.StartTime = ptr.To(metav1.NewTime(t)) }
}

func withStatus(st batchv1.JobStatus) jobOpt { return func(j *batchv1.Job) { j.Status = st } }

type podOpt func(*corev1.Pod)

// newPod is a running, tracked pod of the Job "job".
func newPod(name string, opts ...podOpt) *corev1.Pod {
	j := newJob(1, 1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			ResourceVersion: "1", Labels: j.Spec.Template.Labels,
			Finalizers:        []string{batchv1.JobTrackingFinalizer},
			OwnerReferences:   []metav1.OwnerReference{*metav1.NewControllerRef(j, kind)},
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:   corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func succeeded() podOpt { return finishedWith(corev1.PodSucceeded, 0, t0.Add(-time.Minute)) }

func failed() podOpt { return finishedWith(corev1.PodFailed, 1, t0.Add(-time.Minute)) }

// finishedWith ends the pod's container with exit code at at.
func finishedWith(ph corev1.PodPhase, exit int32, at time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Phase = ph
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, FinishedAt: metav1.NewTime(at)}}}}
	}
}

func untracked(p *corev1.Pod) { p.Finalizers = nil }

func ready(p *corev1.Pod) {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
}

func deleting(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second))) }

func index(ix int) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[batchv1.JobCompletionIndexAnnotation] = fmt.Sprint(ix)
	}
}

func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func withCondition(t corev1.PodConditionType) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue})
	}
}

func objs(j *batchv1.Job, pods ...*corev1.Pod) []runtime.Object {
	return append([]runtime.Object{j}, controllertest.Objects(pods...)...)
}

// conditionTypes lists a status's true conditions as "Type/Reason".
func conditionTypes(st batchv1.JobStatus) []string {
	var out []string
	for _, c := range st.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}

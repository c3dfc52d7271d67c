package job

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
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
	"k8s.io/klog/v2/ktesting"
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
	t        *testing.T
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	ctrl     *Controller
	queue    *controllertest.Queue
	recorder *record.FakeRecorder
	clock    *clocktesting.FakeClock
	created  *atomic.Int32
	opts     Options
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	return newFixtureWith(t, Options{ManagedBy: ManagedByUpstream}, objs...)
}

func newFixtureWith(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: fake.NewClientset(objs...), clock: clocktesting.NewFakeClock(t0),
		created: &atomic.Int32{}, opts: opts}
	f.client.PrependReactor("create", "pods", nameGenerator(f))
	controllertest.StatusSubresource(f.client, jobsGVR)
	f.restart()
	for _, o := range objs {
		f.cache(o)
	}
	f.queue.Keys()
	f.client.ClearActions()
	return f
}

// restart builds a new controller (empty memory, empty caches) on the same API state, as
// a restarted process or the next owner of the namespace would; call refresh to fill the
// caches from the API.
func (f *fixture) restart() {
	f.t.Helper()
	f.recorder = record.NewFakeRecorder(1000)
	f.factory = informers.NewSharedInformerFactory(f.client, 0)
	f.queue = controllertest.NewQueue()
	f.t.Cleanup(f.queue.ShutDown)
	log, _ := ktesting.NewTestContext(f.t)
	c := controllertest.Context(Descriptor(), f.factory, f.queue)
	c.Client, c.Recorder, c.Logger = f.client, f.recorder, log
	ctrl, err := newController(c, f.opts, f.clock)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(ctrl.orphans.ShutDown)
	f.ctrl = ctrl
}

// orphans returns the controller's orphan-pod queue.
func (f *fixture) orphans() *controllertest.Queue {
	f.t.Helper()
	q, ok := f.ctrl.orphans.(*controllertest.Queue)
	if !ok {
		f.t.Fatalf("the orphan-pod queue is a %T, not the fixture's", f.ctrl.orphans)
	}
	return q
}

// refresh replaces the caches' content with the fake API server's objects.
func (f *fixture) refresh() {
	f.t.Helper()
	for _, idx := range []toolscache.Indexer{f.indexerOf(&batchv1.Job{}), f.indexerOf(&corev1.Pod{})} {
		for _, old := range idx.List() {
			_ = idx.Delete(old)
		}
	}
	for _, o := range f.apiJobsObjs() {
		f.cache(o)
	}
	for _, o := range f.apiPodObjs() {
		f.cache(o)
	}
}

func (f *fixture) apiJobsObjs() []runtime.Object {
	l, err := f.client.Tracker().List(jobsGVR, batchv1.SchemeGroupVersion.WithKind("Job"), "ns")
	if err != nil {
		f.t.Fatal(err)
	}
	var out []runtime.Object
	for i := range l.(*batchv1.JobList).Items {
		out = append(out, &l.(*batchv1.JobList).Items[i])
	}
	return out
}

func (f *fixture) apiPodObjs() []runtime.Object {
	var out []runtime.Object
	for _, p := range f.apiPods() {
		out = append(out, p)
	}
	return out
}

// cache puts obj into the controller's informer cache without running handlers.
func (f *fixture) cache(o runtime.Object) {
	f.t.Helper()
	idx := f.indexerOf(o)
	if err := idx.Update(o); err != nil {
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

// actions returns the fake client's writes as "verb resource[/subresource] [name]".
func (f *fixture) actions() []string {
	var out []string
	for _, a := range f.client.Actions() {
		verb := a.GetVerb()
		if verb == "get" || verb == "list" || verb == "watch" {
			continue
		}
		s := verb + " " + a.GetResource().Resource
		if a.GetSubresource() != "" {
			s += "/" + a.GetSubresource()
		}
		switch a := a.(type) {
		case core.DeleteAction:
			s += " " + a.GetName()
		case core.PatchAction:
			s += " " + a.GetName()
		}
		out = append(out, s)
	}
	return out
}

// createdPods returns the pods the controller created.
func (f *fixture) createdPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, a := range f.client.Actions() {
		if c, ok := a.(core.CreateAction); ok && a.GetResource().Resource == "pods" {
			out = append(out, c.GetObject().(*corev1.Pod))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// statuses returns the statuses the controller wrote, in order.
func (f *fixture) statuses() []batchv1.JobStatus {
	var out []batchv1.JobStatus
	for _, a := range f.client.Actions() {
		if u, ok := a.(core.UpdateAction); ok && a.GetSubresource() == "status" {
			out = append(out, u.GetObject().(*batchv1.Job).Status)
		}
	}
	return out
}

// apiJob returns the Job the fake API server holds.
func (f *fixture) apiJob(name string) *batchv1.Job {
	f.t.Helper()
	o, err := f.client.Tracker().Get(jobsGVR, "ns", name)
	if err != nil {
		f.t.Fatal(err)
	}
	return o.(*batchv1.Job)
}

// apiPods returns the pods the fake API server holds, by name.
func (f *fixture) apiPods() []*corev1.Pod {
	f.t.Helper()
	l, err := f.client.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "ns")
	if err != nil {
		f.t.Fatal(err)
	}
	var out []*corev1.Pod
	for i := range l.(*corev1.PodList).Items {
		out = append(out, &l.(*corev1.PodList).Items[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// events drains the recorded events.
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

// eventReasons counts the drained events by "type reason".
func (f *fixture) eventReasons() map[string]int {
	out := map[string]int{}
	for _, e := range f.events() {
		parts := strings.SplitN(e, " ", 3)
		out[parts[0]+" "+parts[1]]++
	}
	return out
}

// nameGenerator generates the names of pods created with generateName, and their UIDs.
func nameGenerator(f *fixture) core.ReactionFunc {
	return func(a core.Action) (bool, runtime.Object, error) {
		pod := a.(core.CreateAction).GetObject().(*corev1.Pod)
		if pod.Name == "" {
			n := f.created.Add(1)
			pod.Name = fmt.Sprintf("%s%05d", pod.GenerateName, n)
			pod.UID = types.UID(fmt.Sprintf("uid-%s", pod.Name))
		}
		return false, nil, nil
	}
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
	out := []runtime.Object{j}
	for _, p := range pods {
		out = append(out, p)
	}
	return out
}

// conditionTypes lists a status's true conditions as "Type/Reason".
func conditionTypes(st batchv1.JobStatus) []string {
	var out []string
	for _, c := range st.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}

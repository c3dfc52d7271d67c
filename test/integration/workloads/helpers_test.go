package workloads

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	// holdFinalizer keeps a deleted pod Terminating until the test removes it.
	holdFinalizer = "kshard.io/e2e-hold"
	// nobodyScheduler is a scheduler no one runs: pods naming it stay unassigned (and,
	// having no node, are deleted at once).
	nobodyScheduler = "kshard-e2e-nobody"
	// hashLabel is the label the deployment controller adds to its ReplicaSets and pods.
	hashLabel = "pod-template-hash"

	revisionAnnotation        = "deployment.kubernetes.io/revision"
	revisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	desiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	maxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"

	image = "registry.k8s.io/pause:3.10"
)

// env is one test's namespace on the control plane.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

// newEnv gives the test its own namespace. When the test ends it dumps the namespace's
// Deployments, ReplicaSets, pods and events if the test failed, then lets go of every pod
// (finalizers removed, deleted at once) so the namespace can be deleted.
func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	e := &env{t: t, f: f, cs: f.Client, ns: ns}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
		e.release()
	})
	return e
}

func (e *env) ctx() context.Context { return context.Background() }

// release deletes the workloads (Deployments, ReplicaSets, ReplicationControllers) and then
// every pod, finalizers removed, without grace.
func (e *env) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	_ = e.cs.AppsV1().Deployments(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	_ = e.cs.AppsV1().ReplicaSets(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	_ = e.cs.CoreV1().ReplicationControllers(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	for ctx.Err() == nil {
		pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return
		}
		for _, p := range pods.Items {
			if len(p.Finalizers) > 0 {
				_, _ = e.cs.CoreV1().Pods(e.ns).Patch(ctx, p.Name, types.MergePatchType,
					[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			_ = e.cs.CoreV1().Pods(e.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// dump logs what the namespace holds, for the investigation of a failure.
func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "state of namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if ds, err := e.cs.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, d := range ds.Items {
			fmt.Fprintf(&b, "deployment %s gen=%d replicas=%d paused=%v annotations=%v\n  status=%+v\n",
				d.Name, d.Generation, ptr.Deref(d.Spec.Replicas, -1), d.Spec.Paused, d.Annotations, d.Status)
		}
	}
	if rss, err := e.cs.AppsV1().ReplicaSets(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, rs := range rss.Items {
			fmt.Fprintf(&b, "replicaset %s gen=%d replicas=%d owner=%s annotations=%v\n  status=%+v\n",
				rs.Name, rs.Generation, ptr.Deref(rs.Spec.Replicas, -1), ownerName(&rs.ObjectMeta), rs.Annotations, rs.Status)
		}
	}
	if rcs, err := e.cs.CoreV1().ReplicationControllers(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, rc := range rcs.Items {
			fmt.Fprintf(&b, "replicationcontroller %s gen=%d replicas=%d selector=%v\n  status=%+v\n",
				rc.Name, rc.Generation, ptr.Deref(rc.Spec.Replicas, -1), rc.Spec.Selector, rc.Status)
		}
	}
	if pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s owner=%s phase=%s ready=%v node=%q deleting=%v labels=%v created=%s\n",
				p.Name, ownerName(&p.ObjectMeta), p.Status.Phase, podReady(&p), p.Spec.NodeName,
				p.DeletionTimestamp != nil, p.Labels, p.CreationTimestamp.Format(time.RFC3339))
		}
	}
	if evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		items := evs.Items
		sort.Slice(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
		for _, ev := range items {
			fmt.Fprintf(&b, "event %s %s/%s %s %s: %s (x%d, from %s)\n", eventTime(&ev).Format("15:04:05.000"),
				ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message, ev.Count, ev.Source.Component)
		}
	}
	e.t.Log(b.String())
}

func eventTime(ev *corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

func ownerName(m *metav1.ObjectMeta) string {
	if ref := metav1.GetControllerOf(m); ref != nil {
		return ref.Kind + "/" + ref.Name
	}
	return "<none>"
}

// eventually polls check until it returns nil, failing the test with its last error.
func (e *env) eventually(timeout time.Duration, what string, check func(ctx context.Context) error) {
	e.t.Helper()
	framework.Eventually(e.t, timeout, what, func(ctx context.Context) (bool, error) {
		if err := check(ctx); err != nil {
			return false, err
		}
		return true, nil
	})
}

// consistently fails the test when check returns an error at any poll during d.
func (e *env) consistently(d time.Duration, what string, check func(ctx context.Context) error) {
	e.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := check(context.Background()); err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// --- objects --------------------------------------------------------------------------

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}
}

// unassigned makes pods that no scheduler binds.
func unassigned(s *corev1.PodSpec) { s.SchedulerName = nobodyScheduler }

// unschedulable makes pods the scheduler cannot place: they stay Pending.
func unschedulable(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"kshard.io/e2e": "nowhere"} }

func newReplicaSet(name string, replicas int32, labels map[string]string, spec ...func(*corev1.PodSpec)) *appsv1.ReplicaSet {
	ps := podSpec()
	for _, fn := range spec {
		fn(&ps)
	}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: copyMap(labels)}, Spec: ps},
		},
	}
}

func newDeployment(name string, replicas int32, spec ...func(*corev1.PodSpec)) *appsv1.Deployment {
	ps := podSpec()
	for _, fn := range spec {
		fn(&ps)
	}
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: copyMap(labels)}, Spec: ps},
		},
	}
}

func rollingUpdate(surge, unavailable intstr.IntOrString) appsv1.DeploymentStrategy {
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable}}
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (e *env) createRS(rs *appsv1.ReplicaSet) *appsv1.ReplicaSet {
	e.t.Helper()
	out, err := e.cs.AppsV1().ReplicaSets(e.ns).Create(e.ctx(), rs, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating replicaset %s: %v", rs.Name, err)
	}
	return out
}

func (e *env) createDeployment(d *appsv1.Deployment) *appsv1.Deployment {
	e.t.Helper()
	out, err := e.cs.AppsV1().Deployments(e.ns).Create(e.ctx(), d, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating deployment %s: %v", d.Name, err)
	}
	return out
}

func (e *env) createPod(p *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	out, err := e.cs.CoreV1().Pods(e.ns).Create(e.ctx(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return out
}

func (e *env) rs(name string) *appsv1.ReplicaSet {
	e.t.Helper()
	rs, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting replicaset %s: %v", name, err)
	}
	return rs
}

func (e *env) deployment(name string) *appsv1.Deployment {
	e.t.Helper()
	d, err := e.cs.AppsV1().Deployments(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting deployment %s: %v", name, err)
	}
	return d
}

// updateRS applies fn to the ReplicaSet, retrying on conflicts.
func (e *env) updateRS(name string, fn func(*appsv1.ReplicaSet)) *appsv1.ReplicaSet {
	e.t.Helper()
	var out *appsv1.ReplicaSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(rs)
		out, err = e.cs.AppsV1().ReplicaSets(e.ns).Update(e.ctx(), rs, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("updating replicaset %s: %v", name, err)
	}
	return out
}

// updateDeployment applies fn to the Deployment, retrying on conflicts.
func (e *env) updateDeployment(name string, fn func(*appsv1.Deployment)) *appsv1.Deployment {
	e.t.Helper()
	var out *appsv1.Deployment
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(d)
		out, err = e.cs.AppsV1().Deployments(e.ns).Update(e.ctx(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("updating deployment %s: %v", name, err)
	}
	return out
}

func (e *env) scaleRS(name string, replicas int32) *appsv1.ReplicaSet {
	e.t.Helper()
	return e.updateRS(name, func(rs *appsv1.ReplicaSet) { rs.Spec.Replicas = ptr.To(replicas) })
}

// --- pods -----------------------------------------------------------------------------

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readySince(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

func active(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func controlledBy(p metav1.Object, uid types.UID) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.UID == uid
}

// ownedPods lists the pods uid controls, split into active and terminating ones.
func (e *env) ownedPods(ctx context.Context, uid types.UID) (act, terminating []corev1.Pod, err error) {
	pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range pods.Items {
		if !controlledBy(&p, uid) {
			continue
		}
		if p.DeletionTimestamp != nil {
			terminating = append(terminating, p)
		} else if active(&p) {
			act = append(act, p)
		}
	}
	return act, terminating, nil
}

func names(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

// waitRSPods waits until the ReplicaSet controls exactly n active pods, all Ready when
// ready is set, and its status says so for its current generation.
func (e *env) waitRSPods(name string, n int32, ready bool, timeout time.Duration) *appsv1.ReplicaSet {
	e.t.Helper()
	var rs *appsv1.ReplicaSet
	e.eventually(timeout, fmt.Sprintf("replicaset %s has %d active pods (ready=%v) and status to match", name, n, ready), func(ctx context.Context) error {
		var err error
		rs, err = e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		act, _, err := e.ownedPods(ctx, rs.UID)
		if err != nil {
			return err
		}
		if int32(len(act)) != n {
			return fmt.Errorf("%d active pods %v", len(act), names(act))
		}
		st := rs.Status
		if st.ObservedGeneration != rs.Generation || st.Replicas != n {
			return fmt.Errorf("status observedGeneration=%d (generation %d) replicas=%d", st.ObservedGeneration, rs.Generation, st.Replicas)
		}
		if ready {
			for _, p := range act {
				if !podReady(&p) {
					return fmt.Errorf("pod %s not ready", p.Name)
				}
			}
			if st.ReadyReplicas != n {
				return fmt.Errorf("status readyReplicas=%d", st.ReadyReplicas)
			}
		}
		return nil
	})
	return rs
}

// --- events ---------------------------------------------------------------------------

// events lists the events about one object, oldest first.
func (e *env) events(ctx context.Context, kind, name string) ([]corev1.Event, error) {
	evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
	})
	if err != nil {
		return nil, err
	}
	items := evs.Items
	sort.SliceStable(items, func(i, j int) bool { return eventTime(&items[i]).Before(eventTime(&items[j])) })
	return items, nil
}

// eventMessages returns the messages of the object's events with this reason.
func (e *env) eventMessages(ctx context.Context, kind, name, reason string) ([]string, error) {
	evs, err := e.events(ctx, kind, name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out, nil
}

// waitEvent waits for an event about the object with this reason, type, source component
// and a message accepted by match, and returns it.
func (e *env) waitEvent(kind, name, reason, typ, component string, match func(msg string) bool) corev1.Event {
	e.t.Helper()
	var found corev1.Event
	e.eventually(30*time.Second, fmt.Sprintf("%s event %s about %s %s", typ, reason, kind, name), func(ctx context.Context) error {
		evs, err := e.events(ctx, kind, name)
		if err != nil {
			return err
		}
		var seen []string
		for _, ev := range evs {
			if ev.Reason != reason {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %q from %q", ev.Type, ev.Message, ev.Source.Component))
			if ev.Type == typ && ev.Source.Component == component && match(ev.Message) {
				found = ev
				return nil
			}
		}
		return fmt.Errorf("events with reason %s seen: %v", reason, seen)
	})
	return found
}

// --- samplers -------------------------------------------------------------------------

// tracker keeps its own copy of every object of one kind in the namespace, applying the
// watch's events in order, and runs check on each state the watch shows: every state is
// one the API server really held, so an invariant that fails here failed on the server.
type tracker[T metav1.Object] struct {
	mu         sync.Mutex
	objs       map[string]T
	check      func(objs []T) error
	armed      bool
	reported   bool
	states     int
	failures   int
	violations []string
}

func (tr *tracker[T]) apply(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	o, ok := obj.(T)
	if !ok {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if deleted {
		delete(tr.objs, o.GetName())
	} else {
		tr.objs[o.GetName()] = o
	}
	if tr.armed {
		tr.checkLocked()
	}
}

// arm starts the checks, from the current state on; the initial list's adds, one object
// at a time, are not states the server held.
func (tr *tracker[T]) arm() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.armed = true
	tr.checkLocked()
}

func (tr *tracker[T]) checkLocked() {
	tr.states++
	all := make([]T, 0, len(tr.objs))
	for _, v := range tr.objs {
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].GetName() < all[j].GetName() })
	if err := tr.check(all); err != nil {
		tr.failures++
		if len(tr.violations) < 20 {
			tr.violations = append(tr.violations, time.Now().Format("15:04:05.000")+" "+err.Error())
		}
	}
}

// assertNone fails the test with the violations seen so far.
func (tr *tracker[T]) assertNone(t *testing.T, what string) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.reported = true
	if tr.failures > 0 {
		t.Errorf("%s: violated in %d of %d observed states, first ones:\n  %s", what, tr.failures, tr.states, strings.Join(tr.violations, "\n  "))
		return
	}
	t.Logf("%s: held in all %d observed states", what, tr.states)
}

// watchers starts informers on the test's namespace; they stop when the test ends.
type watchers struct {
	factory informers.SharedInformerFactory
	stop    chan struct{}
}

func (e *env) watchers() *watchers {
	w := &watchers{factory: informers.NewSharedInformerFactoryWithOptions(e.cs, 0, informers.WithNamespace(e.ns)), stop: make(chan struct{})}
	e.t.Cleanup(func() { close(w.stop); w.factory.Shutdown() })
	return w
}

func track[T metav1.Object](t *testing.T, w *watchers, inf cache.SharedIndexInformer, check func([]T) error) *tracker[T] {
	t.Helper()
	tr := &tracker[T]{objs: map[string]T{}, check: check}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tr.apply(obj, false) },
		UpdateFunc: func(_, obj any) { tr.apply(obj, false) },
		DeleteFunc: func(obj any) { tr.apply(obj, true) },
	})
	if err != nil {
		t.Fatal(err)
	}
	w.factory.Start(w.stop)
	if !cache.WaitForCacheSync(w.stop, inf.HasSynced, reg.HasSynced) {
		t.Fatal("informer did not sync")
	}
	tr.arm()
	// A test that stops early (a failed wait) still reports what the tracker saw.
	t.Cleanup(func() {
		tr.mu.Lock()
		reported := tr.reported
		tr.mu.Unlock()
		if !reported {
			tr.assertNone(t, "invariant watched until the test stopped")
		}
	})
	return tr
}

func (w *watchers) pods() cache.SharedIndexInformer { return w.factory.Core().V1().Pods().Informer() }
func (w *watchers) replicaSets() cache.SharedIndexInformer {
	return w.factory.Apps().V1().ReplicaSets().Informer()
}
func (w *watchers) deployments() cache.SharedIndexInformer {
	return w.factory.Apps().V1().Deployments().Informer()
}

// --- deployments ----------------------------------------------------------------------

// replicaSetsOf lists the ReplicaSets the deployment controls, newest revision first.
func (e *env) replicaSetsOf(ctx context.Context, d *appsv1.Deployment) ([]appsv1.ReplicaSet, error) {
	rss, err := e.cs.AppsV1().ReplicaSets(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []appsv1.ReplicaSet
	for _, rs := range rss.Items {
		if controlledBy(&rs, d.UID) {
			out = append(out, rs)
		}
	}
	sort.Slice(out, func(i, j int) bool { return revision(&out[i]) > revision(&out[j]) })
	return out, nil
}

func revision(o metav1.Object) int {
	var r int
	_, _ = fmt.Sscanf(o.GetAnnotations()[revisionAnnotation], "%d", &r)
	return r
}

func condition(d *appsv1.Deployment, typ appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == typ {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// waitComplete waits until the deployment's rollout is complete and returns it.
func (e *env) waitComplete(name string, timeout time.Duration) *appsv1.Deployment {
	e.t.Helper()
	var d *appsv1.Deployment
	e.eventually(timeout, "deployment "+name+" complete", func(ctx context.Context) error {
		var err error
		d, err = e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return framework.DeploymentComplete(d)
	})
	return d
}

// newRSOf returns the deployment's ReplicaSet whose template is the deployment's (by its
// revision annotation, which the controller keeps equal to the deployment's).
func (e *env) newRSOf(ctx context.Context, d *appsv1.Deployment) (*appsv1.ReplicaSet, error) {
	rss, err := e.replicaSetsOf(ctx, d)
	if err != nil {
		return nil, err
	}
	want := d.Annotations[revisionAnnotation]
	for i := range rss {
		if rss[i].Annotations[revisionAnnotation] == want {
			return &rss[i], nil
		}
	}
	return nil, fmt.Errorf("no replicaset of %s at revision %q among %d", d.Name, want, len(rss))
}

// bumpTemplate changes the pod template so that a rollout starts.
func bumpTemplate(d *appsv1.Deployment, value string) {
	c := &d.Spec.Template.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "ROLLOUT", Value: value}}
}

// --- kubectl --------------------------------------------------------------------------

var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

// kubectl runs the real kubectl against the test cluster in the test's namespace.
func (e *env) kubectl(args ...string) (stdout, stderr string, err error) {
	e.t.Helper()
	kubectlOnce.Do(func() {
		out, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output()
		kubectlPath, kubectlErr = strings.TrimSpace(string(out)), err
	})
	if kubectlErr != nil || kubectlPath == "" {
		e.t.Fatalf("hack/tools.sh path kubectl: %v", kubectlErr)
	}
	cmd := exec.Command(kubectlPath, append([]string{"--kubeconfig", e.f.Kubeconfig, "-n", e.ns}, args...)...)
	var o, s strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &s
	err = cmd.Run()
	e.t.Logf("kubectl %s -> err=%v\n%s%s", strings.Join(args, " "), err, o.String(), s.String())
	return o.String(), s.String(), err
}

func (e *env) mustKubectl(args ...string) string {
	e.t.Helper()
	out, stderr, err := e.kubectl(args...)
	if err != nil {
		e.t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// availabilitySample is an availableReplicas value and when the watch showed it.
type availabilitySample struct {
	at        time.Time
	available int32
}

// checkNotAvailableEarly fails the test for each sample that counts more pods available
// than the pods uid controls had been Ready for minReady when the sample was seen. A
// Ready condition's lastTransitionTime is truncated to the second, so it is never later
// than the true transition, and the bound holds without slack.
func (e *env) checkNotAvailableEarly(uid types.UID, minReady time.Duration, samples []availabilitySample) {
	e.t.Helper()
	act, _, err := e.ownedPods(e.ctx(), uid)
	if err != nil {
		e.t.Fatal(err)
	}
	var readyAt []time.Time
	for _, p := range act {
		at, ok := readySince(&p)
		if !ok {
			e.t.Fatalf("pod %s not ready", p.Name)
		}
		readyAt = append(readyAt, at)
	}
	for _, o := range samples {
		allowed := int32(0)
		for _, at := range readyAt {
			if !at.Add(minReady).After(o.at) {
				allowed++
			}
		}
		if o.available > allowed {
			e.t.Errorf("at %s availableReplicas=%d, but only %d pods had been ready for %s (ready at %v)",
				o.at.Format("15:04:05.000"), o.available, allowed, minReady, readyAt)
		}
	}
}

// releaseAndReplace changes pod's labels so that its controller (uid, a ReplicaSet or
// ReplicationController) no longer selects it, and waits until the controller has
// released it (owner reference removed, the pod not deleted) and controls want active
// pods again.
func (e *env) releaseAndReplace(pod string, uid types.UID, kind string, want int) {
	e.t.Helper()
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(e.ctx(), pod, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app":"elsewhere"}}}`), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.eventually(60*time.Second, "pod "+pod+" released and replaced", func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("released pod is being deleted")
		}
		for _, ref := range p.OwnerReferences {
			if ref.UID == uid {
				return fmt.Errorf("still has owner reference %+v", ref)
			}
		}
		act, _, err := e.ownedPods(ctx, uid)
		if err != nil {
			return err
		}
		if len(act) != want {
			return fmt.Errorf("%s controls %d active pods %v, want %d", kind, len(act), names(act), want)
		}
		return nil
	})
}

// createOrphans creates n bare pods orphan-0, orphan-1, … with labels, for a controller to
// adopt.
func (e *env) createOrphans(n int, labels map[string]string) []*corev1.Pod {
	e.t.Helper()
	var out []*corev1.Pod
	for i := range n {
		out = append(out, e.createPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("orphan-%d", i), Labels: copyMap(labels)},
			Spec:       podSpec(),
		}))
	}
	return out
}

// waitRunning waits until every pod of pods runs. Orphans created at the same instant as
// their controller may not be in its pod cache at its first sync, and upstream's
// controller then creates a pod too many and deletes it again (docs/controllers.md); as
// the differential scenario does, the adoption tests let the orphans run first.
func (e *env) waitRunning(pods []*corev1.Pod) {
	e.t.Helper()
	e.eventually(30*time.Second, "the pods run", func(ctx context.Context) error {
		for _, o := range pods {
			p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%s is %s", p.Name, p.Status.Phase)
			}
		}
		return nil
	})
}

package disruption

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	image = "registry.k8s.io/pause:3.10"
	// settle bounds how long a status or an event may take to appear.
	settle = 60 * time.Second
)

// env is one test's namespace.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

// newEnv gives the test its own namespace; a failed test logs the namespace's budgets,
// pods and events.
func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	e := &env{t: t, f: f, cs: f.Client, ns: f.Namespace(t, nil).Name}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	return e
}

func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s; %s\n", e.ns, framework.RunningControllers(e.t))
	if l, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			fmt.Fprintf(&b, "pdb %s gen=%d spec=%+v\n  status=%+v\n", p.Name, p.Generation, p.Spec, p.Status)
		}
	}
	if l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range l.Items {
			fmt.Fprintf(&b, "pod %s phase=%s ready=%v node=%s deleting=%v labels=%v\n", p.Name, p.Status.Phase, ready(&p),
				p.Spec.NodeName, p.DeletionTimestamp != nil, p.Labels)
		}
	}
	if l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range l.Items {
			fmt.Fprintf(&b, "event %s/%s %s %s x%d from %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type,
				ev.Reason, ev.Count, ev.Source.Component, ev.Message)
		}
	}
	e.t.Log(b.String())
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}, TerminationGracePeriodSeconds: ptr.To[int64](0)}
}

func template(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()}
}

func (e *env) deployment(name string, replicas int32, spec ...func(*corev1.PodSpec)) *appsv1.Deployment {
	e.t.Helper()
	l := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: l}, Template: template(l)}}
	for _, fn := range spec {
		fn(&d.Spec.Template.Spec)
	}
	out, err := e.cs.AppsV1().Deployments(e.ns).Create(context.Background(), d, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating deployment %s: %v", name, err)
	}
	return out
}

func (e *env) replicaSet(name string, replicas int32) *appsv1.ReplicaSet {
	e.t.Helper()
	l := map[string]string{"app": name}
	out, err := e.cs.AppsV1().ReplicaSets(e.ns).Create(context.Background(), &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: l}, Template: template(l)}},
		metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating replicaset %s: %v", name, err)
	}
	return out
}

func (e *env) rc(name string, replicas int32) *corev1.ReplicationController {
	e.t.Helper()
	l := map[string]string{"app": name}
	tpl := template(l)
	out, err := e.cs.CoreV1().ReplicationControllers(e.ns).Create(context.Background(), &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ReplicationControllerSpec{Replicas: ptr.To(replicas), Selector: l, Template: &tpl}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating replicationcontroller %s: %v", name, err)
	}
	return out
}

func (e *env) statefulSet(name string, replicas int32) *appsv1.StatefulSet {
	e.t.Helper()
	l := map[string]string{"app": name}
	out, err := e.cs.AppsV1().StatefulSets(e.ns).Create(context.Background(), &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(replicas), ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: template(l), PodManagementPolicy: appsv1.ParallelPodManagement}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating statefulset %s: %v", name, err)
	}
	return out
}

// pod creates a bare pod with labels (and, when owner is set, a controller reference).
func (e *env) pod(name string, labels map[string]string, owner *metav1.OwnerReference) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: podSpec()}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	out, err := e.cs.CoreV1().Pods(e.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return out
}

type budgetOpt func(*policyv1.PodDisruptionBudget)

func minAvailable(v intstr.IntOrString) budgetOpt {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = &v }
}

func maxUnavailable(v intstr.IntOrString) budgetOpt {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = &v }
}

func policy(pol policyv1.UnhealthyPodEvictionPolicyType) budgetOpt {
	return func(p *policyv1.PodDisruptionBudget) { p.Spec.UnhealthyPodEvictionPolicy = &pol }
}

// budget creates a budget selecting app=app.
func (e *env) budget(name, app string, opts ...budgetOpt) {
	e.t.Helper()
	p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
	for _, o := range opts {
		o(p)
	}
	if _, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating budget %s: %v", name, err)
	}
}

func (e *env) updateBudget(name string, fn func(*policyv1.PodDisruptionBudget)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(p)
		_, err = e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("updating budget %s: %v", name, err)
	}
}

// want is a budget status a test waits for.
type want struct {
	healthy, desired, expected, allowed int32
	reason                              string // of the DisruptionAllowed condition; "" derives it from allowed
}

func (w want) String() string {
	return fmt.Sprintf("healthy=%d desired=%d expected=%d allowed=%d reason=%s", w.healthy, w.desired, w.expected, w.allowed, w.reason)
}

func describe(p *policyv1.PodDisruptionBudget) string {
	c := apimeta.FindStatusCondition(p.Status.Conditions, policyv1.DisruptionAllowedCondition)
	reason := "<none>"
	if c != nil {
		reason = fmt.Sprintf("%s/%s %q", c.Status, c.Reason, c.Message)
	}
	return fmt.Sprintf("healthy=%d desired=%d expected=%d allowed=%d observedGeneration=%d/%d condition=%s disrupted=%v",
		p.Status.CurrentHealthy, p.Status.DesiredHealthy, p.Status.ExpectedPods, p.Status.DisruptionsAllowed,
		p.Status.ObservedGeneration, p.Generation, reason, p.Status.DisruptedPods)
}

// waitStatus waits until the budget's status is w, at its current generation, and returns
// the budget.
func (e *env) waitStatus(name string, w want) *policyv1.PodDisruptionBudget {
	e.t.Helper()
	if w.reason == "" {
		w.reason = policyv1.InsufficientPodsReason
		if w.allowed > 0 {
			w.reason = policyv1.SufficientPodsReason
		}
	}
	var last *policyv1.PodDisruptionBudget
	framework.Eventually(e.t, settle, "budget "+name+" at "+w.String(), func(ctx context.Context) (bool, error) {
		p, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = p
		c := apimeta.FindStatusCondition(p.Status.Conditions, policyv1.DisruptionAllowedCondition)
		st := p.Status
		ok := st.CurrentHealthy == w.healthy && st.DesiredHealthy == w.desired && st.ExpectedPods == w.expected &&
			st.DisruptionsAllowed == w.allowed && c != nil && c.Reason == w.reason &&
			(w.reason == policyv1.SyncFailedReason || st.ObservedGeneration == p.Generation)
		if !ok {
			return false, fmt.Errorf("status %s", describe(p))
		}
		return true, nil
	})
	return last
}

// waitPods waits until n pods labelled app=app are Ready.
func (e *env) waitPods(app string, n int) []corev1.Pod {
	e.t.Helper()
	var out []corev1.Pod
	framework.Eventually(e.t, settle, fmt.Sprintf("%d ready pods of %s", n, app), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		out = out[:0]
		for _, p := range l.Items {
			if ready(&p) && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
		if len(out) != n {
			return false, fmt.Errorf("%d ready", len(out))
		}
		return true, nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// setCondition writes a pod condition through the status subresource, as the kubelet (or
// the eviction subresource) would.
func (e *env) setCondition(pod string, c corev1.PodCondition) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		found := false
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == c.Type {
				p.Status.Conditions[i], found = c, true
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, c)
		}
		_, err = e.cs.CoreV1().Pods(e.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("setting condition %s of pod %s: %v", c.Type, pod, err)
	}
}

func (e *env) notReady(pod string) {
	e.setCondition(pod, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()})
}

func (e *env) evict(pod string) error {
	return e.cs.CoreV1().Pods(e.ns).EvictV1(context.Background(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: e.ns}})
}

// waitEvent waits for an event of reason on the object kind/name and returns its message.
func (e *env) waitEvent(kind, name, typ, reason string) string {
	e.t.Helper()
	var msg string
	framework.Eventually(e.t, settle, fmt.Sprintf("%s %s event on %s/%s", typ, reason, kind, name), func(ctx context.Context) (bool, error) {
		l, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, ev := range l.Items {
			if ev.InvolvedObject.Kind == kind && ev.Type == typ && ev.Reason == reason {
				if ev.Source.Component != "controllermanager" {
					return false, fmt.Errorf("event from %q, want controllermanager", ev.Source.Component)
				}
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	})
	return msg
}

func controllerRef(apiVersion, kind, name string, uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
}

// kubectl runs the real kubectl against the test cluster.
func (e *env) kubectl(args ...string) (string, error) {
	e.t.Helper()
	path, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output()
	if err != nil {
		e.t.Fatalf("hack/tools.sh path kubectl: %v", err)
	}
	out, err := exec.Command(strings.TrimSpace(string(path)), append([]string{"--kubeconfig", e.f.Kubeconfig}, args...)...).CombinedOutput()
	e.t.Logf("kubectl %s -> err=%v\n%s", strings.Join(args, " "), err, out)
	return string(out), err
}

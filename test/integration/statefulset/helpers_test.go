package statefulset

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	image  = "registry.k8s.io/pause:3.10"
	image2 = "registry.k8s.io/pause:3.9"
)

// env is one test's namespace on the control plane.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

// newEnv gives the test its own namespace; a failed test dumps it first.
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

func (e *env) ctx() context.Context { return context.Background() }

func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "state of namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if sets, err := e.cs.AppsV1().StatefulSets(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, s := range sets.Items {
			fmt.Fprintf(&b, "statefulset %s gen=%d replicas=%d status=%+v\n", s.Name, s.Generation, ptr.Deref(s.Spec.Replicas, -1), s.Status)
		}
	}
	if revs, err := e.cs.AppsV1().ControllerRevisions(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, r := range revs.Items {
			fmt.Fprintf(&b, "revision %s number=%d owners=%v\n", r.Name, r.Revision, r.OwnerReferences)
		}
	}
	if pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s phase=%s ready=%v deleting=%v rev=%s node=%q\n", p.Name, p.Status.Phase, podReady(&p),
				p.DeletionTimestamp != nil, p.Labels[appsv1.StatefulSetRevisionLabel], p.Spec.NodeName)
		}
	}
	if pvcs, err := e.cs.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range pvcs.Items {
			fmt.Fprintf(&b, "pvc %s owners=%v deleting=%v\n", c.Name, c.OwnerReferences, c.DeletionTimestamp != nil)
		}
	}
	if evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, ev := range evs.Items {
			fmt.Fprintf(&b, "event %s/%s %s %s (%s) x%d: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Source.Component, ev.Count, ev.Message)
		}
	}
	e.t.Log(b.String())
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// newSet is a StatefulSet of replicas pause pods labelled app=<name>.
func newSet(name string, replicas int32, opts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: name,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}},
					TerminationGracePeriodSeconds: ptr.To[int64](0)},
			},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (e *env) create(s *appsv1.StatefulSet) *appsv1.StatefulSet {
	e.t.Helper()
	out, err := e.cs.AppsV1().StatefulSets(e.ns).Create(e.ctx(), s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) update(name string, fn func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	e.t.Helper()
	var out *appsv1.StatefulSet
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := e.cs.AppsV1().StatefulSets(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(s)
		out, err = e.cs.AppsV1().StatefulSets(e.ns).Update(e.ctx(), s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitSet waits until the set's status satisfies ok (observedGeneration current).
func (e *env) waitSet(name string, timeout time.Duration, what string, ok func(*appsv1.StatefulSet) bool) *appsv1.StatefulSet {
	e.t.Helper()
	var last *appsv1.StatefulSet
	framework.Eventually(e.t, timeout, "statefulset "+name+": "+what, func(ctx context.Context) (bool, error) {
		s, err := e.cs.AppsV1().StatefulSets(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = s
		if s.Status.ObservedGeneration < s.Generation {
			return false, fmt.Errorf("observedGeneration %d < generation %d", s.Status.ObservedGeneration, s.Generation)
		}
		if !ok(s) {
			return false, fmt.Errorf("status %+v", s.Status)
		}
		return true, nil
	})
	return last
}

// rolledOut: every wanted pod exists, is ready, available and at the update revision,
// which is the current one.
func rolledOut(s *appsv1.StatefulSet) bool {
	n := *s.Spec.Replicas
	st := s.Status
	return st.Replicas == n && st.ReadyReplicas == n && st.AvailableReplicas == n && st.UpdatedReplicas == n &&
		st.CurrentReplicas == n && st.CurrentRevision == st.UpdateRevision && st.UpdateRevision != ""
}

// pods returns the namespace's pods by name.
func (e *env) pods(ctx context.Context) (map[string]corev1.Pod, error) {
	list, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out, nil
}

func sortedNames[T any](m map[string]T) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// podLog records, from a pod watch, each pod's creations (by UID) and the order of pod
// additions and deletions, and whether each pod's predecessor ordinal was ready when it
// was added.
type podLog struct {
	mu      sync.Mutex
	uids    map[string][]types.UID // by pod name, in order of creation
	added   []string
	deleted []string
	ready   map[string]bool
	// addedWhileNotReady lists pods added while a lower ordinal known to the watch
	// was not ready.
	addedWhileNotReady []string
	revOf              map[types.UID]string
}

func (e *env) watchPods(ctx context.Context) *podLog {
	e.t.Helper()
	l := &podLog{uids: map[string][]types.UID{}, ready: map[string]bool{}, revOf: map[types.UID]string{}}
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			l.mu.Lock()
			switch ev.Type {
			case "ADDED":
				l.added = append(l.added, p.Name)
				l.uids[p.Name] = append(l.uids[p.Name], p.UID)
				l.revOf[p.UID] = p.Labels[appsv1.StatefulSetRevisionLabel]
				for name, r := range l.ready {
					if !r && ordinal(name) < ordinal(p.Name) {
						l.addedWhileNotReady = append(l.addedWhileNotReady, p.Name)
					}
				}
				l.ready[p.Name] = podReady(p)
			case "MODIFIED":
				l.ready[p.Name] = podReady(p) && p.DeletionTimestamp == nil
			case "DELETED":
				l.deleted = append(l.deleted, p.Name)
				delete(l.ready, p.Name)
			}
			l.mu.Unlock()
		}
	}()
	e.t.Cleanup(w.Stop)
	return l
}

func (l *podLog) snapshot() (added, deleted, notReady []string, uids map[string][]types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	uids = map[string][]types.UID{}
	for k, v := range l.uids {
		uids[k] = slices.Clone(v)
	}
	return slices.Clone(l.added), slices.Clone(l.deleted), slices.Clone(l.addedWhileNotReady), uids
}

// events returns the namespace's events about the set with reason, as "type reason message".
func (e *env) events(ctx context.Context, set, reason string) ([]string, error) {
	list, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Kind == "StatefulSet" && ev.InvolvedObject.Name == set && ev.Reason == reason {
			if ev.Source.Component != "statefulset-controller" {
				return nil, fmt.Errorf("event %s from %q", ev.Reason, ev.Source.Component)
			}
			out = append(out, ev.Type+" "+ev.Reason+" "+ev.Message)
		}
	}
	slices.Sort(out)
	return out, nil
}

var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

// kubectl runs the real kubectl against the test cluster in the test's namespace.
func (e *env) kubectl(args ...string) string {
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
	err := cmd.Run()
	e.t.Logf("kubectl %s -> err=%v\n%s%s", strings.Join(args, " "), err, o.String(), s.String())
	if err != nil {
		e.t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, s.String())
	}
	return o.String()
}

// ordinal is the number after a pod name's last dash, -1 without one.
func ordinal(name string) int {
	i := strings.LastIndex(name, "-")
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return n
}

func splitLines(s string) []string { return strings.Split(s, "\n") }

func fieldsOf(s string) []string { return strings.Fields(s) }

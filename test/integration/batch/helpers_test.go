package batch

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const (
	image = "registry.k8s.io/pause:3.10"
	// kwokLabel steers kwok: "fail" fails the pod, any other value keeps it running.
	kwokLabel = "kshard.io/kwok"
	// exitCodeAnnotation is the exit code of a pod kwok fails.
	exitCodeAnnotation = "kshard.io/kwok-exit-code"
	jobComponent       = "job-controller"
)

// env is one test's namespace on the control plane.
type env struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

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

// release deletes the Jobs and every pod, finalizers removed, so the namespace can go.
func (e *env) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	_ = e.cs.BatchV1().Jobs(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
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

func (e *env) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "state of namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if js, err := e.cs.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, j := range js.Items {
			fmt.Fprintf(&b, "job %s gen=%d spec.suspend=%v managedBy=%v\n  status=%+v\n", j.Name, j.Generation,
				ptr.Deref(j.Spec.Suspend, false), ptr.Deref(j.Spec.ManagedBy, ""), j.Status)
		}
	}
	if pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s phase=%s deleting=%v finalizers=%v labels=%v\n", p.Name, p.Status.Phase,
				p.DeletionTimestamp != nil, p.Finalizers, p.Labels)
		}
	}
	for _, ev := range e.events("") {
		fmt.Fprintf(&b, "event %s\n", ev)
	}
	e.t.Log(b.String())
}

// events returns the namespace's events as "Kind/name Type Reason: message (from component)",
// of one component when component is set.
func (e *env) events(component string) []string {
	evs, err := e.cs.CoreV1().Events(e.ns).List(e.ctx(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs.Items {
		if component != "" && ev.Source.Component != component {
			continue
		}
		for i := int32(0); i < max(ev.Count, 1); i++ {
			out = append(out, fmt.Sprintf("%s/%s %s %s: %s (from %s)", ev.InvolvedObject.Kind, ev.InvolvedObject.Name,
				ev.Type, ev.Reason, ev.Message, ev.Source.Component))
		}
	}
	sort.Strings(out)
	return out
}

// reasons counts the job controller's events on job by "Type Reason".
func (e *env) reasons(job string) map[string]int {
	out := map[string]int{}
	for _, ev := range e.events(jobComponent) {
		if strings.HasPrefix(ev, "Job/"+job+" ") {
			parts := strings.SplitN(strings.TrimPrefix(ev, "Job/"+job+" "), ":", 2)
			out[parts[0]]++
		}
	}
	return out
}

type jobOpt func(*batchv1.Job)

func newJob(name string, parallelism, completions int32, opts ...jobOpt) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(parallelism),
			Completions: ptr.To(completions),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, Annotations: map[string]string{}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: image}}},
			},
		},
	}
	for _, o := range opts {
		o(j)
	}
	return j
}

func indexed(j *batchv1.Job) { j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion) }

// failing makes kwok fail every pod with exit code.
func failing(code int) jobOpt {
	return func(j *batchv1.Job) {
		j.Spec.Template.Labels[kwokLabel] = "fail"
		j.Spec.Template.Annotations[exitCodeAnnotation] = fmt.Sprint(code)
	}
}

// running makes kwok keep every pod running.
func running(j *batchv1.Job) { j.Spec.Template.Labels[kwokLabel] = "run" }

func (e *env) create(j *batchv1.Job) *batchv1.Job {
	e.t.Helper()
	out, err := e.cs.BatchV1().Jobs(e.ns).Create(e.ctx(), j, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create job %s: %v", j.Name, err)
	}
	return out
}

func (e *env) job(name string) *batchv1.Job {
	e.t.Helper()
	j, err := e.cs.BatchV1().Jobs(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// waitJob polls the Job until cond holds.
func (e *env) waitJob(name string, timeout time.Duration, what string, cond func(*batchv1.Job) bool) *batchv1.Job {
	e.t.Helper()
	var last *batchv1.Job
	err := wait.PollUntilContextTimeout(e.ctx(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		j, err := e.cs.BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = j
		return cond(j), nil
	})
	if err != nil {
		e.t.Fatalf("job %s: %s not reached in %v; status %+v", name, what, timeout, last.Status)
	}
	return last
}

// conditions lists the Job's conditions as "Type=Status/Reason", in order.
func conditions(j *batchv1.Job) []string {
	var out []string
	for _, c := range j.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	return out
}

func hasCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == t && c.Status == corev1.ConditionTrue
	})
}

func (e *env) pods(job string) []corev1.Pod {
	e.t.Helper()
	l, err := e.cs.CoreV1().Pods(e.ns).List(e.ctx(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Items
}

var (
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

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

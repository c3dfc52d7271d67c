package batch

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

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

const cronPauseImage = "registry.k8s.io/pause:3.10"

// cronEnv is one test's namespace on the control plane.
type cronEnv struct {
	t  *testing.T
	f  *framework.Framework
	cs kubernetes.Interface
	ns string
}

// newCronEnv gives the test its own namespace; a failed test dumps its CronJobs, Jobs,
// pods and events.
func newCronEnv(t *testing.T) *cronEnv {
	t.Helper()
	f := framework.Get(t)
	e := &cronEnv{t: t, f: f, cs: f.Client, ns: f.Namespace(t, nil).Name}
	t.Cleanup(func() {
		if t.Failed() {
			e.dump()
		}
	})
	return e
}

func (e *cronEnv) dump() {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "state of namespace %s at %s; %s\n", e.ns, time.Now().Format(time.RFC3339Nano), framework.RunningControllers(e.t))
	if cjs, err := e.cs.BatchV1().CronJobs(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, cj := range cjs.Items {
			fmt.Fprintf(&b, "cronjob %s schedule=%q policy=%s suspend=%v status=%+v\n", cj.Name, cj.Spec.Schedule,
				cj.Spec.ConcurrencyPolicy, ptr.Deref(cj.Spec.Suspend, false), cj.Status)
		}
	}
	if jobs, err := e.cs.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, j := range jobs.Items {
			fmt.Fprintf(&b, "job %s annotations=%v deleting=%v status=%+v\n", j.Name, j.Annotations, j.DeletionTimestamp != nil, j.Status)
		}
	}
	if pods, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s phase=%s node=%q\n", p.Name, p.Status.Phase, p.Spec.NodeName)
		}
	}
	for _, ev := range e.events(ctx, "") {
		fmt.Fprintf(&b, "event %s/%s %s %s: %s (x%d, from %s)\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name,
			ev.Type, ev.Reason, ev.Message, ev.Count, ev.Source.Component)
	}
	e.t.Log(b.String())
}

// events returns the namespace's events, of the object named name when it is not empty.
func (e *cronEnv) events(ctx context.Context, name string) []corev1.Event {
	evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []corev1.Event
	for _, ev := range evs.Items {
		if name == "" || ev.InvolvedObject.Name == name {
			out = append(out, ev)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out
}

// waitEvent waits until name has at least one event of reason from cronComponent:
// events reach the API after the writes they tell of.
func (e *cronEnv) waitEvent(name, reason string) {
	e.t.Helper()
	e.eventually(15*time.Second, "a "+reason+" event of "+name, func(ctx context.Context) error {
		if e.eventCount(ctx, name, reason, cronComponent) == 0 {
			return fmt.Errorf("no %s event", reason)
		}
		return nil
	})
}

// eventCount sums the counts of name's events of reason from component.
func (e *cronEnv) eventCount(ctx context.Context, name, reason, component string) int32 {
	var n int32
	for _, ev := range e.events(ctx, name) {
		if ev.Reason == reason && ev.Source.Component == component {
			n += max(ev.Count, 1)
		}
	}
	return n
}

func (e *cronEnv) eventually(timeout time.Duration, what string, check func(ctx context.Context) error) {
	e.t.Helper()
	framework.Eventually(e.t, timeout, what, func(ctx context.Context) (bool, error) {
		if err := check(ctx); err != nil {
			return false, err
		}
		return true, nil
	})
}

// newCronJob returns a CronJob whose Jobs run one pause pod each; kwok completes it.
func newCronJob(name, schedule string, opts ...func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.CronJobSpec{
			Schedule: schedule,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"cronjob": name}},
				Spec:       batchv1.JobSpec{Template: cronPodTemplate()},
			},
		},
	}
	for _, o := range opts {
		o(cj)
	}
	return cj
}

func cronPodTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "c", Image: cronPauseImage}},
	}}
}

// stuck makes the Jobs' pods unschedulable, so the Jobs stay active.
func stuck(cj *batchv1.CronJob) {
	cj.Spec.JobTemplate.Spec.Template.Spec.NodeSelector = map[string]string{"kshard.io/e2e": "nowhere"}
}

func (e *cronEnv) createCronJob(cj *batchv1.CronJob) *batchv1.CronJob {
	e.t.Helper()
	out, err := e.cs.BatchV1().CronJobs(e.ns).Create(context.Background(), cj, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *cronEnv) cronJob(ctx context.Context, name string) (*batchv1.CronJob, error) {
	return e.cs.BatchV1().CronJobs(e.ns).Get(ctx, name, metav1.GetOptions{})
}

// jobsOf returns the Jobs whose controller is the CronJob named name, by name.
func (e *cronEnv) jobsOf(ctx context.Context, name string) ([]batchv1.Job, error) {
	l, err := e.cs.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []batchv1.Job
	for _, j := range l.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.Kind == "CronJob" && ref.Name == name {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

// waitNextMinute sleeps until a few seconds past the next whole minute when less than
// margin is left before it, so that a CronJob created next does not race its first
// schedule time.
func cronWaitNextMinute(margin time.Duration) {
	now := time.Now()
	next := now.Truncate(time.Minute).Add(time.Minute)
	if next.Sub(now) < margin {
		time.Sleep(next.Sub(now) + 2*time.Second)
	}
}

func cronJobNames(jobs []batchv1.Job) []string {
	out := make([]string, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, j.Name)
	}
	return out
}

func cronFinishedAs(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.Type
		}
	}
	return ""
}

var (
	cronKubectlOnce sync.Once
	cronKubectlPath string
	cronKubectlErr  error
)

// kubectl runs the real kubectl in the test's namespace.
func (e *cronEnv) kubectl(args ...string) string {
	e.t.Helper()
	cronKubectlOnce.Do(func() {
		out, err := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), "path", "kubectl").Output()
		cronKubectlPath, cronKubectlErr = strings.TrimSpace(string(out)), err
	})
	if cronKubectlErr != nil || cronKubectlPath == "" {
		e.t.Fatalf("hack/tools.sh path kubectl: %v", cronKubectlErr)
	}
	cmd := exec.Command(cronKubectlPath, append([]string{"--kubeconfig", e.f.Kubeconfig, "-n", e.ns}, args...)...)
	var o, s strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &s
	err := cmd.Run()
	e.t.Logf("kubectl %s -> err=%v\n%s%s", strings.Join(args, " "), err, o.String(), s.String())
	if err != nil {
		e.t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, s.String())
	}
	return o.String()
}

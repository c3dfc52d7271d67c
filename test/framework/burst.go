package framework

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Burst is a benchmark's workload: Namespaces namespaces, each with PerNamespace
// RollingUpdate Deployments of Replicas pause pods (or PerNamespace Jobs, CreateJobs),
// every object labelled Label=Run.
type Burst struct {
	Run          string // the label value and the namespace name stem
	Label        string
	Namespaces   int
	PerNamespace int
	Replicas     int32
	// Workers bounds the parallel creates and deletes (default 32).
	Workers int
}

// Selector selects the burst's namespaces and Deployments.
func (b Burst) Selector() string { return b.Label + "=" + b.Run }

// Deployments is the number of Deployments of the burst.
func (b Burst) Deployments() int { return b.Objects() }

// Objects is the number of Deployments or Jobs of the burst: PerNamespace in each namespace.
func (b Burst) Objects() int { return b.Namespaces * b.PerNamespace }

func (b Burst) workers() int {
	if b.Workers > 0 {
		return b.Workers
	}
	return 32
}

// CreateNamespaces creates the burst's namespaces (named <Run>-NNN) and returns their names.
func (b Burst) CreateNamespaces(t testing.TB, client kubernetes.Interface) []string {
	t.Helper()
	nss := make([]string, b.Namespaces)
	err := Parallel(b.Namespaces, b.workers(), func(i int) error {
		nss[i] = fmt.Sprintf("%s-%03d", b.Run, i)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nss[i], Labels: map[string]string{b.Label: b.Run, RunLabel: "bench"}}}
		_, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return nss
}

// CreateDeployments creates the burst's Deployments (app-N in each namespace of nss).
func (b Burst) CreateDeployments(t testing.TB, client kubernetes.Interface, nss []string) {
	t.Helper()
	err := Parallel(len(nss)*b.PerNamespace, b.workers(), func(i int) error {
		d := NewRollingDeployment(fmt.Sprintf("app-%d", i%b.PerNamespace), b.Replicas,
			intstr.FromString("25%"), intstr.FromString("25%"), "registry.k8s.io/pause:3.10", nil)
		d.Labels = map[string]string{b.Label: b.Run}
		_, err := client.AppsV1().Deployments(nss[i/b.PerNamespace]).Create(context.Background(), d, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// CreateJobs creates the burst's Jobs (job-N in each namespace of nss): completions pause
// pods each, all at once (parallelism = completions), which kwok's pod-complete stage
// turns Succeeded as soon as they run.
func (b Burst) CreateJobs(t testing.TB, client kubernetes.Interface, nss []string, completions int32) {
	t.Helper()
	err := Parallel(len(nss)*b.PerNamespace, b.workers(), func(i int) error {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("job-%d", i%b.PerNamespace), Labels: map[string]string{b.Label: b.Run}},
			Spec: batchv1.JobSpec{
				Completions: &completions, Parallelism: &completions,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "work", Image: "registry.k8s.io/pause:3.10"}},
				}},
			},
		}
		_, err := client.BatchV1().Jobs(nss[i/b.PerNamespace]).Create(context.Background(), j, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// WaitJobsComplete polls until want Jobs of the burst have the Complete condition, failing
// t after timeout; it logs like WaitComplete.
func (b Burst) WaitJobsComplete(ctx context.Context, t testing.TB, client kubernetes.Interface, want int, timeout time.Duration) {
	t.Helper()
	b.waitDone(t, "Jobs", want, timeout, func() (int, string, error) {
		list, err := client.BatchV1().Jobs(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: b.Selector(), ResourceVersion: "0"})
		if err != nil {
			return 0, "", err
		}
		done, example := 0, ""
		for i := range list.Items {
			if j := &list.Items[i]; jobComplete(j) {
				done++
			} else if example == "" {
				example = fmt.Sprintf("job %s/%s: %d of %d succeeded, %d active", j.Namespace, j.Name, j.Status.Succeeded, *j.Spec.Completions, j.Status.Active)
			}
		}
		return done, example, nil
	})
}

func jobComplete(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// WaitComplete polls until want Deployments of the burst have completed their rollout,
// failing t after timeout. It logs when half, 90 % and 99 % of them were complete, so
// that a long tail shows.
func (b Burst) WaitComplete(ctx context.Context, t testing.TB, client kubernetes.Interface, want int, timeout time.Duration) {
	t.Helper()
	b.waitDone(t, "Deployments", want, timeout, func() (int, string, error) {
		list, err := client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: b.Selector(), ResourceVersion: "0"})
		if err != nil {
			return 0, "", err
		}
		done, example := 0, ""
		for i := range list.Items {
			if e := DeploymentComplete(&list.Items[i]); e == nil {
				done++
			} else if example == "" {
				example = e.Error()
			}
		}
		return done, example, nil
	})
}

// waitDone polls count (objects done, what one not done is waiting for, a failed poll)
// until want are done, logging the 50/90/99 % marks.
func (b Burst) waitDone(t testing.TB, what string, want int, timeout time.Duration, count func() (int, string, error)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	marks := []float64{0.5, 0.9, 0.99}
	var reached []string
	defer func() { t.Logf("%s: complete at %s", b.Run, strings.Join(reached, ", ")) }()
	for {
		done, example, err := count()
		if err == nil {
			for len(marks) > 0 && float64(done) >= marks[0]*float64(want) {
				reached = append(reached, fmt.Sprintf("%.0f%% %s", marks[0]*100, time.Since(start).Round(100*time.Millisecond)))
				marks = marks[1:]
			}
			if done == want {
				reached = append(reached, fmt.Sprintf("100%% %s", time.Since(start).Round(100*time.Millisecond)))
				return
			}
		} else {
			example = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d %s complete after %s, e.g. %s", done, want, what, timeout, example)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// DeleteNamespaces deletes load's namespaces and waits up to timeout until they are gone,
// as Burst.DeleteNamespaces does, with a namespace controller running: when the cluster's
// kube-controller-manager does not run it (it is switched off where kshard's shards run
// it), it starts a kube-controller-manager running only that controller for the wait. A
// benchmark's deferred deletion runs after it stopped its own controllers; without one the
// namespaces stayed Terminating until the next run's shards started (the Jobs benchmark
// waited its full 15 min after the upstream run).
func (f *Framework) DeleteNamespaces(t testing.TB, load Burst, client kubernetes.Interface, timeout time.Duration) {
	t.Helper()
	if slices.Contains(f.missingHousekeeping(), "namespace") {
		kcm := f.StartKCM(t, "kcm-namespace-"+load.Run, KCMOptions{Controllers: []string{"namespace"}, NoHousekeeping: true})
		defer kcm.Kill()
	}
	load.DeleteNamespaces(t, client, timeout)
}

// DeleteNamespaces deletes the burst's namespaces and waits up to timeout until they are
// gone, so that the next run starts on an empty cluster; it reports a failure with
// t.Errorf (the figures of the run stand).
func (b Burst) DeleteNamespaces(t testing.TB, client kubernetes.Interface, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	sel := metav1.ListOptions{LabelSelector: b.Selector()}
	list, err := client.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		t.Errorf("listing namespaces: %v", err)
		return
	}
	if err := Parallel(len(list.Items), b.workers(), func(i int) error {
		return client.CoreV1().Namespaces().Delete(ctx, list.Items[i].Name, metav1.DeleteOptions{})
	}); err != nil {
		t.Errorf("deleting namespaces: %v", err)
		return
	}
	for time.Since(start) < timeout {
		left, err := client.CoreV1().Namespaces().List(ctx, sel)
		if err == nil && len(left.Items) == 0 {
			t.Logf("%s: namespaces deleted and gone in %s", b.Run, time.Since(start).Round(time.Second))
			return
		}
		time.Sleep(2 * time.Second)
	}
	t.Errorf("namespaces of %s not gone after %s", b.Run, timeout)
}

// LoadClient returns a client of f's cluster with limits high enough (2,000 QPS, burst
// 4,000) that a benchmark's own creates and polls are never what bounds it.
func (f *Framework) LoadClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(f.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

package batch

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/test/framework"
)

// killLabel marks the pods of this test's Jobs, for its pod watch.
const killLabel = "kshard.io/e2e-shard-kill"

// Jobs keep counting right when a shard is SIGKILLed while they run and its namespaces
// move to the other shard and to a new one: every Job completes with exactly its
// completions counted (each succeeded pod once: NonIndexed by UID through
// uncountedTerminatedPods, Indexed by index), and, at every pod event the test observes,
// no Job has more active pods than its parallelism. Not parallel: it kills a shard that
// the package's other tests use.
func TestJobCountsSurviveShardKill(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the job controller: no shard to kill")
	}
	const namespaces, jobsPerNS, completions, parallelism = 4, 6, 6, 3
	var envs []*env
	for i := 0; i < namespaces; i++ {
		envs = append(envs, newEnv(t))
	}

	// The pod watch: active pods per Job, checked at every event.
	var mu sync.Mutex
	var violations []string
	stop := make(chan struct{})
	defer close(stop)
	factory := informers.NewSharedInformerFactoryWithOptions(envs[0].cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = killLabel }))
	podInf := factory.Core().V1().Pods().Informer()
	check := func(any) {
		active := map[string]int{}
		for _, o := range podInf.GetStore().List() {
			p := o.(*corev1.Pod)
			if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				active[p.Namespace+"/"+p.Labels["batch.kubernetes.io/job-name"]]++
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for job, n := range active {
			if n > parallelism {
				violations = append(violations, fmt.Sprintf("%s: %d active pods > parallelism %d at %s", job, n, parallelism, time.Now().Format("15:04:05.000")))
			}
		}
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: check,
		UpdateFunc: func(_, cur any) { check(cur) }, DeleteFunc: check}); err != nil {
		t.Fatal(err)
	}
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	for _, e := range envs {
		for j := 0; j < jobsPerNS; j++ {
			opts := []jobOpt{func(j *batchv1.Job) { j.Spec.Template.Labels[killLabel] = "1" }}
			if j%2 == 1 {
				opts = append(opts, indexed)
			}
			e.create(newJob(fmt.Sprintf("job-%d", j), parallelism, completions, opts...))
		}
	}
	time.Sleep(700 * time.Millisecond)
	var victim *framework.Shard
	for _, s := range c.KShard.Shards {
		if !s.Exited() {
			victim = s
			break
		}
	}
	finished := 0
	for _, e := range envs {
		js, _ := e.cs.BatchV1().Jobs(e.ns).List(e.ctx(), metav1.ListOptions{})
		for _, j := range js.Items {
			if hasCondition(&j, batchv1.JobComplete) {
				finished++
			}
		}
	}
	t.Logf("SIGKILL of %s with %d of %d Jobs complete", victim.Name, finished, namespaces*jobsPerNS)
	_ = victim.Signal(syscall.SIGKILL)
	c.KShard.StartShard(fmt.Sprintf("%s-replacement-%d", victim.Name, time.Now().Unix()%1000))

	for _, e := range envs {
		for j := 0; j < jobsPerNS; j++ {
			name := fmt.Sprintf("job-%d", j)
			job := e.waitJob(name, 150*time.Second, "Complete", func(j *batchv1.Job) bool { return hasCondition(j, batchv1.JobComplete) })
			succeededPods := 0
			for _, p := range e.pods(name) {
				if p.Status.Phase == corev1.PodSucceeded {
					succeededPods++
				}
			}
			st := job.Status
			if st.Succeeded != completions || st.Failed != 0 {
				t.Errorf("%s/%s: succeeded %d failed %d, want %d and 0", e.ns, name, st.Succeeded, st.Failed, completions)
			}
			if job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion {
				if st.CompletedIndexes != fmt.Sprintf("0-%d", completions-1) {
					t.Errorf("%s/%s: completedIndexes %q", e.ns, name, st.CompletedIndexes)
				}
			} else if succeededPods != int(st.Succeeded) {
				t.Errorf("%s/%s: %d succeeded pods, %d counted", e.ns, name, succeededPods, st.Succeeded)
			}
			if u := st.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
				t.Errorf("%s/%s: uncounted %+v", e.ns, name, u)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range violations {
		t.Error(v)
	}
}

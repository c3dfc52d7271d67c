package batch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/test/framework"
)

// The handoff tests move a test's namespace from one shard of the package's set to another
// at a moment of the test's choosing: a spare shard joins first (scale-out, so the set
// keeps its size), then the shard that owns the namespace gets SIGTERM (a graceful
// scale-in: it hands every partition it owns over, Prepare → Release → Acquire, and
// exits). The namespace's partition is among them, so it moves whatever the ring does.

var spareShards atomic.Int32

// kshardOrSkip returns the package's kshard set, or skips when the cluster's
// kube-controller-manager runs the batch controllers (nothing to hand over).
func kshardOrSkip(t *testing.T) *framework.KShard {
	t.Helper()
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the batch controllers: no shards to move a namespace between")
	}
	return c.KShard
}

// scaleOut starts a spare shard and waits until every live shard owns partitions.
func scaleOut(t *testing.T, k *framework.KShard) *framework.Shard {
	t.Helper()
	s := k.StartShard(fmt.Sprintf("shard-handoff-%d-%d", spareShards.Add(1), time.Now().UnixNano()%1e4))
	k.WaitAllOwned(t, 90*time.Second)
	framework.WaitHTTP(t, s.HTTPURL+"/readyz", 60*time.Second)
	return s
}

// handOff sends SIGTERM to ns's owner and returns it: its partitions, ns's among them,
// are being handed over when handOff returns.
func handOff(t *testing.T, owner *framework.Shard) time.Time {
	t.Helper()
	at := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return at
}

// waitHandedOver waits until the old owner has exited cleanly and ns is owned by another
// live shard; it returns the new owner's name and when the test saw it.
func waitHandedOver(t *testing.T, k *framework.KShard, ns string, old *framework.Shard) (string, time.Time) {
	t.Helper()
	var to string
	var at time.Time
	framework.Eventually(t, 90*time.Second, "namespace "+ns+" handed over by "+old.Name, func(ctx context.Context) (bool, error) {
		o, err := k.NamespaceOwner(ctx, ns)
		if err != nil {
			return false, err
		}
		if o.Shard == old.Name || o.State != "owned" {
			return false, fmt.Errorf("owner %+v", o)
		}
		to, at = o.Shard, time.Now()
		return true, nil
	})
	exited, err := old.Wait(90 * time.Second)
	if !exited {
		t.Fatalf("%s did not exit within 90s of SIGTERM", old.Name)
	}
	if err != nil {
		t.Errorf("%s exited with %v after SIGTERM; want a clean exit after handing over", old.Name, err)
	}
	k.WaitAllOwned(t, 90*time.Second)
	return to, at
}

// podWatch watches the pods of one label and checks, at every event, that no Job has
// more active pods (not terminal, not being deleted) than its parallelism, and that no
// completion index has two succeeded pods.
type podWatch struct {
	mu          sync.Mutex
	parallelism map[string]int32 // job name → parallelism
	maxActive   map[string]int
	succeeded   map[string]map[string]bool // job/index → succeeded pod UIDs
	violations  []string
	events      int
	inf         cache.SharedIndexInformer
}

func startPodWatch(t *testing.T, cs kubernetes.Interface, ns string, parallelism map[string]int32) *podWatch {
	t.Helper()
	w := &podWatch{parallelism: parallelism, maxActive: map[string]int{}, succeeded: map[string]map[string]bool{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	w.inf = factory.Core().V1().Pods().Informer()
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.check() },
		UpdateFunc: func(_, _ any) { w.check() },
		DeleteFunc: func(any) { w.check() },
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return w
}

func (w *podWatch) check() {
	active := map[string]int{}
	for _, o := range w.inf.GetStore().List() {
		p := o.(*corev1.Pod)
		job := p.Labels[batchv1.JobNameLabel]
		if job == "" {
			continue
		}
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			active[job]++
		}
		if idx, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]; ok && p.Status.Phase == corev1.PodSucceeded {
			w.mu.Lock()
			key := job + "/" + idx
			if w.succeeded[key] == nil {
				w.succeeded[key] = map[string]bool{}
			}
			if !w.succeeded[key][string(p.UID)] {
				w.succeeded[key][string(p.UID)] = true
				if len(w.succeeded[key]) == 2 {
					w.violations = append(w.violations, fmt.Sprintf("index %s succeeded twice (pods %v) at %s", key, w.succeeded[key], time.Now().Format("15:04:05.000")))
				}
			}
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	for job, n := range active {
		w.maxActive[job] = max(w.maxActive[job], n)
		if par, ok := w.parallelism[job]; ok && n > int(par) {
			w.violations = append(w.violations, fmt.Sprintf("%s: %d active pods > parallelism %d at %s", job, n, par, time.Now().Format("15:04:05.000")))
		}
	}
}

func (w *podWatch) report(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("pod watch: %d events, most active pods per Job %v", w.events, w.maxActive)
	for _, v := range w.violations {
		t.Error(v)
	}
}

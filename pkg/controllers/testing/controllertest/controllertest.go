package controllertest

import (
	"fmt"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kshard/kshard/pkg/controllers"
)

// Informers serves a controller the informers of a SharedInformerFactory, in place of the
// shard's filtered ones.
type Informers struct {
	informers.SharedInformerFactory
}

var _ controllers.Informers = Informers{}

// Pods returns the factory's Pod informer.
func (i Informers) Pods() coreinformers.PodInformer { return i.Core().V1().Pods() }

// ConfigMaps returns the factory's ConfigMap informer.
func (i Informers) ConfigMaps() coreinformers.ConfigMapInformer { return i.Core().V1().ConfigMaps() }

// Secrets returns the factory's Secret informer.
func (i Informers) Secrets() coreinformers.SecretInformer { return i.Core().V1().Secrets() }

// ServiceAccounts returns the factory's ServiceAccount informer.
func (i Informers) ServiceAccounts() coreinformers.ServiceAccountInformer {
	return i.Core().V1().ServiceAccounts()
}

// Namespaces returns the factory's Namespace informer.
func (i Informers) Namespaces() coreinformers.NamespaceInformer { return i.Core().V1().Namespaces() }

// ReplicaSets returns the factory's ReplicaSet informer.
func (i Informers) ReplicaSets() appsinformers.ReplicaSetInformer { return i.Apps().V1().ReplicaSets() }

// Deployments returns the factory's Deployment informer.
func (i Informers) Deployments() appsinformers.DeploymentInformer { return i.Apps().V1().Deployments() }

// ControllerRevisions returns the factory's ControllerRevision informer.
func (i Informers) ControllerRevisions() appsinformers.ControllerRevisionInformer {
	return i.Apps().V1().ControllerRevisions()
}

// Jobs returns the factory's Job informer.
func (i Informers) Jobs() batchinformers.JobInformer { return i.Batch().V1().Jobs() }

// CronJobs returns the factory's CronJob informer.
func (i Informers) CronJobs() batchinformers.CronJobInformer { return i.Batch().V1().CronJobs() }

// Indexer returns the cache of obj's type, so a test can add or remove it without
// running event handlers.
func (i Informers) Indexer(obj runtime.Object) (toolscache.Indexer, error) {
	switch obj.(type) {
	case *corev1.Pod:
		return i.Pods().Informer().GetIndexer(), nil
	case *corev1.ConfigMap:
		return i.ConfigMaps().Informer().GetIndexer(), nil
	case *corev1.Secret:
		return i.Secrets().Informer().GetIndexer(), nil
	case *corev1.ServiceAccount:
		return i.ServiceAccounts().Informer().GetIndexer(), nil
	case *corev1.Namespace:
		return i.Namespaces().Informer().GetIndexer(), nil
	case *appsv1.ReplicaSet:
		return i.ReplicaSets().Informer().GetIndexer(), nil
	case *appsv1.Deployment:
		return i.Deployments().Informer().GetIndexer(), nil
	case *appsv1.ControllerRevision:
		return i.ControllerRevisions().Informer().GetIndexer(), nil
	case *batchv1.Job:
		return i.Jobs().Informer().GetIndexer(), nil
	case *batchv1.CronJob:
		return i.CronJobs().Informer().GetIndexer(), nil
	}
	return nil, fmt.Errorf("no informer for %T", obj)
}

// Queue is a real rate-limited queue that records AddAfter and AddRateLimited instead of
// waiting, so a test sees requeues (e.g. after minReadySeconds) at once.
type Queue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu          sync.Mutex
	after       map[string]time.Duration
	rateLimited []string
}

// NewQueue returns an empty Queue.
func NewQueue() *Queue {
	return &Queue{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		after:                      map[string]time.Duration{},
	}
}

// AddAfter records the shortest delay asked for key.
func (q *Queue) AddAfter(key string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if prev, ok := q.after[key]; !ok || d < prev {
		q.after[key] = d
	}
}

// AddRateLimited records key.
func (q *Queue) AddRateLimited(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rateLimited = append(q.rateLimited, key)
}

// After returns the shortest delay asked for key, if any.
func (q *Queue) After(key string) (time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d, ok := q.after[key]
	return d, ok
}

// Delayed returns every key added with a delay, with its shortest delay.
func (q *Queue) Delayed() map[string]time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make(map[string]time.Duration, len(q.after))
	for k, d := range q.after {
		out[k] = d
	}
	return out
}

// RateLimited returns the keys added rate-limited, in order.
func (q *Queue) RateLimited() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.rateLimited...)
}

// Keys drains the keys available now and returns them sorted.
func (q *Queue) Keys() []string {
	var out []string
	for q.Len() > 0 {
		k, _ := q.Get()
		q.Done(k)
		q.Forget(k)
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// RolloutApp is the pod template label that names a test Deployment; SurgeWatch maps
// pods to their Deployment by it.
const RolloutApp = "kshard.io/e2e-app"

// NewRollingDeployment returns a RollingUpdate Deployment whose pods carry RolloutApp=name
// plus extra labels, running image.
func NewRollingDeployment(name string, replicas int32, maxSurge, maxUnavailable intstr.IntOrString, image string, extra map[string]string) *appsv1.Deployment {
	labels := map[string]string{RolloutApp: name}
	for k, v := range extra {
		labels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{RolloutApp: name}},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge, MaxUnavailable: &maxUnavailable},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{{Name: "app", Image: image}},
					TerminationGracePeriodSeconds: new(int64),
				},
			},
		},
	}
}

// DeploymentComplete returns nil when d has finished its latest rollout as
// `kubectl rollout status` and upstream see it: the controller observed the latest
// generation, every replica is updated, ready and available, none is left over, and
// Progressing is True with reason NewReplicaSetAvailable. Otherwise it says what is
// missing.
func DeploymentComplete(d *appsv1.Deployment) error {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	if s.ObservedGeneration < d.Generation {
		return fmt.Errorf("%s/%s: observedGeneration %d < generation %d", d.Namespace, d.Name, s.ObservedGeneration, d.Generation)
	}
	if s.Replicas != want || s.UpdatedReplicas != want || s.ReadyReplicas != want || s.AvailableReplicas != want || s.UnavailableReplicas != 0 {
		return fmt.Errorf("%s/%s: replicas=%d updated=%d ready=%d available=%d unavailable=%d, want %d", d.Namespace, d.Name,
			s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas, want)
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			if c.Status != corev1.ConditionTrue || c.Reason != "NewReplicaSetAvailable" {
				return fmt.Errorf("%s/%s: Progressing=%s reason %s", d.Namespace, d.Name, c.Status, c.Reason)
			}
			return nil
		}
	}
	return fmt.Errorf("%s/%s: no Progressing condition", d.Namespace, d.Name)
}

// SurgeBound is what a RollingUpdate Deployment allows: replicas + maxSurge, the surge
// resolved against replicas with a percentage rounded up, as the Deployment controller
// does. Recreate allows replicas.
func SurgeBound(d *appsv1.Deployment) (int, error) {
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType || ru == nil || ru.MaxSurge == nil {
		if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			return replicas, nil
		}
		// The API defaults maxSurge to 25%.
		ru = &appsv1.RollingUpdateDeployment{MaxSurge: new(intstr.FromString("25%"))}
	}
	surge, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, replicas, true)
	if err != nil {
		return 0, fmt.Errorf("%s/%s: maxSurge: %w", d.Namespace, d.Name, err)
	}
	return replicas + surge, nil
}

// SurgeViolation is one observed instant at which a ReplicaSet had more pods than its
// Deployment allows.
type SurgeViolation struct {
	At         time.Time
	ReplicaSet string // namespace/name
	Pods       int
	Bound      int
	// Spec is the ReplicaSet's spec.replicas as the watch last saw it (-1: not seen), which
	// tells a Deployment controller that scaled too far from a ReplicaSet controller that
	// created too many.
	Spec int
	// PodNames are the ReplicaSet's counted pods at that instant, with their creation
	// times, for the investigation.
	PodNames []string
}

func (v SurgeViolation) String() string {
	return fmt.Sprintf("%s: ReplicaSet %s had %d non-terminating pods (its spec.replicas %d), bound %d: %v", v.At.Format("15:04:05.000"), v.ReplicaSet, v.Pods, v.Spec, v.Bound, v.PodNames)
}

// SurgeWatch watches the pods and Deployments of a cluster and checks, at every pod event
// it observes, that no ReplicaSet has more non-terminating pods than its Deployment's
// replicas + maxSurge. It also keeps the highest per-Deployment total (all of its
// ReplicaSets' pods) above that bound, which upstream itself can exceed for an instant
// (an old pod's deletion and a new pod's creation race); see docs/controllers.md.
//
// A pod belongs to the ReplicaSet of its controllerRef and to the Deployment named by its
// RolloutApp label. The bound uses the highest replica count seen for the Deployment, so
// that a scale-down the ReplicaSets have not carried out yet is not reported.
type SurgeWatch struct {
	mu          sync.Mutex
	pods        map[string]surgePod // by namespace/name
	perRS       map[string]int
	perDeploy   map[string]int
	bounds      map[string]int // namespace/deployment -> replicas+maxSurge (highest seen)
	rsSpec      map[string]int // namespace/replicaset -> spec.replicas
	events      int
	unbounded   int
	violations  []SurgeViolation
	maxRSExcess int
	maxDeploy   map[string]int // highest excess of the per-Deployment total, by Deployment
}

type surgePod struct {
	rs, deploy string
	created    time.Time
	counted    bool
}

// WatchSurge starts a SurgeWatch on pods and Deployments carrying the label selector
// until ctx ends; it returns when the informers have synced.
func WatchSurge(ctx context.Context, client kubernetes.Interface, selector string) (*SurgeWatch, error) {
	w := &SurgeWatch{pods: map[string]surgePod{}, perRS: map[string]int{}, perDeploy: map[string]int{},
		bounds: map[string]int{}, rsSpec: map[string]int{}, maxDeploy: map[string]int{}}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	deps := factory.Apps().V1().Deployments().Informer()
	rss := factory.Apps().V1().ReplicaSets().Informer()
	if _, err := rss.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.onReplicaSet,
		UpdateFunc: func(_, obj any) { w.onReplicaSet(obj) },
	}); err != nil {
		return nil, err
	}
	pods := factory.Core().V1().Pods().Informer()
	if _, err := deps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.onDeployment,
		UpdateFunc: func(_, obj any) { w.onDeployment(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { w.onPod(obj, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			w.onPod(obj, true)
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the %v informer did not sync", typ)
		}
	}
	return w, nil
}

func (w *SurgeWatch) onDeployment(obj any) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return
	}
	b, err := SurgeBound(d)
	if err != nil {
		return
	}
	key := d.Namespace + "/" + d.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bounds[key] = max(w.bounds[key], b)
}

func (w *SurgeWatch) onReplicaSet(obj any) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return
	}
	n := 1
	if rs.Spec.Replicas != nil {
		n = int(*rs.Spec.Replicas)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rsSpec[rs.Namespace+"/"+rs.Name] = n
}

func (w *SurgeWatch) onPod(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	// Take the pod's previous contribution away, then add its current one.
	if old, ok := w.pods[key]; ok && old.counted {
		w.perRS[old.rs]--
		w.perDeploy[old.deploy]--
	}
	delete(w.pods, key)
	if deleted {
		return
	}
	p := surgePod{deploy: pod.Namespace + "/" + pod.Labels[RolloutApp], created: pod.CreationTimestamp.Time}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "ReplicaSet" {
		p.rs = pod.Namespace + "/" + ref.Name
	}
	p.counted = p.rs != "" && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
	w.pods[key] = p
	if !p.counted {
		return
	}
	w.perRS[p.rs]++
	w.perDeploy[p.deploy]++
	bound, ok := w.bounds[p.deploy]
	if !ok {
		w.unbounded++
		return
	}
	if n := w.perRS[p.rs]; n > bound {
		spec, ok := w.rsSpec[p.rs]
		if !ok {
			spec = -1
		}
		w.violations = append(w.violations, SurgeViolation{At: now, ReplicaSet: p.rs, Pods: n, Spec: spec, Bound: bound, PodNames: w.podsOf(p.rs)})
		w.maxRSExcess = max(w.maxRSExcess, n-bound)
	}
	if n := w.perDeploy[p.deploy]; n > bound {
		w.maxDeploy[p.deploy] = max(w.maxDeploy[p.deploy], n-bound)
	}
}

// podsOf lists the counted pods of a ReplicaSet with their creation times; w.mu is held.
func (w *SurgeWatch) podsOf(rs string) []string {
	var out []string
	for key, p := range w.pods {
		if p.counted && p.rs == rs {
			out = append(out, fmt.Sprintf("%s@%s", key[strings.IndexByte(key, '/')+1:], p.created.Format("15:04:05")))
		}
	}
	sort.Strings(out)
	return out
}

// SurgeReport is what a SurgeWatch observed so far.
type SurgeReport struct {
	// Events is the number of pod events checked.
	Events int
	// Unbounded counts pod events whose Deployment was not known yet (not checked).
	Unbounded int
	// Violations are the instants at which a ReplicaSet exceeded its bound.
	Violations []SurgeViolation
	// MaxRSExcess is the largest excess of one ReplicaSet over its bound (0: none).
	MaxRSExcess int
	// DeploymentsOver counts Deployments whose total exceeded the bound at some instant;
	// MaxDeploymentExcess is the largest such excess.
	DeploymentsOver     int
	MaxDeploymentExcess int
}

// Report returns what was observed so far.
func (w *SurgeWatch) Report() SurgeReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := SurgeReport{Events: w.events, Unbounded: w.unbounded, MaxRSExcess: w.maxRSExcess,
		Violations: append([]SurgeViolation(nil), w.violations...), DeploymentsOver: len(w.maxDeploy)}
	for _, e := range w.maxDeploy {
		r.MaxDeploymentExcess = max(r.MaxDeploymentExcess, e)
	}
	return r
}

func (r SurgeReport) String() string {
	return fmt.Sprintf("%d pod events checked (%d before their Deployment was seen); ReplicaSets over replicas+maxSurge: %d instants (max excess %d); Deployments whose total pods exceeded replicas+maxSurge at some instant: %d (max excess %d)",
		r.Events, r.Unbounded, len(r.Violations), r.MaxRSExcess, r.DeploymentsOver, r.MaxDeploymentExcess)
}

// WaitAllOwned fails t unless, within timeout, the leading coordinator reports a converged
// assignment in which every live shard owns partitions and no shard that no longer runs
// owns any (so every namespace has a worker, and none moves later).
func (k *KShard) WaitAllOwned(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := waitOwned(k, timeout); err != nil {
		t.Fatal(err)
	}
}

// Parallel calls fn(0) … fn(n-1) on at most workers goroutines and returns the first
// error (every call runs regardless).
func Parallel(n, workers int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range max(1, min(workers, n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// GuardAlone fails t if, while t runs, another kshard instance (a coordinator leader of
// another lease whose name starts with "kshard") is active on the same cluster. Each
// kshard instance works every namespace of the cluster, so two at once create duplicate
// pods and events, and a test of controller behaviour would blame the controllers for
// what is a second owner. `make test` runs test packages one at a time; this catches
// tests run by hand side by side.
func (k *KShard) GuardAlone(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := time.Now()
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		done = make(chan struct{})
	)
	check := func() {
		// Every namespace: the tests' coordinators elect in kube-system, the demo's (as the
		// chart's) in kshard-system.
		leases, err := k.f.Client.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		now := time.Now()
		for _, l := range leases.Items {
			if l.Name == k.leaseName || !strings.HasPrefix(l.Name, "kshard") || l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				continue
			}
			ttl := 15 * time.Second
			if l.Spec.LeaseDurationSeconds != nil {
				ttl = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
			}
			// Renewed since the guard started (a leader that died just before leaves its
			// Lease renewed a moment ago) and recently: a live instance.
			if l.Spec.RenewTime.After(started.Add(time.Second)) && now.Sub(l.Spec.RenewTime.Time) < ttl+2*time.Second {
				mu.Lock()
				if _, ok := seen[l.Name]; !ok {
					seen[l.Name] = fmt.Sprintf("lease %s held by %s, renewed %s", l.Name, *l.Spec.HolderIdentity, l.Spec.RenewTime.Format("15:04:05"))
				}
				mu.Unlock()
			}
		}
	}
	go func() {
		defer close(done)
		for {
			check()
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 {
			return
		}
		var others []string
		for _, s := range seen {
			others = append(others, s)
		}
		sort.Strings(others)
		t.Errorf("another kshard instance worked this cluster during the test (%s): both own every namespace, so duplicate pods and events are expected and this test's results are void; run kshard tests one at a time", strings.Join(others, "; "))
	})
}

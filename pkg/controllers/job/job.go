package job

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
	"github.com/kshard/kshard/pkg/controllers/internal/expectations"
	"github.com/kshard/kshard/pkg/controllers/internal/podcontrol"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller.
const Name = "job"

// The spec.managedBy values the controller works (see ManagedByFlag).
const (
	// ManagedByUpstream is kube-controller-manager's own value: with it (the default)
	// kshard takes the job controller over and works every Job whose managedBy is unset
	// or this value.
	ManagedByUpstream = batchv1.JobControllerName
	// ManagedByKShard is kshard's own value: with it kshard works only the Jobs that name
	// it, beside a kube-controller-manager that keeps its job controller on (which leaves
	// Jobs managed by anybody else alone).
	ManagedByKShard = "kshard.io/job-controller"
	// ManagedByFlag selects one of the two.
	ManagedByFlag = "job-managed-by"
)

// Timing as upstream's: pod events are batched for a second before a Job is synced, and
// one sync creates or deletes at most 500 pods and puts at most 500 pods into
// status.uncountedTerminatedPods (which keeps it below about 20 KB).
var (
	syncBatchPeriod     = time.Second
	maxPodChangesOnSync = 500
	maxUncountedPods    = 500
)

// kind is written into the controllerRef of the pods the controller creates and adopts.
var kind = batchv1.SchemeGroupVersion.WithKind("Job")

// The informers the controller reads: its primary Jobs and their pods.
var (
	jobs = controllers.Typed(batchv1.SchemeGroupVersion.WithResource("jobs"))
	pods = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	// The resources of the controller's own writes that the next sync of a Job waits
	// for its caches to reach.
	jobsResource = jobs.GroupResource()
	podsResource = pods.GroupResource()
)

// OrphanQueue names the controller's second queue (upstream's name): keys of pods whose
// tracking finalizer no Job sync will remove, because no unfinished Job of this
// controller owns them.
const OrphanQueue = "job_orphan_pod"

// Options are the controller's own flags.
type Options struct {
	// ManagedBy is ManagedByUpstream or ManagedByKShard.
	ManagedBy string
}

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-job-syncs flag and default of 5 workers, and --job-managed-by.
func Descriptor() controllers.Descriptor {
	opts := &Options{ManagedBy: ManagedByUpstream}
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-job-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{jobs},
		Reads:   []controllers.Resource{pods},
		// Pods whose tracking finalizer no Job sync will remove (OrphanQueue), with
		// upstream's rate limiter. A namespace's new owner queues each of its pods.
		Queues: []controllers.QueueSpec{{Name: OrphanQueue, Primary: []controllers.Resource{pods},
			RateLimiter: func() workqueue.TypedRateLimiter[string] {
				return workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute)
			}}},
		Permissions: []controllers.Permission{
			{Group: "batch", Resource: "jobs", Verbs: []string{"get"}},
			{Group: "batch", Resource: "jobs/status", Verbs: []string{"update"}},
			// Pods are created with blockOwnerDeletion, which the
			// OwnerReferencesPermissionEnforcement admission plugin allows only to
			// whoever may update the owner's finalizers.
			{Group: "batch", Resource: "jobs/finalizers", Verbs: []string{"update"}},
			{Resource: "pods", Verbs: []string{"create", "delete", "patch"}},
		},
		AddFlags: func(fs *pflag.FlagSet) {
			fs.StringVar(&opts.ManagedBy, ManagedByFlag, opts.ManagedBy, fmt.Sprintf(
				"which Jobs the job controller works: %q (the default) takes kube-controller-manager's job controller over and works Jobs whose spec.managedBy is unset or %[1]q; %q works only Jobs whose spec.managedBy is %[2]q, beside a kube-controller-manager that keeps its job controller on",
				ManagedByUpstream, ManagedByKShard))
		},
		New: func(c controllers.Context) (controllers.Controller, error) {
			return newController(c, *opts, clock.RealClock{})
		},
	}
}

// Controller is the Job controller.
type Controller struct {
	client     kubernetes.Interface
	jobLister  batchlisters.JobLister
	podLister  corelisters.PodLister
	podIndexer toolscache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string]
	orphans    workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	pods       podcontrol.Control
	metrics    *controllers.ReconcileMetrics
	jobMetrics *Metrics
	managedBy  string
	clock      clock.PassiveClock

	expectations *expectations.Expectations
	finalizers   *finalizerExpectations
	backoff      *backoffStore
	// consistency holds a Job's sync back until the caches show the controller's own last
	// writes for it (upstream's StaleControllerConsistencyJob, on by default in 1.37).
	consistency *consistency.Store
	// finished holds the UIDs of Jobs this controller marked finished whose update it
	// has not yet seen in its cache: they are not synced again meanwhile.
	finished sync.Map
}

func newController(c controllers.Context, opts Options, clk clock.PassiveClock) (*Controller, error) {
	if opts.ManagedBy != ManagedByUpstream && opts.ManagedBy != ManagedByKShard {
		return nil, fmt.Errorf("--%s=%q: must be %q or %q", ManagedByFlag, opts.ManagedBy, ManagedByUpstream, ManagedByKShard)
	}
	infs, err := controllers.InformersFor(c.Informers, jobs, pods)
	if err != nil {
		return nil, err
	}
	jobInf, podInf := infs[0], infs[1]
	reg := c.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry() // nobody collects them
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	orphans := c.Queues[OrphanQueue]
	if orphans == nil {
		return nil, fmt.Errorf("no %s queue in the controller's context", OrphanQueue)
	}
	ctrl := &Controller{
		client:       c.Client,
		jobLister:    batchlisters.NewJobLister(jobInf.GetIndexer()),
		podLister:    corelisters.NewPodLister(podInf.GetIndexer()),
		podIndexer:   podInf.GetIndexer(),
		queue:        c.Queue,
		orphans:      orphans,
		recorder:     c.Recorder,
		pods:         podcontrol.Control{Client: c.Client, Recorder: c.Recorder},
		metrics:      c.Metrics,
		jobMetrics:   m,
		managedBy:    opts.ManagedBy,
		clock:        clk,
		expectations: expectations.New(clk),
		finalizers:   newFinalizerExpectations(),
		backoff:      newBackoffStore(),
		consistency: consistency.New(map[schema.GroupResource]consistency.RVSource{
			jobsResource: jobInf.GetStore(),
			podsResource: podInf.GetStore(),
		}),
	}
	if err := podutil.AddControllerIndex(podInf); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	log := c.Logger
	if _, err := jobInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addJob(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updateJob(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.deleteJob(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addPod(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updatePod(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.deletePod(log, obj, true) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers Job workers and as many orphan-pod workers until ctx ends. Orphan-pod
// syncs are not counted in the reconcile metrics, which count Job syncs.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		controllers.RunWorkers(ctx, OrphanQueue, c.orphans, workers, c.syncOrphan, nil)
	}()
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
	wg.Wait()
}

// handles reports whether this controller works job, by its spec.managedBy.
func (c *Controller) handles(job *batchv1.Job) bool {
	if c.managedBy == ManagedByKShard {
		return job.Spec.ManagedBy != nil && *job.Spec.ManagedBy == ManagedByKShard
	}
	return job.Spec.ManagedBy == nil || *job.Spec.ManagedBy == ManagedByUpstream
}

func keyOf(job *batchv1.Job) string { return job.Namespace + "/" + job.Name }

// enqueue queues job's key after delay: 0 for changes of the Job itself, the batch period
// for pod events and status updates (so a burst of them costs one sync).
func (c *Controller) enqueue(log klog.Logger, job *batchv1.Job, delay time.Duration) {
	log.V(4).Info("enqueueing job", "namespace", job.Namespace, "name", job.Name, "delay", delay)
	if delay <= 0 {
		c.queue.Add(keyOf(job))
		return
	}
	c.queue.AddAfter(keyOf(job), delay)
}

func (c *Controller) addJob(log klog.Logger, obj any) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	c.enqueue(log, job, 0)
	if !c.handles(job) {
		c.jobMetrics.ByExternalController.WithLabelValues(ptr.Deref(job.Spec.ManagedBy, ManagedByUpstream)).Inc()
	}
}

func (c *Controller) updateJob(log klog.Logger, old, cur any) {
	oldJob, ok1 := old.(*batchv1.Job)
	curJob, ok2 := cur.(*batchv1.Job)
	if !ok1 || !ok2 {
		return
	}
	if isFinished(curJob) {
		// Finished Jobs keep no finalizers on their pods; clean any left behind.
		c.enqueueSelector(log, curJob)
		return
	}
	if curJob.Generation == oldJob.Generation {
		c.enqueue(log, curJob, syncBatchPeriod)
	} else {
		c.enqueue(log, curJob, 0)
	}
	// A changed activeDeadlineSeconds: look again when the new deadline passes.
	if curJob.Status.StartTime != nil && curJob.Spec.ActiveDeadlineSeconds != nil {
		if o := oldJob.Spec.ActiveDeadlineSeconds; o == nil || *o != *curJob.Spec.ActiveDeadlineSeconds {
			left := time.Duration(*curJob.Spec.ActiveDeadlineSeconds)*time.Second - c.clock.Since(curJob.Status.StartTime.Time)
			log.V(4).Info("job's ActiveDeadlineSeconds updated, will rsync", "namespace", curJob.Namespace, "name", curJob.Name, "interval", left)
			c.queue.AddAfter(keyOf(curJob), left)
		}
	}
}

func (c *Controller) deleteJob(log klog.Logger, obj any) {
	job, ok := tombstone.Unwrap[*batchv1.Job](obj)
	if !ok {
		return
	}
	c.enqueue(log, job, 0)
	c.consistency.Clear(keyOf(job), job.UID)
	c.finished.Delete(job.UID)
	c.enqueueSelector(log, job)
	c.backoff.remove(keyOf(job))
	// Forgotten here and not only by the sync that finds the Job gone (upstream's way):
	// when the Job leaves the cache because its namespace left the shard, that sync never
	// runs (the queue admits no key of the namespace), and if the namespace comes back
	// stale expectations would hold the Job for up to expectations.Timeout.
	c.expectations.Forget(keyOf(job))
	c.finalizers.forget(keyOf(job))
}

// controllerOf returns the cached Job that ref points at, or nil.
func (c *Controller) controllerOf(namespace string, ref *metav1.OwnerReference) *batchv1.Job {
	return claim.ControllerOf(kind.Kind, ref, c.jobLister.Jobs(namespace).Get)
}

// selecting returns the Jobs whose selector matches an orphan pod: one may adopt it.
func (c *Controller) selecting(pod *corev1.Pod) []*batchv1.Job {
	js, err := c.jobLister.GetPodJobs(pod)
	if err != nil {
		return nil
	}
	if len(js) > 1 {
		utilruntime.HandleError(fmt.Errorf("user error! more than one job is selecting pods with labels: %+v", pod.Labels))
	}
	out := make([]*batchv1.Job, len(js))
	for i := range js {
		out[i] = &js[i]
	}
	return out
}

func (c *Controller) addPod(log klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.jobMetrics.terminatedWithFinalizer(nil, pod)
	if pod.DeletionTimestamp != nil {
		// Seen for the first time while already being deleted (after a relist, or a
		// namespace arriving at this shard): not a creation.
		c.deletePod(log, pod, false)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		if job := c.controllerOf(pod.Namespace, ref); job != nil {
			c.expectations.CreationObserved(keyOf(job))
			c.enqueue(log, job, syncBatchPeriod)
		}
		return
	}
	if hasTrackingFinalizer(pod) {
		c.enqueueOrphan(pod)
	}
	for _, job := range c.selecting(pod) {
		c.enqueue(log, job, syncBatchPeriod)
	}
}

func (c *Controller) updatePod(log klog.Logger, old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	c.jobMetrics.terminatedWithFinalizer(oldPod, curPod)
	if curPod.DeletionTimestamp != nil {
		// A graceful deletion began: the Job may replace the pod now.
		c.deletePod(log, curPod, false)
		return
	}
	// The finalizer may be gone in old and cur alike (updates collapsed): judge by cur.
	finalizerGone := !hasTrackingFinalizer(curPod)
	oldRef, curRef := metav1.GetControllerOfNoCopy(oldPod), metav1.GetControllerOfNoCopy(curPod)
	refChanged := !reflect.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if job := c.controllerOf(oldPod.Namespace, oldRef); job != nil {
			if finalizerGone {
				c.finalizers.removalObserved(keyOf(job), curPod.UID)
			}
			c.enqueue(log, job, syncBatchPeriod)
		}
	}
	if curRef != nil {
		if job := c.controllerOf(curPod.Namespace, curRef); job != nil {
			if finalizerGone {
				c.finalizers.removalObserved(keyOf(job), curPod.UID)
			}
			c.enqueue(log, job, syncBatchPeriod)
		}
		return
	}
	if hasTrackingFinalizer(curPod) {
		c.enqueueOrphan(curPod)
	}
	if refChanged || !reflect.DeepEqual(oldPod.Labels, curPod.Labels) {
		for _, job := range c.selecting(curPod) {
			c.enqueue(log, job, syncBatchPeriod)
		}
	}
}

// deletePod handles a pod's deletion: final when it left the cache, otherwise the start
// of a graceful deletion.
func (c *Controller) deletePod(log klog.Logger, obj any, final bool) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	if final {
		c.jobMetrics.terminatedWithFinalizer(pod, nil)
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	withFinalizer := hasTrackingFinalizer(pod)
	if ref == nil {
		if withFinalizer {
			c.enqueueOrphan(pod)
		}
		return
	}
	job := c.controllerOf(pod.Namespace, ref)
	if job == nil || isFinished(job) {
		// No sync of a Job will remove this pod's finalizer.
		if withFinalizer {
			c.enqueueOrphan(pod)
		}
		return
	}
	key := keyOf(job)
	c.expectations.DeletionObserved(key)
	if final || !withFinalizer {
		c.finalizers.removalObserved(key, pod.UID)
	}
	c.enqueue(log, job, syncBatchPeriod)
}

// wrotePod records a write of pod for the Job that controls it, whose next sync then
// waits until the pod cache has seen it: every pod create and patch of the controller
// goes through here, as through upstream's pod control. Writes for a Job no longer in the
// cache (the finalizer cleanup of a deleted Job's pods) are not recorded: no sync would
// clear them.
func (c *Controller) wrotePod(pod *corev1.Pod) {
	if job := c.controllerOf(pod.Namespace, metav1.GetControllerOfNoCopy(pod)); job != nil {
		c.consistency.Wrote(keyOf(job), job.UID, podsResource, pod.ResourceVersion)
	}
}

// patchPod applies a strategic merge patch to a pod and records the write (wrotePod).
func (c *Controller) patchPod(ctx context.Context, namespace, name string, patch []byte) error {
	pod, err := c.client.CoreV1().Pods(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		c.wrotePod(pod)
	}
	return err
}

func hasTrackingFinalizer(pod *corev1.Pod) bool {
	return slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer)
}

// isFinished reports whether the Job has a true Complete or Failed condition.
func isFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

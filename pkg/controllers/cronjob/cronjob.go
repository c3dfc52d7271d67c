package cronjob

import (
	"context"
	"fmt"
	"reflect"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller.
const Name = "cronjob"

// ownerIndex indexes Jobs by the UID of their controller (a CronJob).
const ownerIndex = "kshard.io/cronjob-controller-uid"

// kind is written into the controllerRef of the Jobs the controller creates.
var kind = batchv1.SchemeGroupVersion.WithKind("CronJob")

// The informers the controller reads: its primary CronJobs and their Jobs.
var (
	cronJobs = controllers.Typed(batchv1.SchemeGroupVersion.WithResource("cronjobs"))
	jobs     = controllers.Typed(batchv1.SchemeGroupVersion.WithResource("jobs"))
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-cron-job-syncs flag and default of 5 workers.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-cron-job-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{cronJobs},
		Reads:   []controllers.Resource{jobs},
		Permissions: []controllers.Permission{
			{Group: "batch", Resource: "cronjobs", Verbs: []string{"get"}},
			{Group: "batch", Resource: "cronjobs/status", Verbs: []string{"update"}},
			// Jobs are created with blockOwnerDeletion, which the
			// OwnerReferencesPermissionEnforcement admission plugin allows only to
			// whoever may update the owner's finalizers.
			{Group: "batch", Resource: "cronjobs/finalizers", Verbs: []string{"update"}},
			{Group: "batch", Resource: "jobs", Verbs: []string{"get", "create", "delete"}},
		},
		New: New,
	}
}

// Controller is the CronJob controller.
type Controller struct {
	client     kubernetes.Interface
	cjLister   batchlisters.CronJobLister
	jobIndexer toolscache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	metrics    *controllers.ReconcileMetrics
	clock      clock.PassiveClock
}

// New builds the controller on the shard's informers; it registers its event handlers
// and its Job index before the shard starts them.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, clock.RealClock{})
}

func newController(c controllers.Context, clk clock.PassiveClock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, cronJobs, jobs)
	if err != nil {
		return nil, err
	}
	cjInf, jobInf := infs[0], infs[1]
	ctrl := &Controller{
		client:     c.Client,
		cjLister:   batchlisters.NewCronJobLister(cjInf.GetIndexer()),
		jobIndexer: jobInf.GetIndexer(),
		queue:      c.Queue,
		recorder:   c.Recorder,
		metrics:    c.Metrics,
		clock:      clk,
	}
	if _, ok := jobInf.GetIndexer().GetIndexers()[ownerIndex]; !ok {
		if err := jobInf.AddIndexers(toolscache.Indexers{ownerIndex: indexByOwnerUID}); err != nil {
			return nil, fmt.Errorf("job index: %w", err)
		}
	}
	log := c.Logger
	if _, err := cjInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.addCronJob,
		UpdateFunc: func(old, cur any) { ctrl.updateCronJob(log, old, cur) },
		DeleteFunc: ctrl.deleteCronJob,
	}); err != nil {
		return nil, err
	}
	if _, err := jobInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.addJob,
		UpdateFunc: ctrl.updateJob,
		DeleteFunc: ctrl.deleteJob,
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

func indexByOwnerUID(obj any) ([]string, error) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(job); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

func keyOf(cj *batchv1.CronJob) string { return cj.Namespace + "/" + cj.Name }

func (c *Controller) addCronJob(obj any) {
	if cj, ok := obj.(*batchv1.CronJob); ok {
		c.queue.Add(keyOf(cj))
	}
}

func (c *Controller) deleteCronJob(obj any) {
	if cj, ok := tombstone.Unwrap[*batchv1.CronJob](obj); ok {
		c.queue.Add(keyOf(cj))
	}
}

// updateCronJob syncs a CronJob at once, except when its schedule or time zone changed:
// then at its next schedule time under the new schedule (a sync before it would find
// nothing to run), as upstream does.
func (c *Controller) updateCronJob(log klog.Logger, old, cur any) {
	oldCJ, ok1 := old.(*batchv1.CronJob)
	curCJ, ok2 := cur.(*batchv1.CronJob)
	if !ok1 || !ok2 {
		return
	}
	if oldCJ.Spec.Schedule == curCJ.Spec.Schedule && ptr.Equal(oldCJ.Spec.TimeZone, curCJ.Spec.TimeZone) {
		c.queue.Add(keyOf(curCJ))
		return
	}
	sched, err := parseSchedule(scheduleSpec(curCJ, nil))
	if err != nil {
		log.V(2).Info("unparseable schedule", "namespace", curCJ.Namespace, "name", curCJ.Name,
			"schedule", curCJ.Spec.Schedule, "err", err.Error())
		c.recorder.Eventf(curCJ, corev1.EventTypeWarning, ReasonUnParseableCronJobSchedule,
			"unparseable schedule for cronjob: %s", curCJ.Spec.Schedule)
		return
	}
	c.queue.AddAfter(keyOf(curCJ), requeueAfter(curCJ, c.clock.Now(), sched))
}

// controllerOf returns the cached CronJob that ref points at, or nil when ref is not a
// CronJob's or names one this shard does not have (by name and UID).
func (c *Controller) controllerOf(namespace string, ref *metav1.OwnerReference) *batchv1.CronJob {
	return claim.ControllerOf(kind.Kind, ref, c.cjLister.CronJobs(namespace).Get)
}

func (c *Controller) enqueueOwner(job *batchv1.Job) {
	if cj := c.controllerOf(job.Namespace, metav1.GetControllerOfNoCopy(job)); cj != nil {
		c.queue.Add(keyOf(cj))
	}
}

func (c *Controller) addJob(obj any) {
	if job, ok := obj.(*batchv1.Job); ok {
		c.enqueueOwner(job)
	}
}

func (c *Controller) updateJob(old, cur any) {
	oldJob, ok1 := old.(*batchv1.Job)
	curJob, ok2 := cur.(*batchv1.Job)
	if !ok1 || !ok2 || oldJob.ResourceVersion == curJob.ResourceVersion {
		return // a periodic resync: nothing changed
	}
	oldRef, curRef := metav1.GetControllerOfNoCopy(oldJob), metav1.GetControllerOfNoCopy(curJob)
	if oldRef != nil && !reflect.DeepEqual(oldRef, curRef) {
		c.enqueueOwner(oldJob) // it lost a Job
	}
	c.enqueueOwner(curJob)
}

func (c *Controller) deleteJob(obj any) {
	if job, ok := tombstone.Unwrap[*batchv1.Job](obj); ok {
		c.enqueueOwner(job)
	}
}

// jobsOf returns the cached Jobs whose controller is cj.
func (c *Controller) jobsOf(cj *batchv1.CronJob) ([]*batchv1.Job, error) {
	objs, err := c.jobIndexer.ByIndex(ownerIndex, string(cj.UID))
	if err != nil {
		return nil, err
	}
	out := make([]*batchv1.Job, 0, len(objs))
	for _, o := range objs {
		if job, ok := o.(*batchv1.Job); ok {
			out = append(out, job)
		}
	}
	return out, nil
}

// nextScheduleDelta is added to every requeue for the next schedule time, so that the
// sync runs after it even with a little clock skew between the queue's timer and now.
const nextScheduleDelta = 100 * time.Millisecond

package ttlafterfinished

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
)

// Name is kube-controller-manager's name for the controller.
const Name = "ttl-after-finished"

// jobs is the controller's primary informer.
var jobs = controllers.Typed(batchv1.SchemeGroupVersion.WithResource("jobs"))

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-ttl-after-finished-syncs flag and default of 5 workers.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-ttl-after-finished-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{jobs},
		Permissions: []controllers.Permission{
			{Group: "batch", Resource: "jobs", Verbs: []string{"get", "delete"}},
		},
		New: New,
	}
}

// Controller is the TTL-after-finished controller.
type Controller struct {
	client  kubernetes.Interface
	lister  batchlisters.JobLister
	queue   workqueue.TypedRateLimitingInterface[string]
	metrics *controllers.ReconcileMetrics
	clock   clock.PassiveClock
}

// New builds the controller on the shard's Job informer.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, clock.RealClock{})
}

func newController(c controllers.Context, clk clock.PassiveClock) (*Controller, error) {
	inf, err := c.Informers.InformerFor(jobs)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{
		client:  c.Client,
		lister:  batchlisters.NewJobLister(inf.GetIndexer()),
		queue:   c.Queue,
		metrics: c.Metrics,
		clock:   clk,
	}
	log := c.Logger
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.observe(log, obj) },
		UpdateFunc: func(_, cur any) { ctrl.observe(log, cur) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// observe queues a Job that may be due for deletion.
func (c *Controller) observe(log klog.Logger, obj any) {
	job, ok := obj.(*batchv1.Job)
	if !ok || job.DeletionTimestamp != nil || !needsCleanup(job) {
		return
	}
	log.V(4).Info("job to clean up after its TTL", "namespace", job.Namespace, "name", job.Name)
	c.queue.Add(job.Namespace + "/" + job.Name)
}

// needsCleanup reports whether job has finished and has a TTL.
func needsCleanup(job *batchv1.Job) bool {
	_, done := finishTime(job)
	return job.Spec.TTLSecondsAfterFinished != nil && done
}

// finishTime returns the lastTransitionTime of job's true Complete or Failed condition,
// and whether it has one.
func finishTime(job *batchv1.Job) (time.Time, bool) {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

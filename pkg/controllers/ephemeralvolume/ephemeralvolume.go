package ephemeralvolume

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/podclaims"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's alias for the controller (its canonical name is
// ephemeral-volume-controller).
const Name = "ephemeral-volume"

// EventSource is the component of the controller's events, upstream's.
const EventSource = "ephemeral_volume"

var (
	pods   = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	claims = controllers.Typed(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-ephemeralvolume-syncs flag and default of 5 workers. It creates claims;
// pods/finalizers update is what an owner reference with blockOwnerDeletion needs where
// the API server enforces owner reference permissions (upstream's role has it too).
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-ephemeralvolume-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{pods},
		Reads:   []controllers.Resource{claims},
		Permissions: []controllers.Permission{
			{Resource: "persistentvolumeclaims", Verbs: []string{"create"}},
			{Resource: "pods/finalizers", Verbs: []string{"update"}},
		},
		EventSource: EventSource,
		New:         New,
	}
}

// Controller is the ephemeral volume controller.
type Controller struct {
	client     kubernetes.Interface
	pods       corelisters.PodLister
	podIndexer toolscache.Indexer
	claims     corelisters.PersistentVolumeClaimLister
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	metrics    *controllers.ReconcileMetrics
	creates    *createMetrics
}

// New builds the controller on the shard's pod and claim informers.
func New(c controllers.Context) (controllers.Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, pods, claims)
	if err != nil {
		return nil, err
	}
	podInf, claimInf := infs[0], infs[1]
	if err := podclaims.AddIndex(podInf); err != nil {
		return nil, err
	}
	creates, err := newCreateMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	ctrl := &Controller{
		client:     c.Client,
		pods:       corelisters.NewPodLister(podInf.GetIndexer()),
		podIndexer: podInf.GetIndexer(),
		claims:     corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		queue:      c.Queue,
		recorder:   c.Recorder,
		metrics:    c.Metrics,
		creates:    creates,
	}
	log := c.Logger
	// A pod's volumes never change, so its updates need nothing; its claims go with it
	// through the garbage collector, so its deletion needs nothing either.
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { ctrl.podAdded(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := claimInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) { ctrl.claimDeleted(log, obj) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// podAdded queues a pod that is not being deleted and has a generic ephemeral volume.
func (c *Controller) podAdded(log klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.DeletionTimestamp != nil || !hasEphemeral(pod) {
		return
	}
	log.V(5).Info("pod with ephemeral volumes", "namespace", pod.Namespace, "name", pod.Name)
	c.queue.Add(pod.Namespace + "/" + pod.Name)
}

// claimDeleted queues the pods that name a deleted claim, which may have to be created
// again for one of them.
func (c *Controller) claimDeleted(log klog.Logger, obj any) {
	pvc, ok := tombstone.Unwrap[*corev1.PersistentVolumeClaim](obj)
	if !ok {
		return
	}
	podsOf, err := podclaims.Pods(c.podIndexer, pvc.Namespace, pvc.Name)
	if err != nil {
		log.Error(err, "listing the cached pods of a deleted claim", "namespace", pvc.Namespace, "name", pvc.Name)
		return
	}
	for _, pod := range podsOf {
		c.podAdded(log, pod)
	}
}

func hasEphemeral(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Ephemeral != nil {
			return true
		}
	}
	return false
}

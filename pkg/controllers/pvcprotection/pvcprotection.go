package pvcprotection

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/podclaims"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's alias for the controller (its canonical name is
// persistentvolumeclaim-protection-controller).
const Name = "pvc-protection"

// Finalizer is the finalizer that keeps a claim in use from going away
// (kube-controller-manager's PVCProtectionFinalizer).
const Finalizer = "kubernetes.io/pvc-protection"

var (
	claims = controllers.Typed(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
	pods   = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
)

// Descriptor registers the controller: on by default and, as kube-controller-manager runs
// it, with one worker and no flag. It updates claims (their finalizers) and their status
// (the Unused condition); the live check lists pods, which list on pods covers.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, FixedWorkers: 1,
		Primary: []controllers.Resource{claims},
		Reads:   []controllers.Resource{pods},
		Permissions: []controllers.Permission{
			{Resource: "persistentvolumeclaims", Verbs: []string{"update"}},
			{Resource: "persistentvolumeclaims/status", Verbs: []string{"update"}},
		},
		New: New,
	}
}

// Controller is the PVC protection controller.
type Controller struct {
	client     kubernetes.Interface
	claims     corelisters.PersistentVolumeClaimLister
	podIndexer toolscache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string]
	metrics    *controllers.ReconcileMetrics
	clock      clock.PassiveClock
}

// New builds the controller on the shard's claim and pod informers.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, clock.RealClock{})
}

func newController(c controllers.Context, clk clock.PassiveClock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, claims, pods)
	if err != nil {
		return nil, err
	}
	claimInf, podInf := infs[0], infs[1]
	if err := podclaims.AddIndex(podInf); err != nil {
		return nil, err
	}
	ctrl := &Controller{
		client:     c.Client,
		claims:     corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		podIndexer: podInf.GetIndexer(),
		queue:      c.Queue,
		metrics:    c.Metrics,
		clock:      clk,
	}
	log := c.Logger
	if _, err := claimInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.claimChanged(log, obj) },
		UpdateFunc: func(_, cur any) { ctrl.claimChanged(log, cur) },
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.podChanged(log, nil, obj) },
		UpdateFunc: func(old, cur any) { ctrl.podChanged(log, old, cur) },
		DeleteFunc: func(obj any) {
			if pod, ok := tombstone.Unwrap[*corev1.Pod](obj); ok {
				ctrl.podChanged(log, nil, pod)
			}
		},
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

// claimChanged queues a claim that may need work: one without the Unused condition, one
// without the finalizer, one being deleted with it.
func (c *Controller) claimChanged(log klog.Logger, obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	if unusedCondition(pvc) == nil || needsFinalizer(pvc) || deletionCandidate(pvc) {
		log.V(4).Info("claim to check", "namespace", pvc.Namespace, "name", pvc.Name)
		c.queue.Add(pvc.Namespace + "/" + pvc.Name)
	}
}

// podChanged queues the claims cur names, and those of old when old was another pod of
// the same name (an update may hide a delete and a create): the deleted pod may have been
// what kept a claim the new one does not name.
func (c *Controller) podChanged(log klog.Logger, old, cur any) {
	pod, ok := cur.(*corev1.Pod)
	if !ok {
		return
	}
	c.queueClaimsOf(log, pod)
	if oldPod, ok := old.(*corev1.Pod); ok && oldPod.UID != pod.UID {
		c.queueClaimsOf(log, oldPod)
	}
}

func (c *Controller) queueClaimsOf(log klog.Logger, pod *corev1.Pod) {
	names := podclaims.ClaimNames(pod)
	if len(names) > 0 {
		log.V(4).Info("queueing the claims of a pod", "namespace", pod.Namespace, "pod", pod.Name, "podUID", pod.UID)
	}
	for _, name := range names {
		c.queue.Add(pod.Namespace + "/" + name)
	}
}

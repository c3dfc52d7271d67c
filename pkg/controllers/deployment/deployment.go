package deployment

import (
	"context"
	"fmt"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller.
const Name = "deployment"

var controllerKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

// The informers the controller reads: its primary Deployments, the ReplicaSets they own
// and those ReplicaSets' pods.
var (
	deployments = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("deployments"))
	replicaSets = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("replicasets"))
	pods        = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
)

// Descriptor registers the controller with the shard: kube-controller-manager's
// --concurrent-deployment-syncs flag and default of 5 workers.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-deployment-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{deployments},
		Reads:   []controllers.Resource{replicaSets, pods},
		Permissions: []controllers.Permission{
			{Group: "apps", Resource: "deployments", Verbs: []string{"get", "update"}},
			{Group: "apps", Resource: "deployments/status", Verbs: []string{"update"}},
			{Group: "apps", Resource: "replicasets", Verbs: []string{"create", "update", "patch", "delete"}},
		},
		New: New,
	}
}

// Controller is the Deployment controller.
type Controller struct {
	client   kubernetes.Interface
	dLister  appslisters.DeploymentLister
	rsLister appslisters.ReplicaSetLister
	// podIndexer has podutil's controllerRef index (shared with the ReplicaSet controller).
	podIndexer cache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	metrics    *controllers.ReconcileMetrics
	// clock stamps conditions and measures progress deadlines (a fake one in tests).
	clock clock.PassiveClock
}

// New builds the controller from the shard's context.
func New(c controllers.Context) (controllers.Controller, error) {
	ctrl, err := newController(c, clock.RealClock{})
	if err != nil {
		return nil, err
	}
	return ctrl, nil
}

func newController(c controllers.Context, clk clock.PassiveClock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, deployments, replicaSets, pods)
	if err != nil {
		return nil, err
	}
	dInf, rsInf, podInf := infs[0], infs[1], infs[2]
	ctrl := &Controller{
		client:     c.Client,
		dLister:    appslisters.NewDeploymentLister(dInf.GetIndexer()),
		rsLister:   appslisters.NewReplicaSetLister(rsInf.GetIndexer()),
		podIndexer: podInf.GetIndexer(),
		queue:      c.Queue,
		recorder:   c.Recorder,
		metrics:    c.Metrics,
		clock:      clk,
	}
	if err := podutil.AddControllerIndex(podInf); err != nil {
		return nil, err
	}
	log := c.Logger
	if _, err := dInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.enqueue,
		UpdateFunc: func(_, cur any) { ctrl.enqueue(cur) },
		DeleteFunc: ctrl.enqueue,
	}); err != nil {
		return nil, err
	}
	if _, err := rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addReplicaSet(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updateReplicaSet(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.deleteReplicaSet(log, obj) },
	}); err != nil {
		return nil, err
	}
	// Only deletions matter: a Recreate rollout waits for the old pods to be gone.
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: ctrl.deletePod,
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs the workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.syncKey, c.metrics)
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueueDeployment(d *appsv1.Deployment) { c.queue.Add(d.Namespace + "/" + d.Name) }

// owner returns the Deployment a controllerRef points to, if it is in the cache with that
// UID.
func (c *Controller) owner(namespace string, ref *metav1.OwnerReference) *appsv1.Deployment {
	if ref == nil || ref.Kind != controllerKind.Kind {
		return nil
	}
	d, err := c.dLister.Deployments(namespace).Get(ref.Name)
	if err != nil || d.UID != ref.UID {
		return nil
	}
	return d
}

// selecting returns the Deployments whose selector matches rs's labels (candidates to
// adopt an orphan).
func (c *Controller) selecting(log klog.Logger, rs *appsv1.ReplicaSet) []*appsv1.Deployment {
	if len(rs.Labels) == 0 {
		return nil
	}
	ds, err := c.dLister.Deployments(rs.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*appsv1.Deployment
	for _, d := range ds {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(rs.Labels)) {
			continue
		}
		out = append(out, d)
	}
	if len(out) > 1 {
		log.V(4).Info("more than one deployment selects the replica set", "replicaSet", klog.KObj(rs))
	}
	return out
}

func (c *Controller) addReplicaSet(log klog.Logger, obj any) {
	rs := obj.(*appsv1.ReplicaSet)
	if rs.DeletionTimestamp != nil {
		c.deleteReplicaSet(log, rs)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		if d := c.owner(rs.Namespace, ref); d != nil {
			c.enqueueDeployment(d)
		}
		return
	}
	for _, d := range c.selecting(log, rs) {
		c.enqueueDeployment(d)
	}
}

func (c *Controller) updateReplicaSet(log klog.Logger, oldObj, curObj any) {
	cur, old := curObj.(*appsv1.ReplicaSet), oldObj.(*appsv1.ReplicaSet)
	if cur.ResourceVersion == old.ResourceVersion {
		return // a resync
	}
	curRef, oldRef := metav1.GetControllerOfNoCopy(cur), metav1.GetControllerOfNoCopy(old)
	refChanged := !reflect.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if d := c.owner(old.Namespace, oldRef); d != nil {
			c.enqueueDeployment(d) // the old owner lost it
		}
	}
	if curRef != nil {
		if d := c.owner(cur.Namespace, curRef); d != nil {
			c.enqueueDeployment(d)
		}
		return
	}
	if refChanged || !reflect.DeepEqual(cur.Labels, old.Labels) {
		for _, d := range c.selecting(log, cur) {
			c.enqueueDeployment(d)
		}
	}
}

func (c *Controller) deleteReplicaSet(_ klog.Logger, obj any) {
	rs, ok := tombstone.Unwrap[*appsv1.ReplicaSet](obj)
	if !ok {
		return
	}
	if d := c.owner(rs.Namespace, metav1.GetControllerOfNoCopy(rs)); d != nil {
		c.enqueueDeployment(d)
	}
}

func (c *Controller) deletePod(obj any) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return
	}
	rs, err := c.rsLister.ReplicaSets(pod.Namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return
	}
	if d := c.owner(rs.Namespace, metav1.GetControllerOfNoCopy(rs)); d != nil && d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		c.enqueueDeployment(d)
	}
}

// syncKey is the worker's entry point. A namespace being deleted refuses creates; that is
// not retried, as upstream does not.
func (c *Controller) syncKey(ctx context.Context, key string) error {
	ctx, _, ns, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	err = c.syncDeployment(ctx, ns, name)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return nil
	}
	return err
}

// syncDeployment reconciles one Deployment: claim its ReplicaSets, then only the status if
// it is being deleted, the paused condition, a scale-only sync when paused or resized, a
// deprecated rollback request, or one step of its strategy.
func (c *Controller) syncDeployment(ctx context.Context, ns, name string) error {
	cached, err := c.dLister.Deployments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		klog.FromContext(ctx).V(2).Info("deployment has been deleted")
		return nil
	}
	if err != nil {
		return err
	}
	d := cached.DeepCopy()
	if d.Spec.Replicas == nil {
		// The API server defaults it; a missing one is an object no retry will fix.
		utilruntime.HandleErrorWithContext(ctx, nil, "deployment has no spec.replicas; not syncing it", "namespace", ns, "name", name)
		return nil
	}

	if d.Spec.Selector == nil || reflect.DeepEqual(*d.Spec.Selector, metav1.LabelSelector{}) {
		c.recorder.Eventf(d, corev1.EventTypeWarning, "SelectingAll", "This deployment is selecting all pods. A non-empty selector is required.")
		if d.Status.ObservedGeneration < d.Generation {
			d.Status.ObservedGeneration = d.Generation
			if err := c.updateStatus(ctx, d); err != nil {
				klog.FromContext(ctx).V(2).Info("updating observedGeneration failed", "err", err)
			}
		}
		return nil
	}

	rss, err := c.claimReplicaSets(ctx, d)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return c.syncStatusOnly(ctx, d, rss)
	}
	if err := c.checkPausedConditions(ctx, d); err != nil {
		return err
	}
	if d.Spec.Paused {
		return c.sync(ctx, d, rss)
	}
	if rollbackTo(d) != nil {
		return c.rollback(ctx, d, rss)
	}
	resized, err := c.isScalingEvent(ctx, d, rss)
	if err != nil {
		return err
	}
	if resized {
		return c.sync(ctx, d, rss)
	}
	switch d.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		pods, err := c.podsByReplicaSet(rss)
		if err != nil {
			return err
		}
		return c.rolloutRecreate(ctx, d, rss, pods)
	case appsv1.RollingUpdateDeploymentStrategyType:
		return c.rolloutRolling(ctx, d, rss)
	}
	return fmt.Errorf("unexpected deployment strategy type %q", d.Spec.Strategy.Type)
}

// claimReplicaSets returns the ReplicaSets the Deployment owns after adopting orphans its
// selector matches and releasing owned ones it no longer matches.
func (c *Controller) claimReplicaSets(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.ReplicaSet, error) {
	all, err := c.rsLister.ReplicaSets(d.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("deployment %s/%s has an invalid label selector: %w", d.Namespace, d.Name, err)
	}
	m := &claim.Manager[*appsv1.ReplicaSet]{
		Controller: d, Kind: controllerKind, Selector: sel,
		Fresh: func(ctx context.Context) (metav1.Object, error) {
			return c.client.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		},
		Patch: func(ctx context.Context, name string, patch []byte) error {
			_, err := c.client.AppsV1().ReplicaSets(d.Namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			return err
		},
	}
	return m.Claim(ctx, all)
}

// podsByReplicaSet maps each ReplicaSet's UID to the pods it controls, through the
// controllerRef index rather than a scan of the namespace.
func (c *Controller) podsByReplicaSet(rss []*appsv1.ReplicaSet) (map[types.UID][]*corev1.Pod, error) {
	out := make(map[types.UID][]*corev1.Pod, len(rss))
	for _, rs := range rss {
		pods, err := podutil.ByController(c.podIndexer,
			podutil.Owner{Namespace: rs.Namespace, Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID}, false)
		if err != nil {
			return nil, err
		}
		out[rs.UID] = pods
	}
	return out, nil
}

package replicaset

import (
	"context"
	"fmt"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/consistency"
	"github.com/kshard/kshard/pkg/controllers/internal/expectations"
	"github.com/kshard/kshard/pkg/controllers/internal/podcontrol"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller.
const Name = "replicaset"

// BurstReplicas caps the pods one sync creates or deletes (kube-controller-manager's
// burstReplicas), so a ReplicaSet scaled to thousands does not hold a worker for minutes
// nor flood the API server.
const BurstReplicas = 500

// ownerIndex indexes ReplicaSets by the UID of their controller (a Deployment): the pods
// of a Deployment's other ReplicaSets rank pods for deletion.
const ownerIndex = "kshard.io/replicaset-controller-uid"

// The informers the controller reads: its primary ReplicaSets and their pods.
var (
	replicaSets = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("replicasets"))
	pods        = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	// The resource of the controller's own pod writes that the next sync of a ReplicaSet
	// waits for its caches to reach (consistency), besides the kind's own.
	podsResource = pods.GroupResource()
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-replicaset-syncs flag and default of 5 workers.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-replicaset-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{replicaSets},
		Reads:   []controllers.Resource{pods},
		Permissions: []controllers.Permission{
			{Group: "apps", Resource: "replicasets", Verbs: []string{"get"}},
			{Group: "apps", Resource: "replicasets/status", Verbs: []string{"update"}},
			// Pods are created with blockOwnerDeletion, which the
			// OwnerReferencesPermissionEnforcement admission plugin allows only to
			// whoever may update the owner's finalizers.
			{Group: "apps", Resource: "replicasets/finalizers", Verbs: []string{"update"}},
			{Resource: "pods", Verbs: []string{"create", "delete", "patch"}},
		},
		New: New,
	}
}

// Controller is the ReplicaSet controller, serving the objects of its Kind.
type Controller struct {
	kind       Kind
	client     kubernetes.Interface
	rsLister   appslisters.ReplicaSetLister
	rsIndexer  toolscache.Indexer
	podLister  corelisters.PodLister
	podIndexer toolscache.Indexer
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	pods       podcontrol.Control
	metrics    *controllers.ReconcileMetrics

	expectations  *expectations.Expectations
	consistency   *consistency.Store
	clock         clock.PassiveClock
	burstReplicas int
}

// New builds the controller on the shard's informers; it registers its event handlers
// and indexes before the shard starts them.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, ReplicaSets(), clock.RealClock{})
}

// NewForKind builds the controller serving k's objects (the replicationcontroller
// controller's New), as New does for ReplicaSets.
func NewForKind(c controllers.Context, k Kind) (controllers.Controller, error) {
	return newController(c, k, clock.RealClock{})
}

func newController(c controllers.Context, k Kind, clk clock.PassiveClock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, k.Resource, pods)
	if err != nil {
		return nil, err
	}
	rsInf, podInf := infs[0], infs[1]
	ctrl := &Controller{
		kind:         k,
		client:       c.Client,
		rsLister:     k.Lister(rsInf.GetIndexer()),
		rsIndexer:    rsInf.GetIndexer(),
		podLister:    corelisters.NewPodLister(podInf.GetIndexer()),
		podIndexer:   podInf.GetIndexer(),
		queue:        c.Queue,
		recorder:     c.Recorder,
		pods:         podcontrol.Control{Client: c.Client, Recorder: c.Recorder},
		metrics:      c.Metrics,
		expectations: expectations.New(clk),
		consistency: consistency.New(map[schema.GroupResource]consistency.RVSource{
			podsResource:               podInf.GetStore(),
			k.Resource.GroupResource(): rsInf.GetStore(),
		}),
		clock:         clk,
		burstReplicas: BurstReplicas,
	}
	if err := podutil.AddControllerIndex(podInf); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	if _, ok := rsInf.GetIndexer().GetIndexers()[ownerIndex]; !ok {
		if err := rsInf.AddIndexers(toolscache.Indexers{ownerIndex: indexByOwnerUID}); err != nil {
			return nil, fmt.Errorf("%s index: %w", k.Resource, err)
		}
	}
	log := c.Logger
	if _, err := rsInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.addRS,
		UpdateFunc: ctrl.updateRS,
		DeleteFunc: func(obj any) { ctrl.deleteRS(log, obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.addPod(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.updatePod(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.deletePod(log, obj) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

func indexByOwnerUID(obj any) ([]string, error) {
	o, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, c.kind.Name, c.queue, workers, c.sync, c.metrics)
}

func keyOf(rs *appsv1.ReplicaSet) string { return rs.Namespace + "/" + rs.Name }

func podKey(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

func (c *Controller) enqueue(rs *appsv1.ReplicaSet) { c.queue.Add(keyOf(rs)) }

func (c *Controller) addRS(obj any) {
	if rs, ok := c.kind.View(obj); ok {
		c.enqueue(rs)
	}
}

func (c *Controller) updateRS(old, cur any) {
	oldRS, ok1 := c.kind.View(old)
	curRS, ok2 := c.kind.View(cur)
	if !ok1 || !ok2 {
		return
	}
	// A ReplicaSet deleted and created again under its name between two observations:
	// the old one's expectations must not apply to the new one.
	if oldRS.UID != curRS.UID {
		c.expectations.Forget(keyOf(oldRS))
		c.consistency.Clear(keyOf(oldRS), oldRS.UID)
	}
	c.enqueue(curRS)
}

func (c *Controller) deleteRS(log klog.Logger, obj any) {
	rs, ok := c.kind.viewTombstone(obj)
	if !ok {
		return
	}
	log.V(4).Info("replicaset deleted from cache; dropping its expectations", "namespace", rs.Namespace, "name", rs.Name)
	c.expectations.Forget(keyOf(rs))
	c.consistency.Clear(keyOf(rs), rs.UID)
	c.enqueue(rs)
}

// controllerOf returns the cached ReplicaSet that ref points at, or nil when ref is not
// one of the controller's kind or names one this shard does not have (by name and UID).
func (c *Controller) controllerOf(namespace string, ref *metav1.OwnerReference) *appsv1.ReplicaSet {
	return claim.ControllerOf(c.kind.GVK.Kind, ref, c.rsLister.ReplicaSets(namespace).Get)
}

// enqueueSelecting queues every ReplicaSet whose selector matches the orphan pod: one of
// them may adopt it.
func (c *Controller) enqueueSelecting(pod *corev1.Pod) {
	rss, err := c.rsLister.GetPodReplicaSets(pod)
	if err != nil {
		return // none selects it
	}
	if len(rss) > 1 {
		utilruntime.HandleError(fmt.Errorf("user error: more than one %s selects pod %s/%s with labels %v",
			c.kind.GVK.Kind, pod.Namespace, pod.Name, pod.Labels))
	}
	for _, rs := range rss {
		c.enqueue(rs)
	}
}

func (c *Controller) addPod(log klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		// Seen for the first time while already being deleted (e.g. after a relist):
		// it must not count as a creation.
		c.deletePod(log, pod)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		if rs := c.controllerOf(pod.Namespace, ref); rs != nil {
			c.expectations.CreationObserved(keyOf(rs))
			c.enqueue(rs)
		}
		return
	}
	c.enqueueSelecting(pod)
}

func (c *Controller) updatePod(log klog.Logger, old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || oldPod.ResourceVersion == curPod.ResourceVersion {
		return // a periodic resync: nothing changed
	}
	labelsChanged := !reflect.DeepEqual(oldPod.Labels, curPod.Labels)
	if curPod.DeletionTimestamp != nil {
		// A graceful deletion has begun: for the controller the pod is gone now, not
		// when the kubelet is done with it.
		c.deletePod(log, curPod)
		if labelsChanged {
			c.deletePod(log, oldPod)
		}
		return
	}
	oldRef, curRef := metav1.GetControllerOfNoCopy(oldPod), metav1.GetControllerOfNoCopy(curPod)
	refChanged := !reflect.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if rs := c.controllerOf(oldPod.Namespace, oldRef); rs != nil {
			c.enqueue(rs) // it lost a pod
		}
	}
	if curRef != nil {
		rs := c.controllerOf(curPod.Namespace, curRef)
		if rs == nil {
			return
		}
		c.enqueue(rs)
		if !podutil.IsReady(oldPod) && podutil.IsReady(curPod) && rs.Spec.MinReadySeconds > 0 {
			// It turns available minReadySeconds from now; look again then.
			c.queue.AddAfter(keyOf(rs), time.Duration(rs.Spec.MinReadySeconds)*time.Second)
		}
		return
	}
	if labelsChanged || refChanged {
		c.enqueueSelecting(curPod)
	}
}

func (c *Controller) deletePod(log klog.Logger, obj any) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	rs := c.controllerOf(pod.Namespace, metav1.GetControllerOfNoCopy(pod))
	if rs == nil {
		return
	}
	// A pod deleted at once has no deletionTimestamp: log "graceful" rather than a nil
	// *metav1.Time, whose formatting panics.
	log.V(4).Info("pod deleted", "namespace", pod.Namespace, "name", pod.Name, "replicaset", rs.Name,
		"graceful", pod.DeletionTimestamp != nil)
	c.expectations.DeletionOfObserved(keyOf(rs), podKey(pod))
	c.enqueue(rs)
}

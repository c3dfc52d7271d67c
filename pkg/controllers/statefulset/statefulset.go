package statefulset

import (
	"context"
	"fmt"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	"github.com/kshard/kshard/pkg/controllers/internal/history"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// Name is kube-controller-manager's name for the controller.
const Name = "statefulset"

var (
	controllerKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	podKind        = corev1.SchemeGroupVersion.WithKind("Pod")
)

// The informers the controller reads: its primary StatefulSets, their pods, claims and
// revisions.
var (
	statefulSets = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("statefulsets"))
	pods         = controllers.Typed(corev1.SchemeGroupVersion.WithResource("pods"))
	claims       = controllers.Typed(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"))
	revisions    = controllers.Typed(appsv1.SchemeGroupVersion.WithResource("controllerrevisions"))

	// The resources of the controller's own writes that the next sync of a StatefulSet
	// waits for its caches to reach (upstream's StaleControllerConsistencyStatefulSet).
	statefulSetsResource = statefulSets.GroupResource()
	podsResource         = pods.GroupResource()
	claimsResource       = claims.GroupResource()
)

// Descriptor registers the controller: on by default, with kube-controller-manager's
// --concurrent-statefulset-syncs flag and default of 5 workers. The permissions are those
// of upstream's system:controller:statefulset-controller role that the controller uses.
func Descriptor() controllers.Descriptor {
	return controllers.Descriptor{
		Name: Name, OnByDefault: true, WorkersFlag: "concurrent-statefulset-syncs", DefaultWorkers: 5,
		Primary: []controllers.Resource{statefulSets},
		Reads:   []controllers.Resource{pods, claims, revisions},
		Permissions: []controllers.Permission{
			{Group: "apps", Resource: "statefulsets", Verbs: []string{"get"}},
			{Group: "apps", Resource: "statefulsets/status", Verbs: []string{"update"}},
			// Pods and revisions are created with blockOwnerDeletion, which the
			// OwnerReferencesPermissionEnforcement admission plugin allows only to whoever
			// may update the owner's finalizers; claims get such a reference to a pod.
			{Group: "apps", Resource: "statefulsets/finalizers", Verbs: []string{"update"}},
			{Resource: "pods", Verbs: []string{"create", "delete", "update", "patch"}},
			{Resource: "pods/finalizers", Verbs: []string{"update"}},
			{Group: "apps", Resource: "controllerrevisions", Verbs: []string{"get", "create", "delete", "update", "patch"}},
			{Resource: "persistentvolumeclaims", Verbs: []string{"create", "update"}},
		},
		New: New,
	}
}

// Controller is the StatefulSet controller.
type Controller struct {
	client     kubernetes.Interface
	setLister  appslisters.StatefulSetLister
	podLister  corelisters.PodLister
	podIndexer toolscache.Indexer
	pvcLister  corelisters.PersistentVolumeClaimLister
	history    *history.History
	queue      workqueue.TypedRateLimitingInterface[string]
	recorder   record.EventRecorder
	metrics    *controllers.ReconcileMetrics

	consistency *consistency.Store
	// clock decides availability (minReadySeconds); a fake one in tests.
	clock clock.PassiveClock
}

// New builds the controller on the shard's informers; it registers its event handlers
// and indexes before the shard starts them.
func New(c controllers.Context) (controllers.Controller, error) {
	return newController(c, clock.RealClock{})
}

func newController(c controllers.Context, clk clock.PassiveClock) (*Controller, error) {
	infs, err := controllers.InformersFor(c.Informers, statefulSets, pods, claims, revisions)
	if err != nil {
		return nil, err
	}
	setInf, podInf, pvcInf, revInf := infs[0], infs[1], infs[2], infs[3]
	ctrl := &Controller{
		client:     c.Client,
		setLister:  appslisters.NewStatefulSetLister(setInf.GetIndexer()),
		podLister:  corelisters.NewPodLister(podInf.GetIndexer()),
		podIndexer: podInf.GetIndexer(),
		pvcLister:  corelisters.NewPersistentVolumeClaimLister(pvcInf.GetIndexer()),
		history:    &history.History{Client: c.Client, Indexer: revInf.GetIndexer()},
		queue:      c.Queue,
		recorder:   c.Recorder,
		metrics:    c.Metrics,
		consistency: consistency.New(map[schema.GroupResource]consistency.RVSource{
			statefulSetsResource: setInf.GetStore(),
			podsResource:         podInf.GetStore(),
			claimsResource:       pvcInf.GetStore(),
		}),
		clock: clk,
	}
	if err := podutil.AddControllerIndex(podInf); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	if err := history.AddControllerIndex(revInf); err != nil {
		return nil, fmt.Errorf("controllerrevision index: %w", err)
	}
	log := c.Logger
	if _, err := setInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    ctrl.enqueueObj,
		UpdateFunc: ctrl.onSetUpdate,
		DeleteFunc: ctrl.onSetDelete,
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { ctrl.onPodAdd(log, obj) },
		UpdateFunc: func(old, cur any) { ctrl.onPodUpdate(log, old, cur) },
		DeleteFunc: func(obj any) { ctrl.onPodDelete(log, obj) },
	}); err != nil {
		return nil, err
	}
	return ctrl, nil
}

// Run runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	controllers.RunWorkers(ctx, Name, c.queue, workers, c.sync, c.metrics)
}

func keyOf(set *appsv1.StatefulSet) string { return set.Namespace + "/" + set.Name }

func (c *Controller) enqueue(set *appsv1.StatefulSet) { c.queue.Add(keyOf(set)) }

func (c *Controller) enqueueObj(obj any) {
	if set, ok := tombstone.Unwrap[*appsv1.StatefulSet](obj); ok {
		c.enqueue(set)
	}
}

func (c *Controller) onSetUpdate(old, cur any) {
	oldSet, ok1 := old.(*appsv1.StatefulSet)
	curSet, ok2 := cur.(*appsv1.StatefulSet)
	if !ok1 || !ok2 {
		return
	}
	if oldSet.UID != curSet.UID {
		// Deleted and created again between two observations: the old one's writes
		// must not hold the new one back.
		c.consistency.Clear(keyOf(oldSet), oldSet.UID)
	}
	c.enqueue(curSet)
}

func (c *Controller) onSetDelete(obj any) {
	set, ok := tombstone.Unwrap[*appsv1.StatefulSet](obj)
	if !ok {
		return
	}
	// Also when the namespace left the shard's cache: its next owner keeps the records.
	c.consistency.Clear(keyOf(set), set.UID)
	c.enqueue(set)
}

// controllerOf returns the cached StatefulSet ref points at, or nil.
func (c *Controller) controllerOf(namespace string, ref *metav1.OwnerReference) *appsv1.StatefulSet {
	return claim.ControllerOf(controllerKind.Kind, ref, c.setLister.StatefulSets(namespace).Get)
}

// enqueueSelecting queues every StatefulSet whose selector matches the orphan pod: one
// of them may adopt it.
func (c *Controller) enqueueSelecting(log klog.Logger, pod *corev1.Pod) {
	sets, err := c.setLister.GetPodStatefulSets(pod)
	if err != nil {
		return // none selects it
	}
	if len(sets) > 1 {
		names := make([]string, 0, len(sets))
		for _, s := range sets {
			names = append(names, s.Name)
		}
		utilruntime.HandleErrorWithLogger(log, nil, "More than one StatefulSet is selecting pods with same labels",
			"podLabels", pod.Labels, "sets", names)
	}
	for _, s := range sets {
		c.enqueue(s)
	}
}

func (c *Controller) onPodAdd(log klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		// Seen for the first time while already being deleted (e.g. after a relist).
		c.onPodDelete(log, pod)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		if set := c.controllerOf(pod.Namespace, ref); set != nil {
			c.enqueue(set)
		}
		return
	}
	c.enqueueSelecting(log, pod)
}

func (c *Controller) onPodUpdate(log klog.Logger, old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || oldPod.ResourceVersion == curPod.ResourceVersion {
		return // a periodic resync: nothing changed
	}
	labelsChanged := !reflect.DeepEqual(oldPod.Labels, curPod.Labels)
	oldRef, curRef := metav1.GetControllerOfNoCopy(oldPod), metav1.GetControllerOfNoCopy(curPod)
	refChanged := !reflect.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if set := c.controllerOf(oldPod.Namespace, oldRef); set != nil {
			c.enqueue(set) // it lost a pod
		}
	}
	if curRef != nil {
		set := c.controllerOf(curPod.Namespace, curRef)
		if set == nil {
			return
		}
		c.enqueue(set)
		if !podutil.IsReady(oldPod) && podutil.IsReady(curPod) && set.Spec.MinReadySeconds > 0 {
			// It turns available minReadySeconds from now; look again then.
			log.V(2).Info("StatefulSet will be enqueued after minReadySeconds for availability check",
				"namespace", set.Namespace, "name", set.Name, "minReadySeconds", set.Spec.MinReadySeconds)
			c.queue.AddAfter(keyOf(set), time.Duration(set.Spec.MinReadySeconds)*time.Second)
		}
		return
	}
	if labelsChanged || refChanged {
		c.enqueueSelecting(log, curPod)
	}
}

func (c *Controller) onPodDelete(log klog.Logger, obj any) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	set := c.controllerOf(pod.Namespace, metav1.GetControllerOfNoCopy(pod))
	if set == nil {
		return
	}
	log.V(4).Info("pod deleted", "namespace", pod.Namespace, "name", pod.Name, "statefulset", set.Name)
	c.enqueue(set)
}

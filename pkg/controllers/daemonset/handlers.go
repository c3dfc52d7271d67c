package daemonset

import (
	"fmt"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers"
	"github.com/kshard/kshard/pkg/controllers/internal/claim"
	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

func (c *Controller) addHandlers(cc controllers.Context, dsInf, revInf, podInf, nodeInf toolscache.SharedIndexInformer) error {
	log := cc.Logger
	if _, err := dsInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addDaemonSet(obj) },
		UpdateFunc: func(old, cur any) { c.updateDaemonSet(log, old, cur) },
		DeleteFunc: func(obj any) { c.deleteDaemonSet(log, obj) },
	}); err != nil {
		return err
	}
	if _, err := revInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addRevision(obj) },
		UpdateFunc: func(old, cur any) { c.updateRevision(old, cur) },
		DeleteFunc: func(obj any) { c.deleteRevision(obj) },
	}); err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addPod(log, obj) },
		UpdateFunc: func(old, cur any) { c.updatePod(log, old, cur) },
		DeleteFunc: func(obj any) { c.deletePodEvent(log, obj) },
	}); err != nil {
		return err
	}
	_, err := nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.addNode(log, obj) },
		UpdateFunc: func(old, cur any) { c.updateNode(log, old, cur) },
		DeleteFunc: func(obj any) { c.deleteNode(log, obj) },
	})
	return err
}

// --- DaemonSets ---

func (c *Controller) addDaemonSet(obj any) {
	if ds, ok := obj.(*appsv1.DaemonSet); ok {
		c.enqueue(ds)
	}
}

func (c *Controller) updateDaemonSet(log klog.Logger, old, cur any) {
	oldDS, ok1 := old.(*appsv1.DaemonSet)
	curDS, ok2 := cur.(*appsv1.DaemonSet)
	if !ok1 || !ok2 {
		return
	}
	// Deleted and created again under its name between two observations: the old one's
	// expectations must not apply to the new one.
	if oldDS.UID != curDS.UID {
		c.deleteDaemonSet(log, oldDS)
	}
	c.enqueue(curDS)
}

func (c *Controller) deleteDaemonSet(log klog.Logger, obj any) {
	ds, ok := tombstone.Unwrap[*appsv1.DaemonSet](obj)
	if !ok {
		return
	}
	log.V(4).Info("daemonset deleted from cache; dropping its expectations", "namespace", ds.Namespace, "name", ds.Name)
	c.expectations.Forget(keyOf(ds))
	c.consistency.Clear(keyOf(ds), ds.UID)
	c.enqueue(ds)
}

// controllerOf returns the cached DaemonSet that ref points at (by name and UID), or nil.
func (c *Controller) controllerOf(namespace string, ref *metav1.OwnerReference) *appsv1.DaemonSet {
	return claim.ControllerOf(controllerKind.Kind, ref, c.dsLister.DaemonSets(namespace).Get)
}

// --- ControllerRevisions ---

func (c *Controller) addRevision(obj any) {
	rev, ok := obj.(*appsv1.ControllerRevision)
	if !ok {
		return
	}
	if rev.DeletionTimestamp != nil {
		c.deleteRevision(rev)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(rev); ref != nil {
		// Its owner created it; nothing to do but note it (upstream does not queue).
		return
	}
	c.enqueueSelectingRevision(rev)
}

func (c *Controller) updateRevision(old, cur any) {
	oldRev, ok1 := old.(*appsv1.ControllerRevision)
	curRev, ok2 := cur.(*appsv1.ControllerRevision)
	if !ok1 || !ok2 || oldRev.ResourceVersion == curRev.ResourceVersion {
		return
	}
	oldRef, curRef := metav1.GetControllerOfNoCopy(oldRev), metav1.GetControllerOfNoCopy(curRev)
	refChanged := !reflect.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if ds := c.controllerOf(oldRev.Namespace, oldRef); ds != nil {
			c.enqueue(ds)
		}
	}
	if curRef != nil {
		if ds := c.controllerOf(curRev.Namespace, curRef); ds != nil {
			c.enqueue(ds)
		}
		return
	}
	if refChanged || !reflect.DeepEqual(oldRev.Labels, curRev.Labels) {
		c.enqueueSelectingRevision(curRev)
	}
}

func (c *Controller) deleteRevision(obj any) {
	rev, ok := tombstone.Unwrap[*appsv1.ControllerRevision](obj)
	if !ok {
		return
	}
	if ds := c.controllerOf(rev.Namespace, metav1.GetControllerOfNoCopy(rev)); ds != nil {
		c.enqueue(ds)
	}
}

// enqueueSelectingRevision queues the DaemonSets whose selector matches the orphan
// revision: one of them may adopt it.
func (c *Controller) enqueueSelectingRevision(rev *appsv1.ControllerRevision) {
	dss, err := c.dsLister.GetHistoryDaemonSets(rev)
	if err != nil {
		return
	}
	for _, ds := range dss {
		c.enqueue(ds)
	}
}

// --- Pods ---

// enqueueSelectingPod queues every DaemonSet whose selector matches the orphan pod.
func (c *Controller) enqueueSelectingPod(pod *corev1.Pod) {
	dss, err := c.dsLister.GetPodDaemonSets(pod)
	if err != nil {
		return
	}
	if len(dss) > 1 {
		utilruntime.HandleError(fmt.Errorf("user error! more than one daemon is selecting pods with labels: %+v", pod.Labels))
	}
	for _, ds := range dss {
		c.enqueue(ds)
	}
}

func (c *Controller) addPod(log klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		// Seen for the first time while already being deleted: not a creation.
		c.deletePodEvent(log, pod)
		return
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		if ds := c.controllerOf(pod.Namespace, ref); ds != nil {
			c.expectations.CreationObserved(keyOf(ds))
			c.enqueue(ds)
		}
		return
	}
	c.enqueueSelectingPod(pod)
}

func (c *Controller) updatePod(log klog.Logger, old, cur any) {
	oldPod, ok1 := old.(*corev1.Pod)
	curPod, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || oldPod.ResourceVersion == curPod.ResourceVersion {
		return
	}
	if curPod.DeletionTimestamp != nil {
		// A graceful deletion has begun: for the controller the pod is gone now.
		c.deletePodEvent(log, curPod)
		return
	}
	oldRef, curRef := metav1.GetControllerOfNoCopy(oldPod), metav1.GetControllerOfNoCopy(curPod)
	refChanged := !reflect.DeepEqual(oldRef, curRef)
	if refChanged && oldRef != nil {
		if ds := c.controllerOf(oldPod.Namespace, oldRef); ds != nil {
			c.enqueue(ds)
		}
	}
	if curRef != nil {
		ds := c.controllerOf(curPod.Namespace, curRef)
		if ds == nil {
			return
		}
		c.enqueue(ds)
		if !podutil.IsReady(oldPod) && podutil.IsReady(curPod) && ds.Spec.MinReadySeconds > 0 {
			// It turns available minReadySeconds from now; look again then.
			c.requeueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if refChanged || !reflect.DeepEqual(oldPod.Labels, curPod.Labels) {
		c.enqueueSelectingPod(curPod)
	}
}

func (c *Controller) deletePodEvent(log klog.Logger, obj any) {
	pod, ok := tombstone.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	ds := c.controllerOf(pod.Namespace, metav1.GetControllerOfNoCopy(pod))
	if ds == nil {
		return
	}
	log.V(4).Info("pod deleted", "namespace", pod.Namespace, "name", pod.Name, "daemonset", ds.Name)
	c.expectations.DeletionOfObserved(keyOf(ds), podKey(pod))
	c.enqueue(ds)
}

// --- Nodes ---

func (c *Controller) addNode(log klog.Logger, obj any) {
	if node, ok := obj.(*corev1.Node); ok {
		c.nodeChanged(log, node)
	}
}

// updateNode acts only on what placement reads: labels and taints.
func (c *Controller) updateNode(log klog.Logger, old, cur any) {
	oldNode, ok1 := old.(*corev1.Node)
	curNode, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if apiequality.Semantic.DeepEqual(oldNode.Labels, curNode.Labels) &&
		apiequality.Semantic.DeepEqual(oldNode.Spec.Taints, curNode.Spec.Taints) {
		return
	}
	c.nodeChanged(log, curNode)
}

// nodeChanged queues each of the shard's DaemonSets that node should run a pod of and
// does not, that runs a pod there that must go, or that reports misscheduled pods (as
// upstream's node update worker decides). The lister holds the DaemonSets of the shard's
// namespaces only: every shard acts on a node for its own DaemonSets.
func (c *Controller) nodeChanged(log klog.Logger, node *corev1.Node) {
	dss, err := c.dsLister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("listing daemon sets: %w", err))
		return
	}
	scheduled := c.daemonSetsWithPodsOn(node.Name)
	for _, ds := range dss {
		shouldRun, shouldContinueRunning := placementOf(ds).shouldRun(log, node)
		has := scheduled[keyOf(ds)]
		if (shouldRun && !has) || (!shouldContinueRunning && has) || (has && ds.Status.NumberMisscheduled > 0) {
			c.enqueue(ds)
		}
	}
}

// deleteNode queues each of the shard's DaemonSets that counted the node (should run a
// pod there, or has one there). Upstream does not watch node deletions: its DaemonSets
// notice when the pod garbage collector deletes the node's pods; this reaches the same
// status sooner.
func (c *Controller) deleteNode(log klog.Logger, obj any) {
	node, ok := tombstone.Unwrap[*corev1.Node](obj)
	if !ok {
		return
	}
	dss, err := c.dsLister.List(labels.Everything())
	if err != nil {
		return
	}
	scheduled := c.daemonSetsWithPodsOn(node.Name)
	for _, ds := range dss {
		if shouldRun, _ := placementOf(ds).shouldRun(log, node); shouldRun || scheduled[keyOf(ds)] {
			c.enqueue(ds)
		}
	}
}

// daemonSetsWithPodsOn returns the keys of the DaemonSets controlling a pod bound to node.
func (c *Controller) daemonSetsWithPodsOn(node string) map[string]bool {
	objs, err := c.podIndexer.ByIndex(nodeNameIndex, node)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(pod); ref != nil && ref.Kind == controllerKind.Kind {
			out[pod.Namespace+"/"+ref.Name] = true
		}
	}
	return out
}

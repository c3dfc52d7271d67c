package endpointslice

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	esreconciler "k8s.io/endpointslice"
	esutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// addressTypes are the address types a Service's slices and topology hints are kept by.
var addressTypes = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN}

func (c *Controller) addHandlers(log klog.Logger, svcInf, podInf, sliceInf, nodeInf toolscache.SharedIndexInformer) error {
	if _, err := svcInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueService,
		UpdateFunc: func(_, cur any) { c.enqueueService(cur) },
		DeleteFunc: func(obj any) { c.deleteService(log, obj) },
	}); err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.podChanged(log, nil, obj) },
		UpdateFunc: func(old, cur any) { c.podChanged(log, old, cur) },
		DeleteFunc: func(obj any) { c.podChanged(log, obj, nil) },
	}); err != nil {
		return err
	}
	if _, err := sliceInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    c.addSlice,
		UpdateFunc: func(old, cur any) { c.updateSlice(log, old, cur) },
		DeleteFunc: c.deleteSlice,
	}); err != nil {
		return err
	}
	_, err := nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.triggerTopology() },
		UpdateFunc: c.updateNode,
		DeleteFunc: func(any) { c.triggerTopology() },
	})
	return err
}

// --- Services ---

func (c *Controller) enqueueService(obj any) {
	key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("couldn't get key for object %+v: %w", obj, err))
		return
	}
	c.queue.Add(key)
}

// deleteService queues the Service (its sync finds it gone) and forgets what the
// controller keeps in memory about it. The event comes for a deleted Service and for
// every Service of a namespace the shard stops working (after that namespace's work was
// drained), whose queued key the gate then drops: the sync would not forget it then.
func (c *Controller) deleteService(log klog.Logger, obj any) {
	c.enqueueService(obj)
	svc, ok := tombstone.Unwrap[*corev1.Service](obj)
	if !ok {
		return
	}
	c.forgetService(log, svc.Namespace, svc.Name)
}

// forgetService drops the Service's state from the tracker, the trigger-time tracker,
// the reconciler's metrics cache and the topology cache, unless the cache holds the
// Service again (its namespace came back before a late delete event was handled).
func (c *Controller) forgetService(log klog.Logger, namespace, name string) {
	if _, err := c.serviceLister.Services(namespace).Get(name); !apierrors.IsNotFound(err) {
		return
	}
	c.tracker.DeleteService(namespace, name)
	c.triggerTime.DeleteService(namespace, name)
	c.reconciler.DeleteService(namespace, name)
	for _, t := range addressTypes {
		c.topology.RemoveHints(namespace+"/"+name, t)
	}
	log.V(4).Info("forgot the Service's endpoint slice state", "namespace", namespace, "name", name)
}

// --- Pods ---

// podChanged queues, after the batch period, every Service whose selector matches the
// pod's new or old labels and whose endpoints the change may affect (upstream's pod
// projection, resolved here instead of in a queue of its own).
func (c *Controller) podChanged(log klog.Logger, old, cur any) {
	key := esutil.GetPodUpdateProjectionKey(old, cur)
	if key == nil {
		return
	}
	svcs, err := esutil.GetServicesToUpdate(c.serviceLister, key)
	if err != nil {
		// The lister reads the cache: only an unparsable selector fails, for good.
		log.Error(err, "finding the Services of a pod", "namespace", key.Namespace)
		return
	}
	for svc := range svcs {
		c.queue.AddAfter(svc, c.batchPeriod)
	}
}

// --- EndpointSlices ---

func (c *Controller) addSlice(obj any) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || slice == nil {
		return
	}
	if c.reconciler.ManagedByController(slice) && c.tracker.ShouldSync(slice) {
		c.enqueueSliceService(slice)
	}
}

func (c *Controller) updateSlice(log klog.Logger, old, cur any) {
	oldSlice, ok1 := old.(*discoveryv1.EndpointSlice)
	slice, ok2 := cur.(*discoveryv1.EndpointSlice)
	if !ok1 || !ok2 || oldSlice == nil || slice == nil {
		return
	}
	// A label change leaves the generation as it is: a slice moved to another Service by
	// hand queues both.
	svc, oldSvc := slice.Labels[discoveryv1.LabelServiceName], oldSlice.Labels[discoveryv1.LabelServiceName]
	if svc != oldSvc {
		log.Info("label changed", "label", discoveryv1.LabelServiceName, "oldService", oldSvc, "newService", svc,
			"endpointslice", klog.KObj(slice))
		c.enqueueSliceService(slice)
		c.enqueueSliceService(oldSlice)
		return
	}
	if c.reconciler.ManagedByChanged(oldSlice, slice) ||
		(c.reconciler.ManagedByController(slice) && c.tracker.ShouldSync(slice)) {
		c.enqueueSliceService(slice)
	}
}

// deleteSlice queues the slice's Service unless the controller deleted the slice itself.
func (c *Controller) deleteSlice(obj any) {
	slice, ok := tombstone.Unwrap[*discoveryv1.EndpointSlice](obj)
	if !ok || slice == nil {
		return
	}
	if c.reconciler.ManagedByController(slice) && c.tracker.Has(slice) && !c.tracker.HandleDeletion(slice) {
		c.enqueueSliceService(slice)
	}
}

// enqueueSliceService queues the slice's Service after max(1 s, batch period), so that
// changes to several of its slices are handled by one sync.
func (c *Controller) enqueueSliceService(slice *discoveryv1.EndpointSlice) {
	key, err := esreconciler.ServiceControllerKey(slice)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("couldn't get key for EndpointSlice %s/%s: %w", slice.Namespace, slice.Name, err))
		return
	}
	c.queue.AddAfter(key, max(endpointSliceChangeMinSyncDelay, c.batchPeriod))
}

// --- Nodes ---

// updateNode triggers the topology check when a Node's readiness or zone changed (a
// cloud provider may label the zone after the Node was created).
func (c *Controller) updateNode(old, cur any) {
	oldNode, ok1 := old.(*corev1.Node)
	node, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if nodeReady(oldNode) != nodeReady(node) || oldNode.Labels[corev1.LabelTopologyZone] != node.Labels[corev1.LabelTopologyZone] {
		c.triggerTopology()
	}
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

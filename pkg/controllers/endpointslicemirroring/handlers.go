//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/kshard/kshard/pkg/controllers/internal/tombstone"
)

// The handlers queue what upstream's queue: the key of an Endpoints that is or was
// mirrored, of a selectorless Service (or one that gained or lost its selector), and of
// the Endpoints a mirrored slice names when the slice changed behind the controller's back
// (not its own write, as the tracker knows) or was deleted unexpectedly.

func keyOf(namespace, name string) string { return namespace + "/" + name }

// addEndpoints queues an Endpoints that is to be mirrored.
func (c *Controller) addEndpoints(log klog.Logger, obj any) {
	ep, ok := obj.(*corev1.Endpoints)
	if !ok {
		return
	}
	if !shouldMirror(ep) {
		log.V(5).Info("skipping mirroring", "namespace", ep.Namespace, "name", ep.Name)
		return
	}
	c.queue.Add(keyOf(ep.Namespace, ep.Name))
}

// updateEndpoints queues an Endpoints that is or was to be mirrored (a skip-mirror label
// or a leader-election annotation added removes its slices).
func (c *Controller) updateEndpoints(log klog.Logger, old, cur any) {
	oldEP, ok1 := old.(*corev1.Endpoints)
	curEP, ok2 := cur.(*corev1.Endpoints)
	if !ok1 || !ok2 {
		return
	}
	if !shouldMirror(oldEP) && !shouldMirror(curEP) {
		log.V(5).Info("skipping mirroring", "namespace", curEP.Namespace, "name", curEP.Name)
		return
	}
	c.queue.Add(keyOf(curEP.Namespace, curEP.Name))
}

// deleteEndpoints queues a mirrored Endpoints that is gone, whose sync deletes its slices.
// When the Endpoints left the cache (deleted, or its namespace left the shard: the sync
// then never runs here, since the queue admits no key of a namespace the shard does not
// work), its tracked slice generations and its share of the metrics are forgotten now:
// had they stayed, and the namespace came back after another shard changed the slices,
// the tracker would call the cache stale on every sync (a tracked slice missing) and the
// Endpoints would never be mirrored again.
func (c *Controller) deleteEndpoints(log klog.Logger, obj any) {
	ep, ok := tombstone.Unwrap[*corev1.Endpoints](obj)
	if !ok {
		return
	}
	if _, err := c.endpoints.Endpoints(ep.Namespace).Get(ep.Name); apierrors.IsNotFound(err) {
		c.tracker.DeleteService(ep.Namespace, ep.Name)
		c.metricsCache.forget(types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name})
	}
	if !shouldMirror(ep) {
		log.V(5).Info("skipping mirroring", "namespace", ep.Namespace, "name", ep.Name)
		return
	}
	c.queue.Add(keyOf(ep.Namespace, ep.Name))
}

// addService queues the Endpoints of a Service without a selector.
func (c *Controller) addService(obj any) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	if svc.Spec.Selector == nil {
		c.queue.Add(keyOf(svc.Namespace, svc.Name))
	}
}

// updateService queues the Endpoints of a Service that gained or lost its selector.
func (c *Controller) updateService(old, cur any) {
	oldSvc, ok1 := old.(*corev1.Service)
	curSvc, ok2 := cur.(*corev1.Service)
	if !ok1 || !ok2 {
		return
	}
	if (oldSvc.Spec.Selector == nil) != (curSvc.Spec.Selector == nil) {
		c.queue.Add(keyOf(curSvc.Namespace, curSvc.Name))
	}
}

// deleteService queues the Endpoints of a deleted Service without a selector.
func (c *Controller) deleteService(obj any) {
	svc, ok := tombstone.Unwrap[*corev1.Service](obj)
	if !ok {
		return
	}
	if svc.Spec.Selector == nil {
		c.queue.Add(keyOf(svc.Namespace, svc.Name))
	}
}

// addSlice queues the Endpoints of a mirrored slice the controller did not write (or not
// in this generation).
func (c *Controller) addSlice(obj any) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	if managedByController(s) && c.tracker.ShouldSync(s) {
		c.queueForSlice(s)
	}
}

// updateSlice queues the Endpoints of a mirrored slice changed by someone else, of a slice
// that became or stopped being mirrored, and both Endpoints when its service-name label
// changed (a label change does not change a slice's generation).
func (c *Controller) updateSlice(log klog.Logger, old, cur any) {
	prev, ok1 := old.(*discoveryv1.EndpointSlice)
	s, ok2 := cur.(*discoveryv1.EndpointSlice)
	if !ok1 || !ok2 {
		return
	}
	name, prevName := s.Labels[discoveryv1.LabelServiceName], prev.Labels[discoveryv1.LabelServiceName]
	if name != prevName {
		log.Info("EndpointSlice's service name label changed", "namespace", s.Namespace, "name", s.Name,
			"label", discoveryv1.LabelServiceName, "oldName", prevName, "newName", name)
		c.queueForSlice(s)
		c.queueForSlice(prev)
		return
	}
	if managedByController(prev) != managedByController(s) || (managedByController(s) && c.tracker.ShouldSync(s)) {
		c.queueForSlice(s)
	}
}

// deleteSlice queues the Endpoints of a tracked mirrored slice whose deletion the
// controller did not ask for.
func (c *Controller) deleteSlice(obj any) {
	s, ok := tombstone.Unwrap[*discoveryv1.EndpointSlice](obj)
	if !ok {
		return
	}
	if managedByController(s) && c.tracker.Has(s) && !c.tracker.HandleDeletion(s) {
		c.queueForSlice(s)
	}
}

// queueForSlice queues the Endpoints a slice names, after the batch period.
func (c *Controller) queueForSlice(s *discoveryv1.EndpointSlice) {
	key, err := endpointsKeyOf(s)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("couldn't get the Endpoints key of EndpointSlice %s/%s: %w", s.Namespace, s.Name, err))
		return
	}
	c.queue.AddAfter(key, c.batchPeriod)
}

package endpoint

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// addHandlers registers the controller's event handlers: Service changes queue the
// Service; pod changes queue, after the batch period, the Services whose selectors the
// pod's old or new labels match; a deleted Endpoints queues its Service.
func (c *Controller) addHandlers(svcInf, podInf, epInf toolscache.SharedIndexInformer) error {
	if _, err := svcInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    c.serviceChanged,
		UpdateFunc: func(_, cur any) { c.serviceChanged(cur) },
		DeleteFunc: c.serviceDeleted,
	}); err != nil {
		return err
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.podChanged(nil, obj) },
		UpdateFunc: c.podChanged,
		DeleteFunc: func(obj any) { c.podChanged(obj, nil) },
	}); err != nil {
		return err
	}
	_, err := epInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		DeleteFunc: c.serviceChanged, // an Endpoints' key is its Service's
	})
	return err
}

// serviceChanged queues obj's key.
func (c *Controller) serviceChanged(obj any) {
	if key, ok := keyOf(obj); ok {
		c.queue.Add(key)
	}
}

// serviceDeleted queues the deleted Service (its sync deletes the Endpoints) and, when the
// Service is no longer cached, forgets what the controller remembers of it: the same
// delete is what the shard's cache delivers for every Service of a namespace it releases,
// whose key the shard's queue then drops, so this is where a departed namespace's memory
// goes. The check guards against a delete delivered after the namespace came back.
func (c *Controller) serviceDeleted(obj any) {
	key, ok := keyOf(obj)
	if !ok {
		return
	}
	ns, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err == nil {
		if _, err := c.serviceLister.Services(ns).Get(name); apierrors.IsNotFound(err) {
			c.forget(ns, name)
		}
	}
	c.queue.Add(key)
}

// forget drops the Service's trigger-time and stale-resourceVersion records.
func (c *Controller) forget(namespace, name string) {
	c.triggerTimes.DeleteService(namespace, name)
	c.stale.forget(namespace, name)
}

// podChanged queues the Services a pod's add (old nil), update or delete (cur nil) may
// change, after the batch period, as upstream's pod worker does with the pod's
// projection (k8s.io/endpointslice/util): changes that cannot change an address (a
// resync, an annotation) queue nothing.
func (c *Controller) podChanged(old, cur any) {
	projection := endpointsliceutil.GetPodUpdateProjectionKey(old, cur)
	if projection == nil {
		return
	}
	keys, err := endpointsliceutil.GetServicesToUpdate(c.serviceLister, projection)
	if err != nil { // a cache's lister does not fail
		c.log.Error(err, "finding the Services of a pod", "namespace", projection.Namespace)
		return
	}
	for key := range keys {
		c.queue.AddAfter(key, c.batchPeriod)
	}
}

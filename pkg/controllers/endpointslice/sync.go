package endpointslice

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	esmetrics "k8s.io/endpointslice/metrics"
	"k8s.io/klog/v2"
)

// errStaleCache is a sync's result when the cached slices are older than the
// controller's own writes (the tracker's check): the Service is retried with backoff, as
// upstream's StaleInformerCache error is, and the sync counted as "stale".
var errStaleCache = errors.New("EndpointSlice informer cache is out of date")

// sync is one sync of a Service key, counted in endpoint_slice_controller_syncs by result.
func (c *Controller) sync(ctx context.Context, key string) error {
	err := c.syncService(ctx, key)
	trackSync(err)
	return err
}

// trackSync counts a sync's result as upstream: success, stale or error.
func trackSync(err error) {
	result := "success"
	switch {
	case errors.Is(err, errStaleCache):
		result = "stale"
	case err != nil:
		result = "error"
	}
	esmetrics.EndpointSliceSyncs.WithLabelValues(result).Inc()
}

// syncService brings a Service's slices to what its pods say.
func (c *Controller) syncService(ctx context.Context, key string) error {
	log := klog.FromContext(ctx)
	start := time.Now()
	defer func() {
		log.V(4).Info("finished syncing service endpoint slices", "key", key, "elapsedTime", time.Since(start))
	}()
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	svc, err := c.serviceLister.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.triggerTime.DeleteService(namespace, name)
		c.reconciler.DeleteService(namespace, name)
		c.tracker.DeleteService(namespace, name)
		return nil
	}
	if err != nil {
		return err
	}
	// ExternalName Services get no endpoints from this controller (kubernetes#105986);
	// Services without a selector get slices written by others (users, mirroring).
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		return nil
	}
	log = log.WithValues("namespace", namespace, "name", name)
	log.V(5).Info("about to update endpoint slices for service")

	podList, err := c.podLister.Pods(namespace).List(labels.Set(svc.Spec.Selector).AsSelectorPreValidated())
	if err != nil {
		// A cache read: in practice never fails.
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToListPods",
			"Error listing Pods for Service %s/%s: %v", namespace, name, err)
		return err
	}
	slices, err := c.sliceLister.EndpointSlices(namespace).List(labels.Set{
		discoveryv1.LabelServiceName: name,
		discoveryv1.LabelManagedBy:   c.reconciler.GetControllerName(),
	}.AsSelectorPreValidated())
	if err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToListEndpointSlices",
			"Error listing Endpoint Slices for Service %s/%s: %v", namespace, name, err)
		return err
	}
	// A slice being deleted (held by a finalizer) is neither counted nor written: it
	// would otherwise keep the controller from converging.
	slices = dropSlicesPendingDeletion(slices)
	if c.tracker.StaleSlices(svc, slices) {
		return errStaleCache
	}
	// Computed even when the sync turns out a no-op, so that the tracker's state follows
	// the pods.
	triggerTime := c.triggerTime.ComputeEndpointLastChangeTriggerTime(namespace, svc, podList)
	if err := c.reconciler.Reconcile(log, svc, podList, slices, triggerTime); err != nil {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, "FailedToUpdateEndpointSlices",
			"Error updating Endpoint Slices for Service %s/%s: %v", namespace, name, err)
		return err
	}
	return nil
}

// dropSlicesPendingDeletion returns the slices without a deletion timestamp (in place).
func dropSlicesPendingDeletion(slices []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	n := 0
	for _, s := range slices {
		if s.DeletionTimestamp == nil {
			slices[n] = s
			n++
		}
	}
	return slices[:n]
}

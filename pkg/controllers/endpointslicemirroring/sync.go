//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// staleCacheError is what a sync returns when the EndpointSlice cache does not yet show
// the controller's own writes for the key (the tracker says so): the key is retried with
// the queue's backoff, as upstream's StaleInformerCache error retries it.
type staleCacheError struct{}

func (staleCacheError) Error() string { return "EndpointSlice informer cache is out of date" }

// sync mirrors the Endpoints named key, or deletes its mirrored slices when there is
// nothing to mirror: the Endpoints is gone, marked skip-mirror, a leader-election record,
// or its Service is gone or has a selector (the EndpointSlice controller serves those).
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	log := klog.FromContext(ctx).WithValues("namespace", namespace, "name", name)
	ctx = klog.NewContext(ctx, log)
	start := time.Now()
	defer func() {
		endpointsSyncDuration.WithLabelValues().Observe(float64(time.Since(start).Milliseconds()) / 1000)
		log.V(4).Info("finished syncing EndpointSlices for Endpoints", "elapsed", time.Since(start))
	}()

	ep, err := c.endpoints.Endpoints(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("Endpoints not found, cleaning up any mirrored EndpointSlices")
		return c.deleteMirroredSlices(ctx, namespace, name)
	}
	if err != nil {
		return err
	}
	if !shouldMirror(ep) {
		log.V(4).Info("Endpoints should not be mirrored, cleaning up any mirrored EndpointSlices")
		return c.deleteMirroredSlices(ctx, namespace, name)
	}
	svc, err := c.services.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(4).Info("Service not found, cleaning up any mirrored EndpointSlices")
		return c.deleteMirroredSlices(ctx, namespace, name)
	}
	if err != nil {
		return err
	}
	if svc.Spec.Selector != nil {
		log.V(4).Info("Service has a selector, cleaning up any mirrored EndpointSlices")
		return c.deleteMirroredSlices(ctx, namespace, name)
	}

	slices, err := c.mirroredSlices(namespace, name)
	if err != nil {
		return err
	}
	if c.tracker.StaleSlices(svc, slices) {
		return staleCacheError{}
	}
	return c.reconciler.reconcile(ctx, ep, slices)
}

// deleteMirroredSlices forgets what the tracker knows of the Endpoints and deletes its
// mirrored slices (those in the cache).
func (c *Controller) deleteMirroredSlices(ctx context.Context, namespace, name string) error {
	c.tracker.DeleteService(namespace, name)
	slices, err := c.mirroredSlices(namespace, name)
	if err != nil {
		return err
	}
	return c.reconciler.deleteAll(ctx, namespace, name, slices)
}

// mirroredSlices returns the cached slices this controller mirrored for namespace/name:
// labelled with its managed-by value and that service name.
func (c *Controller) mirroredSlices(namespace, name string) ([]*discoveryv1.EndpointSlice, error) {
	sel := labels.Set{
		discoveryv1.LabelServiceName: name,
		discoveryv1.LabelManagedBy:   ControllerName,
	}.AsSelectorPreValidated()
	return c.slices.EndpointSlices(namespace).List(sel)
}

// shouldMirror reports whether ep is to be mirrored, as far as ep alone tells: not when it
// carries the endpointslice.kubernetes.io/skip-mirror label set to "true" (the Endpoints
// controller sets it on the Endpoints of Services with a selector, whose slices the
// EndpointSlice controller writes) or a leader-election record annotation (old
// leader-election locks). Whether its Service exists without a selector is the sync's
// question.
func shouldMirror(ep *corev1.Endpoints) bool {
	if ep == nil || ep.Labels[discoveryv1.LabelSkipMirror] == "true" {
		return false
	}
	_, leader := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]
	return !leader
}

// managedByController reports whether s is one of this controller's slices.
func managedByController(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == ControllerName
}

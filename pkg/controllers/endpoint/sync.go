package endpoint

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"
)

// sync reconciles the Endpoints of the Service key names (package doc).
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	log := klog.FromContext(ctx).WithValues("namespace", namespace, "name", name)
	svc, err := c.serviceLister.Services(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// The Service is gone: so is its Endpoints. (Endpoints left behind by a Service
		// deleted while no shard worked the namespace are found by Resync.)
		err = c.client.CoreV1().Endpoints(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.forget(namespace, name)
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.Selector == nil {
		// Their Endpoints, if any, are written by someone else (upstream leaves them alone).
		return nil
	}
	selected, err := c.podLister.Pods(namespace).List(labels.Set(svc.Spec.Selector).AsSelectorPreValidated())
	if err != nil {
		return err
	}
	// Computed on every sync, a no-op one too, so that the tracker's state follows the
	// pods' (upstream does the same).
	triggerTime := c.triggerTimes.ComputeEndpointLastChangeTriggerTime(namespace, svc, selected)
	subsets, ready, notReady := desiredSubsets(log, svc, selected)

	current, err := c.endpointsLister.Endpoints(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		// A new Endpoints, as upstream builds it: the Service's name and labels (the
		// namespace comes from the request).
		current = &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Labels: svc.Labels}}
	case err != nil:
		return err
	case c.stale.isStale(current):
		return fmt.Errorf("endpoints informer cache is out of date, resource version %s already processed for endpoints %s", current.ResourceVersion, key)
	}
	create := current.ResourceVersion == ""
	if !create &&
		(subsetsEqual(current.Subsets, subsets) ||
			// Stored by a writer that packs differently: compare in the canonical form.
			subsetsEqual(repackSubsets(current.Subsets), subsets)) &&
		labelsCorrect(current.Labels, svc.Labels) &&
		capacityAnnotationCorrect(current.Annotations, current.Subsets) {
		log.V(5).Info("Endpoints up to date")
		return nil
	}

	desired := current.DeepCopy()
	desired.Subsets = subsets
	desired.Labels = maps.Clone(svc.Labels)
	if desired.Annotations == nil {
		desired.Annotations = map[string]string{}
	}
	if triggerTime.IsZero() {
		delete(desired.Annotations, corev1.EndpointsLastChangeTriggerTime)
	} else {
		desired.Annotations[corev1.EndpointsLastChangeTriggerTime] = triggerTime.UTC().Format(time.RFC3339Nano)
	}
	if truncate(desired) {
		desired.Annotations[corev1.EndpointsOverCapacity] = truncatedValue
	} else {
		delete(desired.Annotations, corev1.EndpointsOverCapacity)
	}
	if desired.Labels == nil {
		desired.Labels = map[string]string{}
	}
	if serviceIPSet(svc) {
		delete(desired.Labels, corev1.IsHeadlessService)
	} else {
		desired.Labels[corev1.IsHeadlessService] = ""
	}
	desired.Labels[LabelManagedBy] = ControllerName

	log.V(4).Info("Updating Endpoints", "readyEndpoints", ready, "notReadyEndpoints", notReady, "create", create)
	var updated *corev1.Endpoints
	if create {
		_, err = c.client.CoreV1().Endpoints(namespace).Create(ctx, desired, metav1.CreateOptions{})
	} else {
		updated, err = c.client.CoreV1().Endpoints(namespace).Update(ctx, desired, metav1.UpdateOptions{})
	}
	if err != nil {
		if create && apierrors.IsForbidden(err) {
			log.V(5).Info("Forbidden from creating Endpoints", "err", err.Error())
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // creates keep failing until the namespace is gone
			}
		}
		if create {
			c.recorder.Eventf(desired, corev1.EventTypeWarning, "FailedToCreateEndpoint",
				"Failed to create endpoint for service %v/%v: %v", namespace, name, err)
		} else {
			c.recorder.Eventf(desired, corev1.EventTypeWarning, "FailedToUpdateEndpoint",
				"Failed to update endpoint %v/%v: %v", namespace, name, err)
		}
		return err
	}
	// The cache holding the replaced version has not seen this update. An update that
	// changed nothing (an over-capacity Endpoints written again, a webhook undoing the
	// change) keeps the resourceVersion, which must not be marked.
	if updated != nil && updated.ResourceVersion != current.ResourceVersion {
		c.stale.markStale(current)
	}
	return nil
}

// desiredSubsets returns the repacked subsets of svc's selected pods and the numbers of
// ready and not-ready (address, port) pairs.
func desiredSubsets(log klog.Logger, svc *corev1.Service, selected []*corev1.Pod) (subsets []corev1.EndpointSubset, ready, notReady int) {
	subsets = []corev1.EndpointSubset{}
	count := func(r bool) {
		if r {
			ready++
		} else {
			notReady++
		}
	}
	for _, pod := range selected {
		if !endpointsliceutil.ShouldPodBeInEndpoints(pod, svc.Spec.PublishNotReadyAddresses) {
			continue
		}
		addr, err := podAddress(svc, pod)
		if err != nil {
			// A pod without an IP of the Service's family (a cluster being moved to
			// dual-stack).
			log.V(2).Info("No address of the Service's IP family on a pod", "pod", klog.KObj(pod), "clusterIP", svc.Spec.ClusterIP, "err", err.Error())
			continue
		}
		if endpointsliceutil.ShouldSetHostname(pod, svc) {
			addr.Hostname = pod.Spec.Hostname
		}
		if len(svc.Spec.Ports) == 0 {
			// Only a headless Service may have no ports; its addresses are listed
			// without.
			if svc.Spec.ClusterIP == corev1.ClusterIPNone {
				s, r := oneAddressSubset(pod, addr, nil, svc.Spec.PublishNotReadyAddresses)
				subsets = append(subsets, s)
				count(r)
			}
			continue
		}
		for i := range svc.Spec.Ports {
			sp := &svc.Spec.Ports[i]
			port, err := endpointslice.FindPort(pod, sp)
			if err != nil {
				log.V(4).Info("Failed to find port for service", "pod", klog.KObj(pod), "err", err.Error())
				continue
			}
			s, r := oneAddressSubset(pod, addr, &corev1.EndpointPort{
				Name: sp.Name, Port: int32(port), Protocol: sp.Protocol, AppProtocol: sp.AppProtocol,
			}, svc.Spec.PublishNotReadyAddresses)
			subsets = append(subsets, s)
			count(r)
		}
	}
	return repackSubsets(subsets), ready, notReady
}

// serviceIPSet reports whether svc has a cluster IP (not headless).
func serviceIPSet(svc *corev1.Service) bool {
	return svc.Spec.ClusterIP != corev1.ClusterIPNone && svc.Spec.ClusterIP != ""
}

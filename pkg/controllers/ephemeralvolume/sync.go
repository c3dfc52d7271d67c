package ephemeralvolume

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/component-helpers/storage/ephemeral"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers"
)

// ReasonFailedBinding is the reason of the Warning event on a pod whose ephemeral
// volume's claim could not be made its own (upstream's events.FailedBinding).
const ReasonFailedBinding = "FailedBinding"

// sync creates the missing claims of the pod key's ("namespace/name") ephemeral volumes,
// in the order of its volumes, and stops at the first volume that fails, recording why on
// the pod.
func (c *Controller) sync(ctx context.Context, key string) error {
	ctx, log, namespace, name, err := controllers.StartSync(ctx, key)
	if err != nil {
		utilruntime.HandleError(err)
		return nil // retrying cannot fix a malformed key
	}
	pod, err := c.pods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		log.V(5).Info("nothing to do: the pod is gone")
		return nil
	}
	if err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		log.V(5).Info("nothing to do: the pod is being deleted")
		return nil
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if err := c.ensureClaim(ctx, pod, v); err != nil {
			c.recorder.Event(pod, corev1.EventTypeWarning, ReasonFailedBinding, fmt.Sprintf("ephemeral volume %s: %v", v.Name, err))
			return fmt.Errorf("pod %s, ephemeral volume %s: %w", key, v.Name, err)
		}
	}
	return nil
}

// ensureClaim makes sure the claim of v, when v is a generic ephemeral volume, exists and
// is pod's: an existing claim of its name must be controlled by pod, a missing one is
// created from v's template.
func (c *Controller) ensureClaim(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	if v.Ephemeral == nil {
		return nil
	}
	log := klog.FromContext(ctx)
	claimName := ephemeral.VolumeClaimName(pod, v)
	pvc, err := c.claims.PersistentVolumeClaims(pod.Namespace).Get(claimName)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err == nil {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return err
		}
		log.V(5).Info("the claim exists", "volume", v.Name, "claim", claimName)
		return nil
	}
	tmpl := v.Ephemeral.VolumeClaimTemplate
	if tmpl == nil {
		// The API server's validation requires the template; a pod without one cannot exist.
		return fmt.Errorf("volume %s has no volumeClaimTemplate", v.Name)
	}
	pvc = &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: claimName,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
		},
		Spec: tmpl.Spec,
	}
	c.creates.attempts.Inc()
	if _, err := c.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		c.creates.failures.Inc()
		return fmt.Errorf("create PVC %s: %w", claimName, err)
	}
	log.V(4).Info("claim created", "volume", v.Name, "claim", claimName)
	return nil
}

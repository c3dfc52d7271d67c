package statefulset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The pod and claim verbs of the controller's events: reasons Successful<Verb> and
// Failed<Verb>, as upstream records them.
const (
	verbCreate = "Create"
	verbUpdate = "Update"
	verbDelete = "Delete"
)

// ReasonConflictingController warns that a claim has another controller, so the
// retention policy is not applied to it.
const ReasonConflictingController = "ConflictingController"

// recordPodEvent records upstream's event for a pod create, update or delete.
func (c *Controller) recordPodEvent(verb string, set *appsv1.StatefulSet, pod *corev1.Pod, err error) {
	if err == nil {
		c.recorder.Event(set, corev1.EventTypeNormal, "Successful"+verb,
			fmt.Sprintf("%s Pod %s in StatefulSet %s successful", verb, pod.Name, set.Name))
		return
	}
	c.recorder.Event(set, corev1.EventTypeWarning, "Failed"+verb,
		fmt.Sprintf("%s Pod %s in StatefulSet %s failed error: %s", verb, pod.Name, set.Name, err))
}

// recordClaimEvent records upstream's event for a claim create (its messages differ from
// the pods' in wording, upstream's own).
func (c *Controller) recordClaimEvent(verb string, set *appsv1.StatefulSet, pod *corev1.Pod, claim *corev1.PersistentVolumeClaim, err error) {
	if err == nil {
		c.recorder.Event(set, corev1.EventTypeNormal, "Successful"+verb,
			fmt.Sprintf("%s Claim %s Pod %s in StatefulSet %s success", verb, claim.Name, pod.Name, set.Name))
		return
	}
	c.recorder.Event(set, corev1.EventTypeWarning, "Failed"+verb,
		fmt.Sprintf("%s Claim %s for Pod %s in StatefulSet %s failed error: %s", verb, claim.Name, pod.Name, set.Name, err))
}

// createPod creates the pod's claims, then the pod, then sets the claims' owner
// references for the retention policy (which may name the new pod).
func (c *Controller) createPod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if err := c.createClaims(ctx, set, pod); err != nil {
		c.recordPodEvent(verbCreate, set, pod, err)
		return err
	}
	created, err := c.client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return err
	}
	if err == nil {
		c.consistency.Wrote(keyOf(set), set.UID, podsResource, created.ResourceVersion)
	}
	// As upstream, the claims are checked against the pod as it was sent (no UID yet): a
	// pod in its ordinal range gets no claim reference, and a claim naming an earlier
	// pod of its name is left alone.
	if err := c.updateClaimsForRetention(ctx, set, pod); err != nil {
		c.recordPodEvent(verbUpdate, set, pod, err)
		return err
	}
	c.recordPodEvent(verbCreate, set, pod, err)
	return err
}

// updatePod gives an existing pod its identity and storage and its claims the retention
// policy's references, retrying conflicts against the cache's copy.
func (c *Controller) updatePod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	attempted := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		consistent := true
		if !identityMatches(set, pod) {
			updateIdentity(set, pod)
			consistent = false
		}
		if !storageMatches(set, pod) {
			updateStorage(set, pod)
			consistent = false
			if err := c.createClaims(ctx, set, pod); err != nil {
				c.recordPodEvent(verbUpdate, set, pod, err)
				return err
			}
		}
		match, err := c.claimsMatchRetention(ctx, set, pod)
		if err != nil {
			c.recordPodEvent(verbUpdate, set, pod, err)
			return err
		}
		if !match {
			if err := c.updateClaimsForRetention(ctx, set, pod); err != nil {
				c.recordPodEvent(verbUpdate, set, pod, err)
				return err
			}
			consistent = false
		}
		if consistent {
			return nil
		}
		attempted = true
		updated, err := c.client.CoreV1().Pods(pod.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
		if err == nil {
			c.consistency.Wrote(keyOf(set), set.UID, podsResource, updated.ResourceVersion)
			return nil
		}
		if cached, gerr := c.podLister.Pods(set.Namespace).Get(pod.Name); gerr == nil {
			pod = cached.DeepCopy()
		} else {
			klog.FromContext(ctx).Error(gerr, "Error getting updated Pod from lister", "pod", klog.KRef(set.Namespace, pod.Name))
		}
		return err
	})
	if attempted {
		c.recordPodEvent(verbUpdate, set, pod, err)
	}
	return err
}

// deletePod deletes the pod; one already gone counts as deleted.
func (c *Controller) deletePod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.recordPodEvent(verbDelete, set, pod, err)
		return err
	}
	c.recordPodEvent(verbDelete, set, pod, nil)
	return nil
}

// createClaims creates the pod's missing claims; a claim being deleted is an error (the
// pod must wait for it to go and be recreated).
func (c *Controller) createClaims(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	var errs []error
	for _, claim := range claimsFor(set, pod) {
		existing, err := c.pvcLister.PersistentVolumeClaims(claim.Namespace).Get(claim.Name)
		switch {
		case apierrors.IsNotFound(err):
			created, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Create(ctx, &claim, metav1.CreateOptions{})
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to create PVC %s: %w", claim.Name, err))
			} else {
				c.consistency.Wrote(keyOf(set), set.UID, claimsResource, created.ResourceVersion)
			}
			if err == nil || !apierrors.IsAlreadyExists(err) {
				c.recordClaimEvent(verbCreate, set, pod, &claim, err)
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("failed to retrieve PVC %s: %w", claim.Name, err))
			c.recordClaimEvent(verbCreate, set, pod, &claim, err)
		case existing.DeletionTimestamp != nil:
			errs = append(errs, fmt.Errorf("pvc %s is being deleted", claim.Name))
		}
	}
	return utilerrors.NewAggregate(errs)
}

// createMissingClaims creates the claims of a pending pod (one whose claim was deleted
// while it waited to be scheduled) and sets their references.
func (c *Controller) createMissingClaims(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if err := c.createClaims(ctx, set, pod); err != nil {
		return err
	}
	if err := c.updateClaimsForRetention(ctx, set, pod); err != nil {
		c.recordPodEvent(verbUpdate, set, pod, err)
		return err
	}
	return nil
}

// claimsMatchRetention reports whether each existing claim of the pod has the references
// the retention policy wants; missing claims are picked up later.
func (c *Controller) claimsMatchRetention(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) (bool, error) {
	log := klog.FromContext(ctx)
	ordinal := ordinalOf(pod)
	for i := range set.Spec.VolumeClaimTemplates {
		name := claimName(set, &set.Spec.VolumeClaimTemplates[i], ordinal)
		claim, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(name)
		switch {
		case apierrors.IsNotFound(err):
			log.V(4).Info("Expected claim missing, continuing to pick up in next iteration", "claim", name)
		case err != nil:
			//lint:ignore ST1005 upstream's message, which FailedUpdate events carry
			return false, fmt.Errorf("Could not retrieve claim %s for %s when checking PVC deletion policy: %w", name, pod.Name, err)
		default:
			if !claimOwnerUpToDate(log, claim, set, pod) {
				return false, nil
			}
		}
	}
	return true, nil
}

// updateClaimsForRetention writes the references the retention policy wants on each
// existing claim of the pod, warning about claims with another controller.
func (c *Controller) updateClaimsForRetention(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	log := klog.FromContext(ctx)
	ordinal := ordinalOf(pod)
	for i := range set.Spec.VolumeClaimTemplates {
		name := claimName(set, &set.Spec.VolumeClaimTemplates[i], ordinal)
		claim, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(name)
		switch {
		case apierrors.IsNotFound(err):
			log.V(4).Info("Expected claim missing, continuing to pick up in next iteration", "claim", name)
		case err != nil:
			//lint:ignore ST1005 upstream's message, which FailedUpdate events carry
			return fmt.Errorf("Could not retrieve claim %s not found for %s when checking PVC deletion policy: %w", name, pod.Name, err)
		default:
			if hasUnexpectedController(claim, set, pod) {
				// Upstream's message, its typo included.
				c.recorder.Event(set, corev1.EventTypeWarning, ReasonConflictingController, fmt.Sprintf(
					"PersistentVolumeClaim %s has a conflicting OwnerReference that acts as a manging controller, the retention policy is ignored for this claim", name))
			}
			if !claimOwnerUpToDate(log, claim, set, pod) {
				claim = claim.DeepCopy()
				setClaimOwnerRefs(log, claim, set, pod)
				updated, err := c.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Update(ctx, claim, metav1.UpdateOptions{})
				if err != nil {
					return fmt.Errorf("could not update claim %s for delete policy ownerRefs: %w", name, err)
				}
				c.consistency.Wrote(keyOf(set), set.UID, claimsResource, updated.ResourceVersion)
			}
		}
	}
	return nil
}

// podClaimIsStale reports whether, under a whenScaled Delete policy, a claim of the pod
// to be created still has a reference to an earlier pod of its name: the garbage
// collector is about to delete that claim, and the pod must wait for it to go.
func (c *Controller) podClaimIsStale(set *appsv1.StatefulSet, pod *corev1.Pod) (bool, error) {
	if retentionPolicy(set).WhenScaled == retain {
		return false, nil
	}
	for _, claim := range claimsFor(set, pod) {
		pvc, err := c.pvcLister.PersistentVolumeClaims(claim.Namespace).Get(claim.Name)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, err
		case hasStaleOwnerRef(pvc, pod, podKind):
			return true, nil
		}
	}
	return false, nil
}

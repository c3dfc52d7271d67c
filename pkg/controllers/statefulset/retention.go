package statefulset

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// The persistentVolumeClaimRetentionPolicy is carried out by owner references the
// garbage collector acts on:
//
//	whenScaled Retain, whenDeleted Retain: no reference of the set or pod
//	whenScaled Retain, whenDeleted Delete: the set controls the claim
//	whenScaled Delete, whenDeleted Retain: the pod controls the claim once it is scaled down
//	whenScaled Delete, whenDeleted Delete: the set controls it, the pod instead once scaled down

const (
	retain = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	del    = appsv1.DeletePersistentVolumeClaimRetentionPolicyType
)

// retentionPolicy returns the set's policy, Retain/Retain when it has none.
func retentionPolicy(set *appsv1.StatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	if set.Spec.PersistentVolumeClaimRetentionPolicy != nil {
		return *set.Spec.PersistentVolumeClaimRetentionPolicy
	}
	return appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: retain, WhenScaled: retain}
}

// matchesRef reports whether ref names obj of kind gvk (by name, not UID).
func matchesRef(ref *metav1.OwnerReference, obj metav1.Object, gvk schema.GroupVersionKind) bool {
	return ref.APIVersion == gvk.GroupVersion().String() && ref.Kind == gvk.Kind && ref.Name == obj.GetName()
}

// hasUnexpectedController reports whether, under a policy that deletes, the claim has a
// controller other than the set and pod, or a reference to a namesake of either with
// another UID (left by an earlier set or pod): such a claim is left to its controller.
func hasUnexpectedController(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	p := retentionPolicy(set)
	if p.WhenScaled == retain && p.WhenDeleted == retain {
		return false
	}
	for i := range claim.OwnerReferences {
		ref := &claim.OwnerReferences[i]
		if matchesRef(ref, set, controllerKind) {
			if ref.UID != set.UID {
				return true
			}
			continue
		}
		if matchesRef(ref, pod, podKind) {
			if ref.UID != pod.UID {
				return true
			}
			continue
		}
		if ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// hasNonControllerOwner reports whether the set or pod owns the claim without being its
// controller.
func hasNonControllerOwner(claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	for _, ref := range claim.OwnerReferences {
		if (ref.UID == set.UID || ref.UID == pod.UID) && (ref.Controller == nil || !*ref.Controller) {
			return true
		}
	}
	return false
}

// hasOwnerRef reports whether target has a reference to owner's UID.
func hasOwnerRef(target, owner metav1.Object) bool {
	for _, ref := range target.GetOwnerReferences() {
		if ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// hasStaleOwnerRef reports whether the claim's first reference naming obj has another
// UID: an earlier namesake of obj.
func hasStaleOwnerRef(claim *corev1.PersistentVolumeClaim, obj metav1.Object, gvk schema.GroupVersionKind) bool {
	for i := range claim.OwnerReferences {
		if matchesRef(&claim.OwnerReferences[i], obj, gvk) {
			return claim.OwnerReferences[i].UID != obj.GetUID()
		}
	}
	return false
}

// claimOwnerUpToDate reports whether the claim's references agree with the set's policy
// for the pod. A claim with stale references, or under a foreign controller without ours,
// counts as up to date: it is not touched.
func claimOwnerUpToDate(log klog.Logger, claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) bool {
	if hasStaleOwnerRef(claim, set, controllerKind) || hasStaleOwnerRef(claim, pod, podKind) {
		return true
	}
	if hasUnexpectedController(claim, set, pod) {
		// Our references must go; without them there is nothing to do.
		return !hasOwnerRef(claim, set) && !hasOwnerRef(claim, pod)
	}
	if hasNonControllerOwner(claim, set, pod) {
		return false
	}
	p := retentionPolicy(set)
	scaledDown := !inOrdinalRange(pod, set)
	switch {
	case p.WhenScaled == retain && p.WhenDeleted == del:
		return hasOwnerRef(claim, set) && !hasOwnerRef(claim, pod)
	case p.WhenScaled == del && p.WhenDeleted == retain:
		return !hasOwnerRef(claim, set) && scaledDown == hasOwnerRef(claim, pod)
	case p.WhenScaled == del && p.WhenDeleted == del:
		return scaledDown != hasOwnerRef(claim, set) && scaledDown == hasOwnerRef(claim, pod)
	case p.WhenScaled == retain && p.WhenDeleted == retain:
	default:
		log.Error(nil, "Unknown policy, treating as Retain", "policy", set.Spec.PersistentVolumeClaimRetentionPolicy)
	}
	return !hasOwnerRef(claim, set) && !hasOwnerRef(claim, pod)
}

// setClaimOwnerRefs rewrites the claim's references to the set and pod as the policy
// wants them (none at all while it has a foreign controller).
func setClaimOwnerRefs(log klog.Logger, claim *corev1.PersistentVolumeClaim, set *appsv1.StatefulSet, pod *corev1.Pod) {
	unexpected := hasUnexpectedController(claim, set, pod)
	refs := []metav1.OwnerReference{}
	for _, ref := range claim.OwnerReferences {
		if !matchesRef(&ref, set, controllerKind) && !matchesRef(&ref, pod, podKind) {
			refs = append(refs, ref)
		}
	}
	if !unexpected {
		p := retentionPolicy(set)
		scaledDown := !inOrdinalRange(pod, set)
		switch {
		case p.WhenScaled == retain && p.WhenDeleted == retain:
		case p.WhenScaled == retain && p.WhenDeleted == del:
			refs = addControllerRef(refs, set, controllerKind)
		case p.WhenScaled == del && p.WhenDeleted == retain:
			if scaledDown {
				refs = addControllerRef(refs, pod, podKind)
			}
		case p.WhenScaled == del && p.WhenDeleted == del:
			if scaledDown {
				refs = addControllerRef(refs, pod, podKind)
			} else {
				refs = addControllerRef(refs, set, controllerKind)
			}
		default:
			log.Error(nil, "Unknown policy, treating as Retain", "policy", set.Spec.PersistentVolumeClaimRetentionPolicy)
		}
	}
	claim.SetOwnerReferences(refs)
}

// addControllerRef appends owner as controller unless refs already name its UID.
func addControllerRef(refs []metav1.OwnerReference, owner metav1.Object, gvk schema.GroupVersionKind) []metav1.OwnerReference {
	for _, ref := range refs {
		if ref.UID == owner.GetUID() {
			return refs
		}
	}
	return append(refs, *metav1.NewControllerRef(owner, gvk))
}

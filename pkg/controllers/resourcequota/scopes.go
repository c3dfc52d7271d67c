package resourcequota

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

// scopeSelector turns one scope selector requirement into a label selector over the
// scope's name, the way upstream matches PriorityClass and VolumeAttributesClass values
// (a pod is the label set {PriorityClass: its class}).
func scopeSelector(r corev1.ScopedResourceSelectorRequirement) (labels.Selector, error) {
	var op selection.Operator
	switch r.Operator {
	case corev1.ScopeSelectorOpIn:
		op = selection.In
	case corev1.ScopeSelectorOpNotIn:
		op = selection.NotIn
	case corev1.ScopeSelectorOpExists:
		op = selection.Exists
	case corev1.ScopeSelectorOpDoesNotExist:
		op = selection.DoesNotExist
	default:
		return nil, fmt.Errorf("%q is not a valid scope selector operator", r.Operator)
	}
	req, err := labels.NewRequirement(string(r.ScopeName), op, r.Values)
	if err != nil {
		return nil, err
	}
	return labels.NewSelector().Add(*req), nil
}

// podMatchesScope reports whether a pod is in a quota scope. Scopes that do not apply to
// pods match nothing.
func podMatchesScope(s corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return false, fmt.Errorf("expect *v1.Pod, got %T", obj)
	}
	switch s.ScopeName {
	case corev1.ResourceQuotaScopeTerminating:
		return isTerminating(pod), nil
	case corev1.ResourceQuotaScopeNotTerminating:
		return !isTerminating(pod), nil
	case corev1.ResourceQuotaScopeBestEffort:
		return podQOS(pod) == corev1.PodQOSBestEffort, nil
	case corev1.ResourceQuotaScopeNotBestEffort:
		return podQOS(pod) != corev1.PodQOSBestEffort, nil
	case corev1.ResourceQuotaScopePriorityClass:
		if s.Operator == corev1.ScopeSelectorOpExists {
			return pod.Spec.PriorityClassName != "", nil
		}
		sel, err := scopeSelector(s)
		if err != nil {
			return false, fmt.Errorf("failed to parse and convert selector: %w", err)
		}
		var set labels.Set
		if pod.Spec.PriorityClassName != "" {
			set = labels.Set{string(corev1.ResourceQuotaScopePriorityClass): pod.Spec.PriorityClassName}
		}
		return sel.Matches(set), nil
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return usesCrossNamespaceAffinity(pod), nil
	}
	return false, nil
}

// isTerminating reports whether a pod has an active deadline: the Terminating scope.
func isTerminating(pod *corev1.Pod) bool {
	return pod.Spec.ActiveDeadlineSeconds != nil && *pod.Spec.ActiveDeadlineSeconds >= 0
}

// podQOS is the pod's QoS class: its status's, or computed as the API server does
// (pod-level resources first, where set).
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	if pod.Spec.Resources != nil && resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsQOS(pod.Spec.Resources)
	}
	var class corev1.PodQOSClass
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			switch q := requirementsQOS(&cs[i].Resources); {
			case q == corev1.PodQOSBurstable:
				return q
			case class == "":
				class = q
			case class != q:
				return corev1.PodQOSBurstable
			}
		}
	}
	if class == "" {
		return corev1.PodQOSBestEffort
	}
	return class
}

// requirementsQOS is the QoS class of one set of requests and limits: BestEffort when
// neither is set or cpu and memory have neither, Guaranteed when both have equal requests
// and limits, Burstable otherwise.
func requirementsQOS(r *corev1.ResourceRequirements) corev1.PodQOSClass {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	var class corev1.PodQOSClass
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := r.Requests[name], r.Limits[name]
		var q corev1.PodQOSClass
		switch {
		case !req.Equal(lim):
			return corev1.PodQOSBurstable
		case req.IsZero():
			q = corev1.PodQOSBestEffort
		default:
			q = corev1.PodQOSGuaranteed
		}
		if class == "" {
			class = q
		} else if class != q {
			return corev1.PodQOSBurstable
		}
	}
	return class
}

// usesCrossNamespaceAffinity reports whether any pod (anti-)affinity term of the pod
// names namespaces or has a namespace selector.
func usesCrossNamespaceAffinity(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	cross := func(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) bool {
		for _, t := range required {
			if len(t.Namespaces) != 0 || t.NamespaceSelector != nil {
				return true
			}
		}
		for _, w := range preferred {
			if len(w.PodAffinityTerm.Namespaces) != 0 || w.PodAffinityTerm.NamespaceSelector != nil {
				return true
			}
		}
		return false
	}
	if pa := a.PodAffinity; pa != nil && cross(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	if pa := a.PodAntiAffinity; pa != nil && cross(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution) {
		return true
	}
	return false
}

// pvcMatchesScope reports whether a PVC is in a quota scope: only VolumeAttributesClass
// applies, matched against every class the claim refers to (spec, status, and the target
// of a modification in progress).
func pvcMatchesScope(s corev1.ScopedResourceSelectorRequirement, obj runtime.Object) (bool, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return false, fmt.Errorf("expect *v1.PersistentVolumeClaim, got %T", obj)
	}
	if s.ScopeName != corev1.ResourceQuotaScopeVolumeAttributesClass {
		return false, nil
	}
	names := volumeAttributesClasses(pvc)
	if s.Operator == corev1.ScopeSelectorOpExists {
		return names.Len() != 0, nil
	}
	sel, err := scopeSelector(s)
	if err != nil {
		return false, fmt.Errorf("failed to parse and convert selector: %w", err)
	}
	if names.Len() == 0 {
		return sel.Matches(labels.Set{}), nil
	}
	for n := range names {
		if sel.Matches(labels.Set{string(corev1.ResourceQuotaScopeVolumeAttributesClass): n}) {
			return true, nil
		}
	}
	return false, nil
}

// volumeAttributesClasses are the VolumeAttributesClass names a PVC refers to.
func volumeAttributesClasses(pvc *corev1.PersistentVolumeClaim) sets.Set[string] {
	out := sets.New[string]()
	if n := ptr.Deref(pvc.Spec.VolumeAttributesClassName, ""); n != "" {
		out.Insert(n)
	}
	if n := ptr.Deref(pvc.Status.CurrentVolumeAttributesClassName, ""); n != "" {
		out.Insert(n)
	}
	if m := pvc.Status.ModifyVolumeStatus; m != nil && m.TargetVolumeAttributesClassName != "" {
		out.Insert(m.TargetVolumeAttributesClassName)
	}
	return out
}

package resourcequota

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"
)

// podCountName is the object count of pods, which counts every pod, terminal or not.
var podCountName = generic.ObjectCountQuotaResourceNameFor(pods.GroupResource())

// podResourceNames are the fixed resource names of a pod's usage.
var podResourceNames = []corev1.ResourceName{
	podCountName,
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
	corev1.ResourcePods,
}

// podResourcePrefixes are the prefixes of a pod's hugepages usage names.
var podResourcePrefixes = []string{corev1.ResourceHugePagesPrefix, corev1.ResourceRequestsHugePagesPrefix}

// implicitExtendedPrefix is the quota name prefix of a device class's implicit extended
// resource ("requests.deviceclass.resource.kubernetes.io/<class>").
const implicitExtendedPrefix = corev1.DefaultResourceRequestsPrefix + resourceapi.ResourceDeviceClassPrefix

func newPodEvaluator(list generic.ListFuncByNamespace, clk clock.PassiveClock) *evaluator {
	return &evaluator{
		gr:    pods.GroupResource(),
		list:  list,
		scope: podMatchesScope,
		matching: func(input []corev1.ResourceName) []corev1.ResourceName {
			out := quota.Intersection(input, podResourceNames)
			for _, name := range input {
				if quota.ContainsPrefix(podResourcePrefixes, name) || isExtendedQuotaName(name) {
					out = append(out, name)
				}
			}
			return out
		},
		usage: func(obj runtime.Object) (corev1.ResourceList, error) { return podUsage(obj, clk) },
	}
}

// isExtendedQuotaName reports whether a quota resource name is the request of an extended
// resource ("requests.example.com/gpu"), or of a device class's implicit extended
// resource: extended resources are quota'd by request only, as they cannot be
// overcommitted.
func isExtendedQuotaName(name corev1.ResourceName) bool {
	return (!isNativeResource(name) || strings.HasPrefix(string(name), implicitExtendedPrefix)) &&
		strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix)
}

// isNativeResource reports whether a resource name is in the kubernetes.io/ namespace
// (unprefixed names are).
func isNativeResource(name corev1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.Contains(string(name), corev1.ResourceDefaultNamespacePrefix)
}

// isExtendedResource reports whether a container resource name is an extended resource
// (outside kubernetes.io/, and a valid quota name once prefixed with "requests.").
func isExtendedResource(name corev1.ResourceName) bool {
	if isNativeResource(name) || strings.HasPrefix(string(name), corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+string(name))) == 0
}

// isDRAExtendedResource reports whether a container resource name is quota'd as
// "requests.<name>": an extended resource, or a device class's implicit one.
func isDRAExtendedResource(name corev1.ResourceName) bool {
	return isExtendedResource(name) || strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix)
}

// podUsage is a pod's usage: it counts as count/pods always, and uses compute resources
// and counts as pods only while it is not terminal.
func podUsage(obj runtime.Object, clk clock.PassiveClock) (corev1.ResourceList, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return corev1.ResourceList{}, fmt.Errorf("expect *v1.Pod, got %T", obj)
	}
	out := corev1.ResourceList{podCountName: *resource.NewQuantity(1, resource.DecimalSI)}
	if !countsAsPod(pod, clk) {
		return out, nil
	}
	// In-place resize and pod-level resources are on by default in 1.37: a pod uses what
	// its status says it was given where that is more than its spec.
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true}
	requests := resourcehelper.PodRequests(pod, opts)
	limits := resourcehelper.PodLimits(pod, opts)
	return quota.Add(out, computeUsage(requests, limits)), nil
}

// computeUsage maps a pod's requests and limits to quota resource names.
func computeUsage(requests, limits corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	for _, r := range []struct {
		name, request, limit corev1.ResourceName // the bare name is the request too
	}{
		{corev1.ResourceCPU, corev1.ResourceRequestsCPU, corev1.ResourceLimitsCPU},
		{corev1.ResourceMemory, corev1.ResourceRequestsMemory, corev1.ResourceLimitsMemory},
		{corev1.ResourceEphemeralStorage, corev1.ResourceRequestsEphemeralStorage, corev1.ResourceLimitsEphemeralStorage},
	} {
		if q, ok := requests[r.name]; ok {
			out[r.name] = q
			out[r.request] = q
		}
		if q, ok := limits[r.name]; ok {
			out[r.limit] = q
		}
	}
	for name, q := range requests {
		if strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
			out[name] = q
			out[corev1.DefaultResourceRequestsPrefix+name] = q
		}
		if isDRAExtendedResource(name) {
			out[corev1.DefaultResourceRequestsPrefix+name] = q
		}
	}
	return out
}

// countsAsPod reports whether a pod still uses its resources: it is not terminal
// (Succeeded, Failed), and not past its deletion grace period.
func countsAsPod(pod *corev1.Pod, clk clock.PassiveClock) bool {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if pod.DeletionTimestamp != nil && pod.DeletionGracePeriodSeconds != nil {
		grace := time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		if clk.Now().After(pod.DeletionTimestamp.Add(grace)) {
			return false
		}
	}
	return true
}

// podUpdateReplenishes reports whether a pod's update changes what quotas count: its
// resources were resized, it entered or left the Terminating scope, or it stopped using
// resources (became terminal, or passed its deletion grace period).
func podUpdateReplenishes(old, cur *corev1.Pod, clk clock.PassiveClock) bool {
	if resized(old.Status.ContainerStatuses, cur.Status.ContainerStatuses) ||
		resized(old.Status.InitContainerStatuses, cur.Status.InitContainerStatuses) {
		return true
	}
	if isTerminating(old) != isTerminating(cur) {
		return true
	}
	return countsAsPod(old, clk) && !countsAsPod(cur, clk)
}

// resized reports whether a container present in both lists has other resources in cur.
func resized(old, cur []corev1.ContainerStatus) bool {
	for _, o := range old {
		for _, c := range cur {
			if c.Name == o.Name {
				if !apiequality.Semantic.DeepEqual(o.Resources, c.Resources) {
					return true
				}
				break
			}
		}
	}
	return false
}

package resourcequota

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

type claimOpt func(*resourceapi.ResourceClaim)

// newClaim is a claim of namespace ns created at t0.
func newClaim(name string, opts ...claimOpt) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
		CreationTimestamp: metav1.NewTime(t0)}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// exactly adds a request of count devices of class.
func exactly(class string, mode resourceapi.DeviceAllocationMode, count int64) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "r",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}})
	}
}

// firstAvailable adds a request with alternatives of count devices of each class.
func firstAvailable(alts ...resourceapi.DeviceSubRequest) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "r", FirstAvailable: alts})
	}
}

func sub(class string, count int64) resourceapi.DeviceSubRequest {
	return resourceapi.DeviceSubRequest{Name: class, DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
}

// forPod marks the claim as made by the scheduler for pod's extended resources.
func forPod(pod *corev1.Pod) claimOpt {
	return func(c *resourceapi.ResourceClaim) {
		c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	}
}

func createdAt(t time.Time) claimOpt {
	return func(c *resourceapi.ResourceClaim) { c.CreationTimestamp = metav1.NewTime(t) }
}

// deviceClass is a device class providing extended resource ext ("" for none).
func deviceClass(name, ext string) *resourceapi.DeviceClass {
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if ext != "" {
		dc.Spec.ExtendedResourceName = ptr.To(ext)
	}
	return dc
}

func TestClaimUsage(t *testing.T) {
	const (
		gpuDevices = "gpu.deviceclass.resource.k8s.io/devices"
		tpuDevices = "tpu.deviceclass.resource.k8s.io/devices"
		implicit   = "requests.deviceclass.resource.kubernetes.io/gpu"
		explicit   = "requests.example.com/gpu"
	)
	gpuPod := newPod("p", resources(list("example.com/gpu", "1"), list("example.com/gpu", "1")), func(p *corev1.Pod) { p.UID = "uid-p" })
	for _, tc := range []usageCase{
		{name: "count and devices per class; of alternatives, the most of each class",
			hard: list("count/resourceclaims.resource.k8s.io", "10", gpuDevices, "10", tpuDevices, "10"),
			objs: []runtime.Object{newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 2)),
				newClaim("b", firstAvailable(sub("gpu", 1), sub("gpu", 3), sub("tpu", 1)))},
			want: list("count/resourceclaims.resource.k8s.io", "2", gpuDevices, "5", tpuDevices, "1")},
		{name: "all devices: the most an allocation holds", hard: list(gpuDevices, "100"),
			objs: []runtime.Object{newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeAll, 0))},
			want: list(gpuDevices, "32")},
		{name: "claims of other namespaces do not count", hard: list(gpuDevices, "100"),
			objs: []runtime.Object{newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 1), func(c *resourceapi.ResourceClaim) { c.Namespace = "other" })},
			want: list(gpuDevices, "0")},
		{name: "extended resources a device class provides, implicit and named", hard: list(implicit, "10", explicit, "10"),
			objs: []runtime.Object{deviceClass("gpu", "example.com/gpu"), newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 2))},
			want: list(implicit, "2", explicit, "2")},
		{name: "the implicit extended resource of a class without a name", hard: list(implicit, "10"),
			objs: []runtime.Object{deviceClass("gpu", ""), newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 2))},
			want: list(implicit, "2")},
		{name: "a named extended resource no class provides: the pods' only", hard: list(explicit, "10"),
			objs: []runtime.Object{newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 2)), gpuPod},
			want: list(explicit, "1")},
		{name: "a pod's extended-resource claim does not count what the pod counts", hard: list(implicit, "10", explicit, "10"),
			objs: []runtime.Object{deviceClass("gpu", "example.com/gpu"), gpuPod,
				newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 1), forPod(gpuPod))},
			want: list(implicit, "1", explicit, "1")},
		{name: "a claim the pod's status does not name counts in full", hard: list(explicit, "10"),
			objs: []runtime.Object{deviceClass("gpu", "example.com/gpu"),
				newPod("p", resources(list("example.com/gpu", "1"), nil), func(p *corev1.Pod) {
					p.UID = "uid-p"
					p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "other"}
				}),
				newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 1), forPod(gpuPod))},
			want: list(explicit, "2")},
		{name: "before the pod names one, only its oldest claim is the pod's", hard: list(explicit, "10"),
			objs: []runtime.Object{deviceClass("gpu", "example.com/gpu"), gpuPod,
				newClaim("old", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 1), forPod(gpuPod), createdAt(t0.Add(-time.Minute))),
				newClaim("new", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 1), forPod(gpuPod))},
			want: list(explicit, "2")},
		{name: "a claim of another pod of the same name counts in full", hard: list(explicit, "10"),
			objs: []runtime.Object{deviceClass("gpu", "example.com/gpu"), gpuPod,
				newClaim("a", exactly("gpu", resourceapi.DeviceAllocationModeExactCount, 1), forPod(gpuPod), func(c *resourceapi.ResourceClaim) {
					c.OwnerReferences[0].UID = types.UID("uid-old-p")
				})},
			want: list(explicit, "2")},
	} {
		t.Run(tc.name, func(t *testing.T) { runUsage(t, tc) })
	}
}

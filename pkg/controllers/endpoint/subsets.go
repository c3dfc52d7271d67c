//lint:file-ignore SA1019 kube-controller-manager's Endpoints controller writes core/v1 Endpoints, deprecated in favour of EndpointSlices but still on by default upstream.
package endpoint

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/conversion"
	endpointsliceutil "k8s.io/endpointslice/util"
	utilnet "k8s.io/utils/net"
)

// podAddress returns the pod's address for svc: its first IP of the Service's IP family
// (the first of spec.ipFamilies; inferred from the cluster IP, else from the pod's IP,
// when ipFamilies is empty, as a Service seen before defaulting may be), normalised.
func podAddress(svc *corev1.Service, pod *corev1.Pod) (corev1.EndpointAddress, error) {
	wantIPv6 := false
	switch {
	case len(svc.Spec.IPFamilies) > 0:
		wantIPv6 = svc.Spec.IPFamilies[0] == corev1.IPv6Protocol
	case svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone:
		wantIPv6 = utilnet.IsIPv6String(svc.Spec.ClusterIP)
	default:
		wantIPv6 = utilnet.IsIPv6String(pod.Status.PodIP)
	}
	for _, podIP := range pod.Status.PodIPs {
		ip := utilnet.ParseIPSloppy(podIP.IP)
		if utilnet.IsIPv6(ip) == wantIPv6 {
			return corev1.EndpointAddress{
				IP:       ip.String(),
				NodeName: &pod.Spec.NodeName,
				TargetRef: &corev1.ObjectReference{
					Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
				},
			}, nil
		}
	}
	return corev1.EndpointAddress{}, fmt.Errorf("failed to find a matching endpoint for service %v", svc.Name)
}

// oneAddressSubset returns a subset of the pod's one address and port (none when port is
// nil): a ready address when the pod is Ready or the Service publishes not-ready
// addresses, a not-ready one otherwise.
func oneAddressSubset(pod *corev1.Pod, addr corev1.EndpointAddress, port *corev1.EndpointPort, publishNotReady bool) (subset corev1.EndpointSubset, ready bool) {
	subset.Ports = []corev1.EndpointPort{}
	if port != nil {
		subset.Ports = append(subset.Ports, *port)
	}
	if publishNotReady || endpointsliceutil.IsPodReady(pod) {
		subset.Addresses = []corev1.EndpointAddress{addr}
		return subset, true
	}
	subset.NotReadyAddresses = []corev1.EndpointAddress{addr}
	return subset, false
}

// equalIgnoringRV compares subsets semantically (nil and empty equal), ignoring the
// resourceVersion of target references: a pod's unrelated change (an annotation) must not
// rewrite the Endpoints.
var equalIgnoringRV = conversion.EqualitiesOrDie(
	func(a, b corev1.ObjectReference) bool {
		a.ResourceVersion, b.ResourceVersion = "", ""
		return a == b
	},
)

func subsetsEqual(a, b []corev1.EndpointSubset) bool { return equalIgnoringRV.DeepEqual(a, b) }

package resourcequota

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	quota "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"
)

// serviceResourceNames are the resource names of a service's usage.
var serviceResourceNames = []corev1.ResourceName{
	generic.ObjectCountQuotaResourceNameFor(svcs.GroupResource()),
	corev1.ResourceServices,
	corev1.ResourceServicesNodePorts,
	corev1.ResourceServicesLoadBalancers,
}

func newServiceEvaluator(list generic.ListFuncByNamespace) *evaluator {
	return &evaluator{
		gr:    svcs.GroupResource(),
		list:  list,
		scope: generic.MatchesNoScopeFunc,
		matching: func(input []corev1.ResourceName) []corev1.ResourceName {
			return quota.Intersection(input, serviceResourceNames)
		},
		usage: serviceUsage,
	}
}

// serviceUsage is a service's usage: it counts as a service; a NodePort service uses a
// node port per port; a LoadBalancer service is a load balancer and uses a node port per
// port, or, when it does not allocate node ports, per port that has one set.
func serviceUsage(obj runtime.Object) (corev1.ResourceList, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return corev1.ResourceList{}, fmt.Errorf("expect *v1.Service, got %T", obj)
	}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	out := corev1.ResourceList{
		serviceResourceNames[0]:              one,
		corev1.ResourceServices:              one,
		corev1.ResourceServicesLoadBalancers: {Format: resource.DecimalSI},
		corev1.ResourceServicesNodePorts:     {Format: resource.DecimalSI},
	}
	ports := int64(len(svc.Spec.Ports))
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(ports, resource.DecimalSI)
	case corev1.ServiceTypeLoadBalancer:
		if svc.Spec.AllocateLoadBalancerNodePorts != nil && !*svc.Spec.AllocateLoadBalancerNodePorts {
			ports = 0
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					ports++
				}
			}
		}
		out[corev1.ResourceServicesNodePorts] = *resource.NewQuantity(ports, resource.DecimalSI)
		out[corev1.ResourceServicesLoadBalancers] = one
	}
	return out, nil
}

// quotaServiceType is the service type as quota sees it: NodePort, LoadBalancer, or
// neither ("").
func quotaServiceType(svc *corev1.Service) corev1.ServiceType {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		return svc.Spec.Type
	}
	return ""
}

package resourcequota

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// newService is a service of namespace ns of type typ, with one port per nodePorts entry
// (0: no node port set).
func newService(name string, typ corev1.ServiceType, nodePorts ...int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: corev1.ServiceSpec{Type: typ}}
	for i, np := range nodePorts {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: int32(80 + i), NodePort: np})
	}
	return s
}

func noNodePorts(s *corev1.Service) *corev1.Service {
	s.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
	return s
}

func TestServiceUsage(t *testing.T) {
	hard := list("services", "10", "count/services", "10", "services.loadbalancers", "10", "services.nodeports", "10")
	for _, tc := range []usageCase{
		{name: "none", hard: hard,
			want: list("services", "0", "count/services", "0", "services.loadbalancers", "0", "services.nodeports", "0")},
		{name: "ClusterIP: a service only", hard: hard, objs: []runtime.Object{newService("a", corev1.ServiceTypeClusterIP, 0, 0)},
			want: list("services", "1", "count/services", "1", "services.loadbalancers", "0", "services.nodeports", "0")},
		{name: "NodePort: a node port per port", hard: hard, objs: []runtime.Object{newService("a", corev1.ServiceTypeNodePort, 30001, 30002)},
			want: list("services", "1", "count/services", "1", "services.loadbalancers", "0", "services.nodeports", "2")},
		{name: "LoadBalancer: a load balancer and a node port per port", hard: hard,
			objs: []runtime.Object{newService("a", corev1.ServiceTypeLoadBalancer, 30001, 0, 0)},
			want: list("services", "1", "count/services", "1", "services.loadbalancers", "1", "services.nodeports", "3")},
		{name: "LoadBalancer without node port allocation: only the ports that have one", hard: hard,
			objs: []runtime.Object{noNodePorts(newService("a", corev1.ServiceTypeLoadBalancer, 30001, 0, 0))},
			want: list("services", "1", "count/services", "1", "services.loadbalancers", "1", "services.nodeports", "1")},
		{name: "ExternalName", hard: list("services", "10", "services.nodeports", "10"),
			objs: []runtime.Object{newService("a", corev1.ServiceTypeExternalName), newService("b", corev1.ServiceTypeNodePort, 30001)},
			want: list("services", "2", "services.nodeports", "1")},
		{name: "scopes never select services: nothing counted", hard: list("services", "10"), opts: []quotaOpt{scopes(corev1.ResourceQuotaScopeBestEffort)},
			objs: []runtime.Object{newService("a", corev1.ServiceTypeClusterIP)},
			want: list("services", "0")},
	} {
		t.Run(tc.name, func(t *testing.T) { runUsage(t, tc) })
	}
}

func TestServiceUpdateReplenishes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Service
		want     bool
	}{
		{name: "same type", old: newService("a", corev1.ServiceTypeClusterIP, 0), cur: newService("a", corev1.ServiceTypeClusterIP, 0, 0)},
		{name: "ClusterIP to ExternalName: neither counts", old: newService("a", corev1.ServiceTypeClusterIP), cur: newService("a", corev1.ServiceTypeExternalName)},
		{name: "NodePort to ClusterIP", old: newService("a", corev1.ServiceTypeNodePort, 30001), cur: newService("a", corev1.ServiceTypeClusterIP, 0), want: true},
		{name: "LoadBalancer to NodePort", old: newService("a", corev1.ServiceTypeLoadBalancer, 30001), cur: newService("a", corev1.ServiceTypeNodePort, 30001), want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			if got := f.ctrl.updateReplenishes(tc.old, tc.cur); got != tc.want {
				t.Errorf("replenishes %v, want %v", got, tc.want)
			}
		})
	}
}

//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	endpointsliceutil "k8s.io/endpointslice/util"
	netutils "k8s.io/utils/net"
)

// portKey identifies one group of mirrored slices: an address type and a set of ports
// (upstream's addrTypePortMapKey, "<addressType>-<hash of the sorted ports>"). An
// Endpoints subset's addresses of one type go into one slice of its key.
type portKey string

// newPortKey returns the key of ports and addrType. It sorts ports in place into the
// order upstream hashes them in, which is also the order of a mirrored slice's ports.
func newPortKey(ports []discoveryv1.EndpointPort, addrType discoveryv1.AddressType) portKey {
	return portKey(fmt.Sprintf("%s-%s", addrType, endpointsliceutil.NewPortMapKey(ports)))
}

// sliceKey returns the key of an existing slice, without reordering its (cached) ports.
func sliceKey(s *discoveryv1.EndpointSlice) portKey {
	var ports []discoveryv1.EndpointPort
	if s.Ports != nil {
		ports = slices.Clone(s.Ports)
	}
	return newPortKey(ports, s.AddressType)
}

// addressType returns the address type the key names.
func (k portKey) addressType() discoveryv1.AddressType {
	if strings.HasPrefix(string(k), string(discoveryv1.AddressTypeIPv6)) {
		return discoveryv1.AddressTypeIPv6
	}
	return discoveryv1.AddressTypeIPv4
}

// endpointsKind is the kind of a mirrored slice's owner.
var endpointsKind = corev1.SchemeGroupVersion.WithKind("Endpoints")

// newSlice returns the slice to write for ep's addresses of addrType with ports: owned by
// ep (a controller reference), labelled with ep's labels plus the service name and this
// controller as its manager, annotated with ep's annotations except the last change
// trigger time and kubectl's last applied configuration. name is the existing slice to
// update; "" creates one, named by the API server after the Endpoints.
func newSlice(ep *corev1.Endpoints, ports []discoveryv1.EndpointPort, addrType discoveryv1.AddressType, name string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       ep.Namespace,
			Labels:          map[string]string{},
			Annotations:     map[string]string{},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ep, endpointsKind)},
		},
		AddressType: addrType,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for k, v := range ep.Labels {
		s.Labels[k] = v
	}
	s.Labels[discoveryv1.LabelServiceName] = ep.Name
	s.Labels[discoveryv1.LabelManagedBy] = ControllerName
	for k, v := range ep.Annotations {
		if k == corev1.EndpointsLastChangeTriggerTime || k == corev1.LastAppliedConfigAnnotation {
			continue
		}
		s.Annotations[k] = v
	}
	if name == "" {
		s.GenerateName = namePrefix(ep.Name)
	} else {
		s.Name = name
	}
	return s
}

// namePrefix is the generateName of a mirrored slice: the Endpoints' name and a dash, or
// the name alone when the dash would make an invalid name.
func namePrefix(name string) string {
	prefix := name + "-"
	if len(apivalidation.NameIsDNSSubdomain(prefix, true)) != 0 {
		return name
	}
	return prefix
}

// addressToEndpoint returns the slice endpoint of an Endpoints address and its address
// type, or false for an address that is not an IP. The IP is written in its canonical form
// (an Endpoints may hold leading zeros, "010.0.0.1", which the parser reads as decimal).
func addressToEndpoint(a corev1.EndpointAddress, ready bool) (*discoveryv1.Endpoint, discoveryv1.AddressType, bool) {
	ip := netutils.ParseIPSloppy(a.IP)
	if ip == nil {
		return nil, "", false
	}
	addrType := discoveryv1.AddressTypeIPv4
	if ip.To4() == nil {
		addrType = discoveryv1.AddressTypeIPv6
	}
	e := &discoveryv1.Endpoint{
		Addresses:  []string{ip.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		TargetRef:  a.TargetRef,
		NodeName:   a.NodeName,
	}
	if a.Hostname != "" {
		e.Hostname = &a.Hostname
	}
	return e, addrType, true
}

// slicePorts returns the ports of an Endpoints subset as a slice's ports, each a copy.
func slicePorts(ports []corev1.EndpointPort) []discoveryv1.EndpointPort {
	out := []discoveryv1.EndpointPort{}
	for _, p := range ports {
		p := *p.DeepCopy()
		out = append(out, discoveryv1.EndpointPort{Name: &p.Name, Port: &p.Port, Protocol: &p.Protocol, AppProtocol: p.AppProtocol})
	}
	return out
}

// endpointsKeyOf returns the queue key of the Endpoints a slice names by its
// kubernetes.io/service-name label.
func endpointsKeyOf(s *discoveryv1.EndpointSlice) (string, error) {
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return "", errors.New("EndpointSlice has no " + discoveryv1.LabelServiceName + " label")
	}
	return keyOf(s.Namespace, name), nil
}

// without returns a copy of m without keys.
func without(m map[string]string, keys ...string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

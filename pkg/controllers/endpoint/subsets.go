package endpoint

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/types"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/utils/dump"
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

// noPort stands for "no ports" while repacking: a subset without ports keeps its
// addresses.
var noPort = corev1.EndpointPort{Port: -1}

// addrID identifies an address while repacking: the same IP with different pods (a
// runtime that gives pods the node's IP) are different addresses.
type addrID struct {
	ip  string
	uid types.UID
}

func idOf(a *corev1.EndpointAddress) addrID {
	id := addrID{ip: a.IP}
	if a.TargetRef != nil {
		id.uid = a.TargetRef.UID
	}
	return id
}

// repackSubsets returns subsets in the canonical form of upstream's RepackSubsets: every
// (address, port) pair expanded, an address not ready on a port when any subset says so,
// then one subset per distinct set of (address, readiness) with every port that set
// offers, addresses sorted by IP and pod UID, ports and subsets by upstream's hash
// order. The first occurrence of an address supplies its fields. The input is not
// changed.
func repackSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	addrs := map[addrID]*corev1.EndpointAddress{}
	// readyByPort is, per port, each address's readiness on it.
	readyByPort := map[corev1.EndpointPort]map[addrID]bool{}
	var portOrder []corev1.EndpointPort
	add := func(a *corev1.EndpointAddress, port corev1.EndpointPort, ready bool) {
		id := idOf(a)
		if _, ok := addrs[id]; !ok {
			cp := *a
			addrs[id] = &cp
		}
		set, ok := readyByPort[port]
		if !ok {
			set = map[addrID]bool{}
			readyByPort[port] = set
			portOrder = append(portOrder, port)
		}
		if was, seen := set[id]; !seen || was {
			set[id] = ready
		}
	}
	for i := range subsets {
		ports := subsets[i].Ports
		if len(ports) == 0 {
			ports = []corev1.EndpointPort{noPort}
		}
		for _, port := range ports {
			for j := range subsets[i].Addresses {
				add(&subsets[i].Addresses[j], port, true)
			}
			for j := range subsets[i].NotReadyAddresses {
				add(&subsets[i].NotReadyAddresses[j], port, false)
			}
		}
	}
	// Group the ports by the exact set of (address, readiness) they are offered on.
	type group struct {
		set   map[addrID]bool
		ports []corev1.EndpointPort
	}
	groups := map[string]*group{}
	var groupOrder []string
	for _, port := range portOrder {
		set := readyByPort[port]
		k := setKey(set)
		g, ok := groups[k]
		if !ok {
			g = &group{set: set}
			groups[k] = g
			groupOrder = append(groupOrder, k)
		}
		if port != noPort {
			g.ports = append(g.ports, port)
		}
	}
	out := make([]corev1.EndpointSubset, 0, len(groups))
	for _, k := range groupOrder {
		g := groups[k]
		var s corev1.EndpointSubset
		for id, ready := range g.set {
			if ready {
				s.Addresses = append(s.Addresses, *addrs[id])
			} else {
				s.NotReadyAddresses = append(s.NotReadyAddresses, *addrs[id])
			}
		}
		s.Ports = g.ports
		out = append(out, s)
	}
	return sortSubsets(out)
}

// setKey is a canonical string of a set of (address, readiness).
func setKey(set map[addrID]bool) string {
	parts := make([]string, 0, len(set))
	for id, ready := range set {
		parts = append(parts, fmt.Sprintf("%s\x00%s\x00%t", id.ip, id.uid, ready))
	}
	slices.Sort(parts)
	return strings.Join(parts, "\x01")
}

// sortSubsets sorts each subset's addresses by IP then pod UID and its ports by hash,
// and the subsets by hash, in place, as upstream's SortSubsets (so that the order, and
// with it the stored object, is upstream's); it returns subsets.
func sortSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	for i := range subsets {
		s := &subsets[i]
		slices.SortFunc(s.Addresses, compareAddresses)
		slices.SortFunc(s.NotReadyAddresses, compareAddresses)
		sortByHash(s.Ports)
	}
	sortByHash(subsets)
	return subsets
}

// compareAddresses orders addresses by IP (bytewise), then by target pod UID, an address
// without a target first.
func compareAddresses(a, b corev1.EndpointAddress) int {
	if c := strings.Compare(a.IP, b.IP); c != 0 {
		return c
	}
	switch {
	case a.TargetRef == nil && b.TargetRef == nil:
		return 0
	case a.TargetRef == nil:
		return -1
	case b.TargetRef == nil:
		return 1
	}
	return strings.Compare(string(a.TargetRef.UID), string(b.TargetRef.UID))
}

// sortByHash sorts items by the 128-bit FNV-1a of their deep dump (k8s.io/utils/dump's
// ForHash), upstream's order for ports and subsets.
func sortByHash[T any](items []T) {
	if len(items) < 2 {
		return
	}
	hashes := make(map[int][]byte, len(items))
	idx := make([]int, len(items))
	for i := range items {
		h := fnv.New128a()
		_, _ = fmt.Fprintf(h, "%v", dump.ForHash(items[i]))
		hashes[i] = h.Sum(nil)
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(hashes[a], hashes[b]) })
	sorted := make([]T, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
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

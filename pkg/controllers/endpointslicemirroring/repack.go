//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/dump"
)

// repackSubsets returns subsets in their canonical form, as kube-controller-manager's
// RepackSubsets (k8s.io/kubernetes/pkg/api/v1/endpoints) gives it: each address once (by
// IP and target UID; the first occurrence's fields kept), not ready on a port if any
// subset lists it not ready there; one subset per distinct set of (address, ready) with
// every port that set serves (a subset without ports keeps its addresses); addresses
// sorted by IP then target UID, ports and subsets by upstream's hash of their content. The
// order matters: the mirroring controller keeps the first addresses of a subset that is
// over its limit, so kshard keeps the ones upstream keeps.
func repackSubsets(subsets []corev1.EndpointSubset) []corev1.EndpointSubset {
	all := map[addressKey]*corev1.EndpointAddress{}
	// A port with Port -1 stands for "no ports", so addresses of a subset without
	// ports are kept. Ports are map keys as upstream's are: by value, their AppProtocol
	// pointer included.
	byPort := map[corev1.EndpointPort]map[*corev1.EndpointAddress]bool{}
	for i := range subsets {
		ports := subsets[i].Ports
		if len(ports) == 0 {
			ports = []corev1.EndpointPort{{Port: -1}}
		}
		for _, p := range ports {
			for k := range subsets[i].Addresses {
				mapAddress(&subsets[i].Addresses[k], p, true, all, byPort)
			}
			for k := range subsets[i].NotReadyAddresses {
				mapAddress(&subsets[i].NotReadyAddresses[k], p, false, all, byPort)
			}
		}
	}

	// Group the ports by the set of addresses (with readiness) they serve.
	sets := map[string]map[*corev1.EndpointAddress]bool{}
	portsOf := map[string][]corev1.EndpointPort{}
	for p, addrs := range byPort {
		k := setKey(addrs)
		sets[k] = addrs
		if p.Port > 0 {
			portsOf[k] = append(portsOf[k], p)
		} else if _, ok := portsOf[k]; !ok {
			portsOf[k] = nil
		}
	}
	out := []corev1.EndpointSubset{}
	for k, ports := range portsOf {
		var ready, notReady []corev1.EndpointAddress
		for a, r := range sets[k] {
			if r {
				ready = append(ready, *a)
			} else {
				notReady = append(notReady, *a)
			}
		}
		out = append(out, corev1.EndpointSubset{Addresses: ready, NotReadyAddresses: notReady, Ports: ports})
	}
	for i := range out {
		sort.Slice(out[i].Addresses, func(a, b int) bool { return lessAddress(&out[i].Addresses[a], &out[i].Addresses[b]) })
		sort.Slice(out[i].NotReadyAddresses, func(a, b int) bool {
			return lessAddress(&out[i].NotReadyAddresses[a], &out[i].NotReadyAddresses[b])
		})
		sortByHash(out[i].Ports)
	}
	sortByHash(out)
	return out
}

// addressKey identifies an address: two entries with one IP are distinct addresses when
// they target different objects.
type addressKey struct {
	ip  string
	uid types.UID
}

// mapAddress records that addr serves port, ready or not: the address under its key (the
// first one seen), and its readiness on the port, where not ready wins.
func mapAddress(addr *corev1.EndpointAddress, port corev1.EndpointPort, ready bool,
	all map[addressKey]*corev1.EndpointAddress, byPort map[corev1.EndpointPort]map[*corev1.EndpointAddress]bool) {
	key := addressKey{ip: addr.IP}
	if addr.TargetRef != nil {
		key.uid = addr.TargetRef.UID
	}
	a := all[key]
	if a == nil {
		c := *addr
		a = &c
		all[key] = a
	}
	if byPort[port] == nil {
		byPort[port] = map[*corev1.EndpointAddress]bool{}
	}
	if was, ok := byPort[port][a]; !ok || was {
		byPort[port][a] = ready
	}
}

// setKey names a set of addresses with their readiness: equal sets, equal names.
func setKey(addrs map[*corev1.EndpointAddress]bool) string {
	type entry struct {
		a     *corev1.EndpointAddress
		ready bool
	}
	es := make([]entry, 0, len(addrs))
	for a, r := range addrs {
		es = append(es, entry{a, r})
	}
	sort.Slice(es, func(i, j int) bool { return lessAddress(es[i].a, es[j].a) })
	var b strings.Builder
	for _, e := range es {
		uid := types.UID("")
		if e.a.TargetRef != nil {
			uid = e.a.TargetRef.UID
		}
		fmt.Fprintf(&b, "%q %q %v\n", e.a.IP, uid, e.ready)
	}
	return b.String()
}

// lessAddress orders addresses by IP (as strings), then by target UID, one without a
// target first.
func lessAddress(a, b *corev1.EndpointAddress) bool {
	if c := strings.Compare(a.IP, b.IP); c != 0 {
		return c < 0
	}
	if b.TargetRef == nil {
		return false
	}
	if a.TargetRef == nil {
		return true
	}
	return a.TargetRef.UID < b.TargetRef.UID
}

// sortByHash sorts items by upstream's content hash (128-bit FNV-1a of the deep dump for
// hashing, k8s.io/utils/dump.ForHash), the order kube-controller-manager puts ports and
// subsets in.
func sortByHash[T any](items []T) {
	hashes := make(map[int][]byte, len(items))
	idx := make([]int, len(items))
	for i := range items {
		idx[i] = i
		h := fnv.New128a()
		fmt.Fprintf(h, "%v", dump.ForHash(items[i]))
		hashes[i] = h.Sum(nil)
	}
	sort.Slice(idx, func(a, b int) bool { return bytes.Compare(hashes[idx[a]], hashes[idx[b]]) < 0 })
	sorted := make([]T, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
}

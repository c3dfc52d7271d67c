//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// actions are the slices a reconcile creates, updates and deletes.
type actions struct {
	create, update, remove []*discoveryv1.EndpointSlice
}

func (a *actions) append(b actions) {
	a.create = append(a.create, b.create...)
	a.update = append(a.update, b.update...)
	a.remove = append(a.remove, b.remove...)
}

// totals count the endpoints a reconcile adds, changes and removes (the *_per_sync
// histograms).
type totals struct {
	added, updated, removed int
}

func (t *totals) add(o totals) {
	t.added += o.added
	t.updated += o.updated
	t.removed += o.removed
}

// desired is the mirrored state an Endpoints asks for: per port key, its ports and its
// endpoints.
type desired struct {
	ports     map[portKey][]discoveryv1.EndpointPort
	endpoints map[portKey]endpointsliceutil.EndpointSet
}

func newDesired() *desired {
	return &desired{ports: map[portKey][]discoveryv1.EndpointPort{}, endpoints: map[portKey]endpointsliceutil.EndpointSet{}}
}

// subsetKeys are the port keys of one subset, by address type.
type subsetKeys map[discoveryv1.AddressType]portKey

// addSubsetPorts registers a subset's ports under both address types (a subset of one
// type still has an empty group of the other, so that stale slices of that type are
// deleted) and returns their keys.
func (d *desired) addSubsetPorts(ports []corev1.EndpointPort) subsetKeys {
	sp := slicePorts(ports)
	keys := subsetKeys{}
	for _, t := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
		k := newPortKey(sp, t)
		keys[t] = k
		if _, ok := d.endpoints[k]; !ok {
			d.endpoints[k] = endpointsliceutil.EndpointSet{}
		}
		d.ports[k] = sp
	}
	return keys
}

// addAddress adds an address under its type's key; false when it is not a valid IP.
func (d *desired) addAddress(a corev1.EndpointAddress, keys subsetKeys, ready bool) bool {
	e, t, ok := addressToEndpoint(a, ready)
	if !ok {
		return false
	}
	d.endpoints[keys[t]].Insert(e)
	return true
}

// recycle turns pairs of a create and a delete of one address type into an update of the
// slice that would be deleted, which saves a write and keeps slice names stable.
func recycle(a *actions) {
	creates, removes := byAddressType(a.create), byAddressType(a.remove)
	for t, cs := range creates {
		rs := removes[t]
		for i := 0; i < len(cs) && i < len(rs); i++ {
			a.create = removeNamed(a.create, cs[i])
			a.remove = removeNamed(a.remove, rs[i])
			s := cs[i]
			s.Name = rs[i].Name
			a.update = append(a.update, s)
		}
	}
}

// removeNamed removes the first slice named as s from list.
func removeNamed(list []*discoveryv1.EndpointSlice, s *discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	for i, o := range list {
		if o.Name == s.Name {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

func byAddressType(list []*discoveryv1.EndpointSlice) map[discoveryv1.AddressType][]*discoveryv1.EndpointSlice {
	out := map[discoveryv1.AddressType][]*discoveryv1.EndpointSlice{}
	for _, s := range list {
		out[s.AddressType] = append(out[s.AddressType], s)
	}
	return out
}

//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"
)

// The reasons of the controller's events (upstream's).
const (
	// InvalidIPAddress: an Endpoints address that is not an IP was not mirrored.
	InvalidIPAddress = "InvalidIPAddress"
	// TooManyAddressesToMirror: a subset had more addresses than
	// --mirroring-max-endpoints-per-subset; the rest were not mirrored.
	TooManyAddressesToMirror = "TooManyAddressesToMirror"
)

// reconciler turns an Endpoints into its mirrored slices: one slice per subset's port set
// and address type, holding at most maxPerSubset endpoints.
type reconciler struct {
	client       kubernetes.Interface
	tracker      *endpointsliceutil.EndpointSliceTracker
	recorder     record.EventRecorder
	maxPerSubset int32
	metricsCache *metricsCache
}

// reconcile creates, updates and deletes ep's mirrored slices (existing, from the cache)
// so that they hold ep's addresses.
func (r *reconciler) reconcile(ctx context.Context, ep *corev1.Endpoints, existing []*discoveryv1.EndpointSlice) error {
	log := klog.FromContext(ctx)
	d := newDesired()
	invalid, skipped := 0, 0
	// Subsets in their canonical form first: one per distinct port set, addresses
	// deduplicated and sorted, so which addresses are beyond the limit does not depend on
	// how the Endpoints was written.
	for _, subset := range repackSubsets(ep.Subsets) {
		keys := d.addSubsetPorts(subset.Ports)
		total, added := len(subset.Addresses)+len(subset.NotReadyAddresses), 0
		for _, group := range []struct {
			addrs []corev1.EndpointAddress
			ready bool
		}{{subset.Addresses, true}, {subset.NotReadyAddresses, false}} {
			for _, a := range group.addrs {
				if added >= int(r.maxPerSubset) {
					break
				}
				if d.addAddress(a, keys, group.ready) {
					added++
					continue
				}
				invalid++
				log.Info("address in Endpoints is not a valid IP, it will not be mirrored to an EndpointSlice", "ip", a.IP)
			}
		}
		skipped += total - added
	}
	// Skipped addresses count both the invalid ones and those beyond the limit.
	addressesSkippedPerSync.WithLabelValues().Observe(float64(skipped))
	if invalid > 0 {
		r.recorder.Eventf(ep, corev1.EventTypeWarning, InvalidIPAddress,
			"Skipped %d invalid IP addresses when mirroring to EndpointSlices", invalid)
	}
	if skipped > invalid {
		log.Info("addresses in Endpoints were skipped due to exceeding MaxEndpointsPerSubset", "skippedAddresses", skipped)
		r.recorder.Eventf(ep, corev1.EventTypeWarning, TooManyAddressesToMirror,
			"A max of %d addresses can be mirrored to EndpointSlices per Endpoints subset. %d addresses were skipped", r.maxPerSubset, skipped)
	}

	existingByKey := map[portKey][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := sliceKey(s)
		existingByKey[k] = append(existingByKey[k], s)
	}
	var all actions
	var sum totals
	perKey := map[portKey]efficiency{}
	for k, want := range d.endpoints {
		n := want.Len()
		a, t := r.reconcileKey(ep, existingByKey[k], want, d.ports[k], k.addressType())
		all.append(a)
		sum.add(t)
		perKey[k] = efficiency{endpoints: n, slices: len(existingByKey[k]) + len(a.create) - len(a.remove)}
	}
	// Slices of port sets the Endpoints no longer has go.
	for k, ss := range existingByKey {
		if _, ok := d.endpoints[k]; !ok {
			all.remove = append(all.remove, ss...)
		}
	}
	endpointsAddedPerSync.WithLabelValues().Observe(float64(sum.added))
	endpointsUpdatedPerSync.WithLabelValues().Observe(float64(sum.updated))
	endpointsRemovedPerSync.WithLabelValues().Observe(float64(sum.removed))
	r.metricsCache.set(types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}, perKey)
	return r.apply(ctx, ep, all)
}

// reconcileKey returns what to write for one port key: nothing when the first existing
// slice already holds want with ep's labels and annotations and is owned by this ep; else
// that slice rewritten (or a new one) with up to maxPerSubset endpoints. Further slices of
// the key are deleted; all of them when nothing is wanted.
func (r *reconciler) reconcileKey(ep *corev1.Endpoints, existing []*discoveryv1.EndpointSlice, want endpointsliceutil.EndpointSet,
	ports []discoveryv1.EndpointPort, addrType discoveryv1.AddressType) (actions, totals) {
	var a actions
	var t totals
	if want.Len() == 0 {
		a.remove = existing
		for _, s := range existing {
			t.removed += len(s.Endpoints)
		}
		return a, t
	}
	if len(existing) == 0 {
		t.added = want.Len()
	} else {
		a.remove = existing[1:]
		first := existing[0]
		wantAnnotations := without(ep.Annotations, corev1.EndpointsLastChangeTriggerTime, corev1.LastAppliedConfigAnnotation)
		haveLabels := without(first.Labels, discoveryv1.LabelManagedBy, discoveryv1.LabelServiceName)
		t = changes(first, want)
		if t.added == 0 && t.updated == 0 && t.removed == 0 &&
			apiequality.Semantic.DeepEqual(ep.Labels, haveLabels) &&
			apiequality.Semantic.DeepEqual(wantAnnotations, first.Annotations) &&
			!ownedByEarlierEndpoints(ep, first) {
			if !r.tracker.Has(first) {
				r.tracker.Update(first) // every slice of the Endpoints is tracked
			}
			return a, t
		}
	}
	name := ""
	if len(existing) > 0 {
		name = existing[0].Name
	}
	s := newSlice(ep, ports, addrType, name)
	for want.Len() > 0 && len(s.Endpoints) < int(r.maxPerSubset) {
		e, _ := want.PopAny()
		s.Endpoints = append(s.Endpoints, *e)
	}
	if s.Name != "" {
		a.update = []*discoveryv1.EndpointSlice{s}
	} else {
		a.create = []*discoveryv1.EndpointSlice{s}
	}
	return a, t
}

// apply makes the writes: creates (none while the Endpoints is being deleted), then
// updates, then deletes, each recorded in the tracker. A create refused because the
// namespace is being deleted ends the sync without an error.
func (r *reconciler) apply(ctx context.Context, ep *corev1.Endpoints, a actions) error {
	recycle(&a)
	client := r.client.DiscoveryV1().EndpointSlices(ep.Namespace)
	if ep.DeletionTimestamp == nil {
		for _, s := range a.create {
			created, err := client.Create(ctx, s, metav1.CreateOptions{})
			if err != nil {
				if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
					return nil
				}
				return fmt.Errorf("failed to create EndpointSlice for Endpoints %s/%s: %w", ep.Namespace, ep.Name, err)
			}
			r.tracker.Update(created)
			sliceChanges.WithLabelValues("create").Inc()
		}
	}
	for _, s := range a.update {
		updated, err := client.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("failed to update %s EndpointSlice for Endpoints %s/%s: %w", s.Name, ep.Namespace, ep.Name, err)
		}
		r.tracker.Update(updated)
		sliceChanges.WithLabelValues("update").Inc()
	}
	for _, s := range a.remove {
		if err := client.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("failed to delete %s EndpointSlice for Endpoints %s/%s: %w", s.Name, ep.Namespace, ep.Name, err)
		}
		r.tracker.ExpectDeletion(s)
		sliceChanges.WithLabelValues("delete").Inc()
	}
	return nil
}

// deleteAll deletes ss, the mirrored slices of namespace/name, trying each, and drops the
// Endpoints from the metrics.
func (r *reconciler) deleteAll(ctx context.Context, namespace, name string, ss []*discoveryv1.EndpointSlice) error {
	r.metricsCache.forget(types.NamespacedName{Namespace: namespace, Name: name})
	var errs []error
	for _, s := range ss {
		if err := r.client.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("error(s) deleting %d/%d EndpointSlices for %s/%s Endpoints, including: %w", len(errs), len(ss), namespace, name, errs[0])
	}
	return nil
}

// changes counts the endpoints to add, update and remove to turn s into want.
func changes(s *discoveryv1.EndpointSlice, want endpointsliceutil.EndpointSet) totals {
	var t totals
	matches := 0
	for i := range s.Endpoints {
		e := s.Endpoints[i]
		// The set's hash sorts an endpoint's addresses in place: sort a copy, not the
		// cached slice every controller of the shard reads.
		e.Addresses = slices.Clone(e.Addresses)
		got := want.Get(&e)
		if got == nil {
			t.removed++
			continue
		}
		matches++
		if !endpointsliceutil.EndpointsEqualBeyondHash(got, &e) {
			t.updated++
		}
	}
	t.added = want.Len() - matches
	return t
}

// ownedByEarlierEndpoints reports whether s is owned by an earlier Endpoints of ep's name
// (deleted and created again): the slice is rewritten so that its owner reference names
// the current one, else the garbage collector would delete it.
func ownedByEarlierEndpoints(ep *corev1.Endpoints, s *discoveryv1.EndpointSlice) bool {
	for _, o := range s.OwnerReferences {
		if o.Kind == "Endpoints" && o.Name == ep.Name && o.UID != ep.UID {
			return true
		}
	}
	return false
}

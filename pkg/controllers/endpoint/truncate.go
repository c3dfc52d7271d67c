package endpoint

import (
	"math"

	corev1 "k8s.io/api/core/v1"
)

// maxCapacity is the most addresses an Endpoints holds; beyond it the controller keeps
// maxCapacity of them and says so with the over-capacity annotation (upstream's limit).
const maxCapacity = 1000

// truncatedValue is the over-capacity annotation's value on a truncated Endpoints.
const truncatedValue = "truncated"

// truncate cuts ep's subsets to maxCapacity addresses, as upstream does: when the ready
// addresses fit, all of them are kept and the room left is shared out among the subsets'
// not-ready addresses; otherwise only ready addresses are kept, maxCapacity of them. Each
// subset gets its proportional share rounded up, in subset order, so a last subset may get
// less; each keeps its first addresses (the sorted order, so every shard with the same
// pods keeps the same ones). It reports whether it truncated.
func truncate(ep *corev1.Endpoints) bool {
	ready, notReady := 0, 0
	for _, s := range ep.Subsets {
		ready += len(s.Addresses)
		notReady += len(s.NotReadyAddresses)
	}
	if ready+notReady <= maxCapacity {
		return false
	}
	onlyReady := ready > maxCapacity
	room, total := maxCapacity-ready, notReady
	if onlyReady {
		room, total = maxCapacity, ready
	}
	left := room
	for i := range ep.Subsets {
		s := &ep.Subsets[i]
		n := len(s.NotReadyAddresses)
		if onlyReady {
			n = len(s.Addresses)
		}
		share := min(ceilShare(n, total, room), left)
		if onlyReady {
			s.Addresses = firstN(s.Addresses, share)
			s.NotReadyAddresses = []corev1.EndpointAddress{}
			left -= len(s.Addresses)
		} else {
			s.NotReadyAddresses = firstN(s.NotReadyAddresses, share)
			left -= len(s.NotReadyAddresses)
		}
	}
	return true
}

// ceilShare is ⌈n/total·room⌉ computed in float64, as upstream computes it (the same
// rounding at the edges gives the same kept addresses).
func ceilShare(n, total, room int) int {
	return int(math.Ceil(float64(n) / float64(total) * float64(room)))
}

func firstN(addrs []corev1.EndpointAddress, n int) []corev1.EndpointAddress {
	if len(addrs) <= n {
		return addrs
	}
	return addrs[:n]
}

// capacityAnnotationCorrect reports whether a stored Endpoints needs no write for the
// over-capacity annotation: it holds at most maxCapacity addresses and no annotation. As
// upstream's, it is false for every Endpoints that carries the annotation, so a truncated
// Endpoints is written on every sync (its stored subsets never equal the computed ones
// either).
func capacityAnnotationCorrect(annotations map[string]string, subsets []corev1.EndpointSubset) bool {
	n := 0
	for _, s := range subsets {
		n += len(s.Addresses) + len(s.NotReadyAddresses)
	}
	if n > maxCapacity {
		return false
	}
	_, ok := annotations[corev1.EndpointsOverCapacity]
	return !ok
}

// labelsCorrect reports whether an Endpoints' labels are those the controller writes for
// a Service of svcLabels: the managed-by label, the Service's labels, and at most the
// headless label besides.
func labelsCorrect(epLabels, svcLabels map[string]string) bool {
	if epLabels[LabelManagedBy] != ControllerName {
		return false
	}
	skipped := 0
	for k, v := range epLabels {
		if k == corev1.IsHeadlessService || k == LabelManagedBy {
			skipped++
			continue
		}
		if sv, ok := svcLabels[k]; !ok || sv != v {
			return false
		}
	}
	return len(svcLabels) == len(epLabels)-skipped
}

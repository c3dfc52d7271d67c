package deployment

import (
	"cmp"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// The orders and sums over a Deployment's ReplicaSets that the rollout logic uses. Ties are
// broken by name so that every order is total, as upstream's are: which ReplicaSet gets a
// leftover replica must not depend on the informer's listing order.

// olderFirst compares by creation time, then name.
func olderFirst(a, b *appsv1.ReplicaSet) int {
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return cmp.Compare(a.Name, b.Name)
	}
	if a.CreationTimestamp.Before(&b.CreationTimestamp) {
		return -1
	}
	return 1
}

// sortOlderFirst sorts rss by creation time, oldest first.
func sortOlderFirst(rss []*appsv1.ReplicaSet) { slices.SortFunc(rss, olderFirst) }

// sortLargerFirst sorts rss by spec.replicas, largest first; among equals the older first
// when olderWins, else the newer first.
func sortLargerFirst(rss []*appsv1.ReplicaSet, olderWins bool) {
	slices.SortFunc(rss, func(a, b *appsv1.ReplicaSet) int {
		if c := cmp.Compare(*b.Spec.Replicas, *a.Spec.Replicas); c != 0 {
			return c
		}
		if olderWins {
			return olderFirst(a, b)
		}
		return olderFirst(b, a)
	})
}

// sortByRevision sorts rss by revision, lowest first; unparsable or equal revisions fall
// back to creation order.
func sortByRevision(rss []*appsv1.ReplicaSet) {
	slices.SortFunc(rss, func(a, b *appsv1.ReplicaSet) int {
		ra, errA := revision(a.Annotations)
		rb, errB := revision(b.Annotations)
		if errA != nil || errB != nil || ra == rb {
			return olderFirst(a, b)
		}
		return cmp.Compare(ra, rb)
	})
}

// active returns the ReplicaSets that should have pods (spec.replicas > 0); nil entries
// (a missing new ReplicaSet) are dropped.
func active(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && *rs.Spec.Replicas > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// sum adds f over the non-nil ReplicaSets.
func sum(rss []*appsv1.ReplicaSet, f func(*appsv1.ReplicaSet) int32) int32 {
	var n int32
	for _, rs := range rss {
		if rs != nil {
			n += f(rs)
		}
	}
	return n
}

func specReplicas(rs *appsv1.ReplicaSet) int32      { return *rs.Spec.Replicas }
func statusReplicas(rs *appsv1.ReplicaSet) int32    { return rs.Status.Replicas }
func readyReplicas(rs *appsv1.ReplicaSet) int32     { return rs.Status.ReadyReplicas }
func availableReplicas(rs *appsv1.ReplicaSet) int32 { return rs.Status.AvailableReplicas }

// terminatingReplicas sums status.terminatingReplicas. It is unknown (nil) when a
// ReplicaSet that its controller has already observed does not report it; a ReplicaSet not
// observed yet counts as 0.
func terminatingReplicas(rss []*appsv1.ReplicaSet) *int32 {
	var n int32
	for _, rs := range rss {
		switch {
		case rs == nil:
		case rs.Status.TerminatingReplicas == nil && rs.Status.ObservedGeneration == 0:
		case rs.Status.TerminatingReplicas == nil:
			return nil
		default:
			n += *rs.Status.TerminatingReplicas
		}
	}
	return &n
}

// equalIgnoringHash compares pod templates semantically, ignoring the pod-template-hash
// label: a ReplicaSet whose template equals the Deployment's is its current one.
//
// Only the label maps are copied (the templates are shared cache objects, never written):
// a settled Deployment compares its template with every ReplicaSet's on each sync.
func equalIgnoringHash(a, b *corev1.PodTemplateSpec) bool {
	ca, cb := *a, *b
	ca.Labels = withoutHashLabel(a.Labels)
	cb.Labels = withoutHashLabel(b.Labels)
	return apiequality.Semantic.DeepEqual(&ca, &cb)
}

// withoutHashLabel returns labels without pod-template-hash, copied only if it is there.
func withoutHashLabel(labels map[string]string) map[string]string {
	if _, ok := labels[appsv1.DefaultDeploymentUniqueLabelKey]; !ok {
		return labels
	}
	out := make(map[string]string, len(labels)-1)
	for k, v := range labels {
		if k != appsv1.DefaultDeploymentUniqueLabelKey {
			out[k] = v
		}
	}
	return out
}

// splitReplicaSets sorts rss oldest first and returns the oldest whose template equals the
// Deployment's (the new ReplicaSet, or nil) and all the others (the old ones).
func splitReplicaSets(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
	sortOlderFirst(rss)
	var newRS *appsv1.ReplicaSet
	var old []*appsv1.ReplicaSet
	for _, rs := range rss {
		if newRS == nil && equalIgnoringHash(&rs.Spec.Template, &d.Spec.Template) {
			newRS = rs
			continue
		}
		old = append(old, rs)
	}
	return newRS, old
}

// activeOrLatest returns the one ReplicaSet that should absorb a plain resize: the only
// active one, or when none is active the new one or else the newest old one. With two or
// more active ReplicaSets a rollout is in progress and it returns nil.
func activeOrLatest(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(old) == 0 {
		return nil
	}
	newestFirst := slices.Clone(old)
	slices.SortFunc(newestFirst, func(a, b *appsv1.ReplicaSet) int { return olderFirst(b, a) })
	act := active(append(newestFirst, newRS))
	switch len(act) {
	case 0:
		if newRS != nil {
			return newRS
		}
		return newestFirst[0]
	case 1:
		return act[0]
	default:
		return nil
	}
}

// saturated says whether rs runs exactly the Deployment's replicas, all available, and was
// last sized for this replica count.
func saturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, err := strconv.Atoi(rs.Annotations[DesiredReplicasAnnotation])
	if err != nil {
		return false
	}
	return *rs.Spec.Replicas == *d.Spec.Replicas && int32(desired) == *d.Spec.Replicas &&
		rs.Status.AvailableReplicas == *d.Spec.Replicas
}

package replicaset

import (
	"math"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kshard/kshard/pkg/controllers/internal/podutil"
)

// DeletionCostAnnotation lets users say which pods of a ReplicaSet to delete first on a
// scale-down (lower cost first), as kube-controller-manager honours it (feature
// PodDeletionCost, on by default).
const DeletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

// phaseOrder orders pods for deletion by phase: pods that do not run yet go first.
var phaseOrder = map[corev1.PodPhase]int{corev1.PodPending: 0, corev1.PodUnknown: 1, corev1.PodRunning: 2}

// deletionCost parses DeletionCostAnnotation with the API's rules (a decimal int32, no
// "+" sign, no leading zeros); a missing or invalid value costs 0.
func deletionCost(pod *corev1.Pod) int32 {
	v, ok := pod.Annotations[DeletionCostAnnotation]
	if !ok || v == "" || v[0] == '+' || (v[0] == '0' && v != "0") {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// maxRestarts returns the highest restart count among the pod's regular containers and,
// separately, among its sidecars (init containers with restartPolicy Always).
func maxRestarts(pod *corev1.Pod) (regular, sidecar int32) {
	for _, c := range pod.Status.ContainerStatuses {
		regular = max(regular, c.RestartCount)
	}
	sidecars := sets.New[string]()
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.Insert(c.Name)
		}
	}
	for _, c := range pod.Status.InitContainerStatuses {
		if sidecars.Has(c.Name) {
			sidecar = max(sidecar, c.RestartCount)
		}
	}
	return regular, sidecar
}

// log2Age is the base-2 logarithm of t's age at now (-1 for t not in the past): times
// within one power of two of each other are equally old, so equivalent pods are not
// always deleted youngest-first to the nanosecond.
func log2Age(t, now time.Time) int64 {
	if d := now.Sub(t); d > 0 {
		return int64(math.Log2(float64(d)))
	}
	return -1
}

// laterOrZero reports whether a is after b, counting a zero time as later than any other.
func laterOrZero(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero()
	}
	return a.After(b)
}

// deletionRanking sorts pods so that the ones to delete first come first.
type deletionRanking struct {
	pods []*corev1.Pod
	// colocated[i] is how many active pods related to the ReplicaSet (of its owner's
	// ReplicaSets) run on pods[i]'s node.
	colocated []int
	now       time.Time
}

func (r deletionRanking) Len() int { return len(r.pods) }

func (r deletionRanking) Swap(i, j int) {
	r.pods[i], r.pods[j] = r.pods[j], r.pods[i]
	r.colocated[i], r.colocated[j] = r.colocated[j], r.colocated[i]
}

// Less reports whether pods[i] should be deleted before pods[j]: unscheduled before
// scheduled; Pending before Unknown before Running; not ready before ready; lower deletion
// cost first; more co-located related pods first; ready for less time first; more
// container restarts first; newer first. Ready and creation times are compared by
// log2Age, ties broken by UID.
func (r deletionRanking) Less(i, j int) bool {
	a, b := r.pods[i], r.pods[j]
	if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
		return a.Spec.NodeName == ""
	}
	if pa, pb := phaseOrder[a.Status.Phase], phaseOrder[b.Status.Phase]; pa != pb {
		return pa < pb
	}
	readyA, readyB := podutil.IsReady(a), podutil.IsReady(b)
	if readyA != readyB {
		return !readyA
	}
	if ca, cb := deletionCost(a), deletionCost(b); ca != cb {
		return ca < cb
	}
	if r.colocated[i] != r.colocated[j] {
		return r.colocated[i] > r.colocated[j]
	}
	if readyA && readyB {
		if ta, tb := podutil.ReadySince(a).Time, podutil.ReadySince(b).Time; !ta.Equal(tb) {
			return r.newer(a, b, ta, tb)
		}
	}
	ra, sa := maxRestarts(a)
	rb, sb := maxRestarts(b)
	if ra != rb {
		return ra > rb
	}
	if sa != sb {
		return sa > sb
	}
	if ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time; !ta.Equal(tb) {
		return r.newer(a, b, ta, tb)
	}
	return false
}

// newer orders by time ta of a and tb of b, later (or unknown) first, on the log2Age
// scale with the UID breaking a tie.
func (r deletionRanking) newer(a, b *corev1.Pod, ta, tb time.Time) bool {
	if r.now.IsZero() || ta.IsZero() || tb.IsZero() {
		return laterOrZero(ta, tb)
	}
	if d := log2Age(ta, r.now) - log2Age(tb, r.now); d != 0 {
		return d < 0
	}
	return a.UID < b.UID
}

// podsToDelete picks n of active (the ReplicaSet's active pods) to delete, best
// candidates first. related are the pods of every ReplicaSet with the same controller as
// this one (a Deployment's ReplicaSets): pods on nodes crowded with them go first.
func podsToDelete(active, related []*corev1.Pod, n int, now time.Time) []*corev1.Pod {
	pods := append([]*corev1.Pod(nil), active...)
	if n >= len(pods) {
		return pods
	}
	perNode := map[string]int{}
	for _, p := range related {
		if podutil.IsActive(p) {
			perNode[p.Spec.NodeName]++
		}
	}
	colocated := make([]int, len(pods))
	for i, p := range pods {
		colocated[i] = perNode[p.Spec.NodeName]
	}
	sort.Sort(deletionRanking{pods: pods, colocated: colocated, now: now})
	return pods[:n]
}

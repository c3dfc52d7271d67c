package replicaset

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func sidecarRestarts(n int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "side", RestartCount: n}}
	}
}

// TestDeletionOrder: for each pair, first must be deleted before second, whatever
// order they are given in.
func TestDeletionOrder(t *testing.T) {
	now := t0
	rs := newRS("rs", 1)
	p := func(name string, opts ...podOpt) *corev1.Pod { return newPodOf(name, rs, opts...) }
	readyFor := func(d time.Duration) podOpt { return ready(now.Add(-d)) }
	tests := []struct {
		name          string
		first, second *corev1.Pod
		// colocated counts of first and second (related pods on their nodes)
		colocated [2]int
	}{
		{name: "unassigned before assigned",
			first: p("a", onNode(""), phase(corev1.PodRunning), readyFor(time.Hour)), second: p("b", phase(corev1.PodPending))},
		{name: "pending before unknown", first: p("a", phase(corev1.PodPending)), second: p("b", phase(corev1.PodUnknown))},
		{name: "unknown before running", first: p("a", phase(corev1.PodUnknown)), second: p("b", phase(corev1.PodRunning))},
		{name: "not ready before ready", first: p("a", restarts(0)), second: p("b", readyFor(time.Minute), restarts(9))},
		{name: "a ready condition that is False is not ready", first: p("a", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
		}), second: p("b", readyFor(time.Minute))},
		{name: "lower deletion cost first", first: p("a", cost("-5"), readyFor(time.Second)),
			second: p("b", cost("10"), readyFor(time.Hour)), colocated: [2]int{1, 5}},
		{name: "no annotation costs 0", first: p("a", readyFor(time.Second)), second: p("b", cost("1"), readyFor(time.Hour))},
		{name: "an invalid cost costs 0", first: p("a", cost("+3"), readyFor(time.Second)),
			second: p("b", cost("1"), readyFor(time.Hour))},
		{name: "a cost with a leading zero is invalid", first: p("a", cost("-1")), second: p("b", cost("007"))},
		{name: "more co-located related pods first", first: p("a", readyFor(time.Hour)), second: p("b", readyFor(time.Second)),
			colocated: [2]int{3, 1}},
		{name: "ready for less time first", first: p("a", readyFor(time.Minute)), second: p("b", readyFor(time.Hour))},
		{name: "ready times in one power of two: the UID decides",
			first: p("a", readyFor(100*time.Second)), second: p("b", readyFor(70*time.Second))},
		{name: "more restarts first", first: p("a", restarts(5)), second: p("b", restarts(1))},
		{name: "equal restarts: more sidecar restarts first", first: p("a", restarts(1), sidecarRestarts(4)),
			second: p("b", restarts(1), sidecarRestarts(0))},
		{name: "newer first", first: p("z", created(now.Add(-time.Minute))), second: p("a", created(now.Add(-time.Hour)))},
		{name: "created within one power of two: the UID decides",
			first: p("a", created(now.Add(-100*time.Second))), second: p("b", created(now.Add(-70*time.Second)))},
		{name: "created in different powers of two: newer first",
			first: p("b", created(now.Add(-10*time.Second))), second: p("a", created(now.Add(-100*time.Second)))},
		{name: "no creation time first", first: p("z", created(time.Time{})), second: p("a", created(now.Add(-time.Second)))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, swap := range []bool{false, true} {
				r := deletionRanking{pods: []*corev1.Pod{tc.first, tc.second}, colocated: []int{tc.colocated[0], tc.colocated[1]}, now: now}
				if swap {
					r.Swap(0, 1)
				}
				i, j := 0, 1
				if swap {
					i, j = 1, 0
				}
				if !r.Less(i, j) || r.Less(j, i) {
					t.Errorf("swap=%v: Less(first, second) = %v, Less(second, first) = %v; want true, false",
						swap, r.Less(i, j), r.Less(j, i))
				}
			}
		})
	}
}

func names(pods []*corev1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return fmt.Sprint(out)
}

func TestPodsToDelete(t *testing.T) {
	now := t0
	rs := newRS("rs", 1)
	tests := []struct {
		name    string
		active  []*corev1.Pod
		related []*corev1.Pod
		n       int
		want    string
	}{
		{name: "everything when all go", n: 2,
			active: []*corev1.Pod{newPodOf("a", rs, ready(now)), newPodOf("b", rs)}, want: "[a b]"},
		{name: "the worst first", n: 2,
			active: []*corev1.Pod{
				newPodOf("running-ready", rs, ready(now.Add(-time.Hour))),
				newPodOf("pending", rs, phase(corev1.PodPending)),
				newPodOf("running-not-ready", rs),
				newPodOf("unscheduled", rs, onNode(""), phase(corev1.PodPending)),
			}, want: "[unscheduled pending]"},
		{name: "crowded node first", n: 1,
			active: []*corev1.Pod{
				newPodOf("alone", rs, onNode("n1"), ready(now.Add(-time.Hour))),
				newPodOf("crowded", rs, onNode("n2"), ready(now.Add(-time.Hour))),
			},
			related: []*corev1.Pod{
				newPodOf("alone", rs, onNode("n1")),
				newPodOf("crowded", rs, onNode("n2")),
				newPodOf("sibling", nil, onNode("n2")),
				newPodOf("finished-sibling", nil, onNode("n1"), phase(corev1.PodSucceeded)),
				newPodOf("gone-sibling", nil, onNode("n1"), deleting()),
			}, want: "[crowded]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := names(tc.active)
			got := podsToDelete(tc.active, tc.related, tc.n, now)
			if names(got) != tc.want {
				t.Errorf("podsToDelete = %s, want %s", names(got), tc.want)
			}
			if names(tc.active) != before {
				t.Errorf("the caller's slice was reordered: %s", names(tc.active))
			}
		})
	}
}

// TestScaleDownUsesSiblings: pods of the Deployment's other ReplicaSets on the same node
// make a pod a better candidate; a ReplicaSet without controller ignores co-location.
func TestScaleDownUsesSiblings(t *testing.T) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", UID: "uid-d"}}
	owned := func(rs *appsv1.ReplicaSet) { rs.OwnerReferences = []metav1.OwnerReference{ownedBy(dep, "Deployment")} }
	tests := []struct {
		name     string
		rsOpts   []rsOpt
		wantGone string
	}{
		{name: "deployment's replicaset: the pod beside the sibling's goes", rsOpts: []rsOpt{owned}, wantGone: "crowded"},
		// Without co-location the newer pod goes.
		{name: "standalone replicaset: co-location ignored", wantGone: "alone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := newRS("rs", 1, tc.rsOpts...)
			sib := newRS("sib", 1, owned, func(s *appsv1.ReplicaSet) {
				s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sib"}}
			})
			alone := newPodOf("alone", rs, onNode("n1"), ready(t0.Add(-time.Hour)), created(t0.Add(-time.Minute)))
			crowded := newPodOf("crowded", rs, onNode("n2"), ready(t0.Add(-time.Hour)), created(t0.Add(-100*time.Hour)))
			sibPod := newPodOf("sib-pod", sib, onNode("n2"), labelled(map[string]string{"app": "sib"}))
			f := newFixture(t, rs, sib, alone, crowded, sibPod)
			f.MustSync("ns/rs")
			if got := f.actions(false); len(got) < 1 || got[0] != "delete pods "+tc.wantGone {
				t.Errorf("actions = %v, want delete pods %s first", got, tc.wantGone)
			}
		})
	}
}

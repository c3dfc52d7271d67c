package invariant

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const ns = "ns"

// step is one event fed to the checker: a pod added or changed, a pod deleted, a budget's
// new version, or a DaemonSet's generation raised.
type step struct {
	pod    *corev1.Pod
	delete bool
	pdb    *policyv1.PodDisruptionBudget
	dsGen  int
}

type podOpt func(*corev1.Pod)

func ready(p *corev1.Pod) {
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

// deleting marks the pod deleted with grace period g.
func deleting(g int64) podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		p.DeletionGracePeriodSeconds = ptr.To(g)
	}
}

func newPod(name, uid string, rv int, owner metav1.OwnerReference, lbl map[string]string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: fmt.Sprint(rv),
		Labels: lbl, OwnerReferences: []metav1.OwnerReference{owner}}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// stsPod is pod <set>-<ordinal> of revision rev.
func stsPod(set string, ordinal int, uid string, rv int, rev string, opts ...podOpt) *corev1.Pod {
	return newPod(fmt.Sprintf("%s-%d", set, ordinal), uid, rv,
		metav1.OwnerReference{Kind: "StatefulSet", Name: set, Controller: ptr.To(true)},
		map[string]string{"app": set, appsv1.PodIndexLabel: fmt.Sprint(ordinal), appsv1.ControllerRevisionHashLabelKey: rev}, opts...)
}

// dsPod is a pod of DaemonSet ds at generation gen pinned to node.
func dsPod(name string, rv int, node string, gen int, opts ...podOpt) *corev1.Pod {
	p := newPod(name, name, rv, metav1.OwnerReference{Kind: "DaemonSet", Name: "ds", Controller: ptr.To(true)},
		map[string]string{"app": "ds", GenLabel: fmt.Sprint(gen)}, opts...)
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
	return p
}

func add(p *corev1.Pod) step { return step{pod: p} }
func del(p *corev1.Pod) step { return step{pod: p, delete: true} }

func run(t *testing.T, c *Checker, steps []step) {
	t.Helper()
	pods, pdbs := c.Handlers()
	for _, s := range steps {
		switch {
		case s.dsGen > 0:
			c.SetDaemonSetGen(ns, "ds", s.dsGen)
		case s.pdb != nil:
			pdbs.OnUpdate(nil, s.pdb)
		case s.delete:
			pods.OnDelete(s.pod)
		default:
			pods.OnUpdate(nil, s.pod)
		}
	}
}

func violations(c *Checker) string {
	var out []string
	for _, v := range c.Violations() {
		out = append(out, v.Invariant+" "+v.Instant.String()[:strings.Index(v.Instant.String(), " (")]+": "+v.Detail)
	}
	return strings.Join(out, "\n")
}

func TestStatefulSetOrdinal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		want  string // substring of the violations; empty: none
	}{
		{name: "replaced after the deletion", steps: []step{
			add(stsPod("web", 0, "a", 10, "r1")), add(stsPod("web", 0, "a", 11, "r1", ready)),
			add(stsPod("web", 0, "a", 12, "r1", ready, deleting(30))), del(stsPod("web", 0, "a", 13, "r1", deleting(0))),
			add(stsPod("web", 0, "b", 14, "r2")),
		}},
		{name: "a terminating pod still counts", steps: []step{
			add(stsPod("web", 1, "a", 10, "r1", deleting(30))),
			add(func() *corev1.Pod { p := stsPod("web", 1, "b", 11, "r2"); p.Name = "web-x"; return p }()),
		}, want: "statefulset-ordinal rv 11: ordinal 1 has 2 pods at once: web-1 (uid a), web-x (uid b)"},
		{name: "a relist that replaces a pod of the name", steps: []step{
			add(stsPod("web", 2, "a", 10, "r1")), add(stsPod("web", 2, "b", 20, "r2")),
		}, want: "ordinal 2 has 2 pods at once"},
		{name: "ordinals of two sets", steps: []step{
			add(stsPod("web", 0, "a", 10, "r1")), add(stsPod("db", 0, "b", 11, "r1")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(nil)
			if tc.name == "a relist that replaces a pod of the name" {
				// The informer's update of one key from one UID to another is a delete and an
				// add: the handler must not see both at once.
				pods, _ := c.Handlers()
				pods.OnAdd(tc.steps[0].pod, false)
				pods.OnUpdate(tc.steps[0].pod, tc.steps[1].pod)
				if got := violations(c); got != "" {
					t.Fatalf("violations after a relist replaced the pod:\n%s", got)
				}
				// Fed as two adds (the first never deleted), the ordinal has two pods.
				c = New(nil)
			}
			run(t, c, tc.steps)
			got := violations(c)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("violations:\n%s\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDaemonSetSurge(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxSurge int
		steps    []step
		want     string
	}{
		{name: "at most maxSurge nodes surging", maxSurge: 2, steps: []step{
			{dsGen: 2},
			add(dsPod("n1-new", 20, "n1", 2)), add(dsPod("n2-new", 21, "n2", 2)),
			add(dsPod("n1-new", 22, "n1", 2, ready)), add(dsPod("n3-new", 23, "n3", 2)),
			add(dsPod("n1-old", 24, "n1", 1, ready, deleting(30))),
		}},
		{name: "a third node surging", maxSurge: 2, steps: []step{
			{dsGen: 2},
			add(dsPod("n1-new", 20, "n1", 2)), add(dsPod("n2-new", 21, "n2", 2)), add(dsPod("n3-new", 22, "n3", 2)),
		}, want: "daemonset-surge rv 22: 3 nodes run an old pod beside a new one not Ready (maxSurge 2, generation 2): n1, n2, n3"},
		{name: "a new pod on a node without an old one is not a surge", maxSurge: 1, steps: []step{
			{dsGen: 2},
			add(dsPod("n1-old", 20, "n1", 1, ready, deleting(30))), add(dsPod("n1-new", 21, "n1", 2)), add(dsPod("n2-new", 22, "n2", 2)),
		}},
		{name: "three live pods on a node", maxSurge: 3, steps: []step{
			{dsGen: 2},
			add(dsPod("n1-new", 20, "n1", 2)), add(dsPod("n1-new2", 21, "n1", 2)),
		}, want: `daemonset-pods-per-node rv 21: node "n1" runs 3 live pods of the set (at most 2 with maxSurge 3)`},
		{name: "without surge the old pod goes first", maxSurge: 0, steps: []step{
			{dsGen: 2},
			add(dsPod("n1-old", 20, "n1", 1, ready, deleting(30))), add(dsPod("n1-new", 21, "n1", 2)),
		}},
		{name: "without surge a new pod beside a live old one", maxSurge: 0, steps: []step{
			{dsGen: 2}, add(dsPod("n2-new", 20, "n2", 2)),
		}, want: `daemonset-pods-per-node rv 20: node "n2" runs 2 live pods of the set (at most 1 with maxSurge 0)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(nil)
			c.AddDaemonSet(ns, "ds", tc.maxSurge, 3, 1)
			var initial []step
			for i := 1; i <= 3; i++ {
				initial = append(initial, add(dsPod(fmt.Sprintf("n%d-old", i), i, fmt.Sprintf("n%d", i), 1, ready)))
			}
			run(t, c, append(initial, tc.steps...))
			got := violations(c)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("violations:\n%s\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDaemonSetSettled(t *testing.T) {
	c := New(nil)
	c.AddDaemonSet(ns, "ds", 1, 2, 1)
	run(t, c, []step{add(dsPod("a", 1, "n1", 1, ready)), add(dsPod("b", 2, "n2", 1))})
	if ok, why := c.DaemonSetSettled(ns, "ds"); ok || !strings.Contains(why, "ready false") {
		t.Fatalf("settled %v (%s) with a pod not Ready", ok, why)
	}
	run(t, c, []step{add(dsPod("b", 3, "n2", 1, ready))})
	if ok, why := c.DaemonSetSettled(ns, "ds"); !ok {
		t.Fatalf("not settled: %s", why)
	}
	c.SetDaemonSetGen(ns, "ds", 2)
	if ok, _ := c.DaemonSetSettled(ns, "ds"); ok {
		t.Fatal("settled with every pod of the previous generation")
	}
}

func newPDB(gen int64, spec policyv1.PodDisruptionBudgetSpec, rv int, st *policyv1.PodDisruptionBudgetStatus) *policyv1.PodDisruptionBudget {
	spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pdb", Generation: gen, ResourceVersion: fmt.Sprint(rv)}, Spec: spec}
	if st != nil {
		p.Status = *st
	}
	return p
}

// status is a status as the controller writes it, with its condition.
func status(gen int64, healthy, desired, expected, allowed int32) *policyv1.PodDisruptionBudgetStatus {
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse, Reason: policyv1.InsufficientPodsReason}
	if allowed > 0 {
		cond.Status, cond.Reason = metav1.ConditionTrue, policyv1.SufficientPodsReason
	}
	return &policyv1.PodDisruptionBudgetStatus{ObservedGeneration: gen, CurrentHealthy: healthy, DesiredHealthy: desired,
		ExpectedPods: expected, DisruptionsAllowed: allowed, Conditions: []metav1.Condition{cond}}
}

func TestPDBStatus(t *testing.T) {
	minTwo := policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2))}
	maxOne := policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	half := policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromString("50%"))}
	// Three ready pods at rv 10-12 (replicas 3).
	three := []step{add(stsPod("web", 0, "a", 10, "r1", ready)), add(stsPod("web", 1, "b", 11, "r1", ready)), add(stsPod("web", 2, "c", 12, "r1", ready))}
	heartbeat := func(rv int) step {
		return add(newPod("heartbeat", "hb", rv, metav1.OwnerReference{Kind: "None", Name: "x"}, map[string]string{"app": "other"}))
	}
	for _, tc := range []struct {
		name  string
		spec  policyv1.PodDisruptionBudgetSpec
		steps []step
		want  string
	}{
		{name: "computed from the view at its write", spec: minTwo, steps: append(three,
			step{pdb: newPDB(1, minTwo, 13, status(1, 3, 2, 3, 1))}, heartbeat(14))},
		{name: "computed before a deletion that came before its write", spec: minTwo, steps: append(three,
			add(stsPod("web", 2, "c", 13, "r1", ready, deleting(30))),
			step{pdb: newPDB(1, minTwo, 14, status(1, 3, 2, 3, 1))}, heartbeat(15))},
		{name: "overstated", spec: minTwo, steps: append(three,
			step{pdb: newPDB(1, minTwo, 13, status(1, 4, 2, 3, 2))}, heartbeat(14)),
			want: "pdb-status rv 13: status (observedGeneration 1) currentHealthy 4 desiredHealthy 2 expectedPods 3 disruptionsAllowed 2 matches no view of its pods from rv 0 to the write; disruptionsAllowed 2 is above what the healthy pods allow in every such view (at most 1)"},
		{name: "checked only once the pod watch passed the write", spec: minTwo, steps: append(three,
			step{pdb: newPDB(1, minTwo, 13, status(1, 4, 2, 3, 2))})},
		{name: "a view older than the previous status's", spec: minTwo, steps: append(three,
			step{pdb: newPDB(1, minTwo, 13, status(1, 3, 2, 3, 1))},
			add(stsPod("web", 2, "c", 14, "r1", ready, deleting(30))),
			step{pdb: newPDB(1, minTwo, 15, status(1, 2, 2, 3, 0))},
			add(stsPod("web", 1, "b", 16, "r1", ready, deleting(30))),
			// Not a view after the previous status's (rv 14: 2 healthy): 3 healthy is older.
			step{pdb: newPDB(1, minTwo, 17, status(1, 3, 2, 3, 1))}, heartbeat(18)),
			want: "pdb-status rv 17: status (observedGeneration 1) currentHealthy 3 desiredHealthy 2 expectedPods 3 disruptionsAllowed 1 matches no view of its pods from rv 14"},
		{name: "the spec of the observed generation", spec: minTwo, steps: append(three,
			step{pdb: newPDB(1, minTwo, 13, status(1, 3, 2, 3, 1))},
			step{pdb: newPDB(2, maxOne, 14, status(1, 3, 2, 3, 1))}, // the spec change
			step{pdb: newPDB(2, maxOne, 15, status(2, 3, 2, 3, 1))}, heartbeat(16))},
		{name: "a status for an older spec", spec: minTwo, steps: append(three,
			step{pdb: newPDB(2, maxOne, 13, status(1, 3, 2, 3, 1))},
			step{pdb: newPDB(2, maxOne, 14, status(2, 3, 2, 3, 1))},
			step{pdb: newPDB(2, maxOne, 15, status(1, 3, 2, 3, 1))}, heartbeat(16)),
			want: "pdb-observed-generation rv 15: status.observedGeneration 1 after 2"},
		{name: "percentage of the controller's scale", spec: half, steps: []step{
			add(stsPod("web", 0, "a", 10, "r1", ready)),
			step{pdb: newPDB(1, half, 11, status(1, 1, 2, 4, 0))}, heartbeat(12)}},
		{name: "percentage of the pods selected is wrong", spec: half, steps: []step{
			add(stsPod("web", 0, "a", 10, "r1", ready)),
			step{pdb: newPDB(1, half, 11, status(1, 1, 1, 1, 0))}, heartbeat(12)},
			want: "matches no view"},
		{name: "no disruption allowed without expected pods", spec: maxOne, steps: []step{
			step{pdb: newPDB(1, maxOne, 11, status(1, 0, 0, 0, 0))}, heartbeat(12)}},
		{name: "condition out of step", spec: minTwo, steps: append(three,
			step{pdb: newPDB(1, minTwo, 13, func() *policyv1.PodDisruptionBudgetStatus {
				s := status(1, 3, 2, 3, 1)
				s.Conditions[0].Status = metav1.ConditionFalse
				return s
			}())}, heartbeat(14)),
			want: "want True SufficientPods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(nil)
			c.AddStatefulSet(ns, "web", 4)
			if tc.name != "percentage of the controller's scale" && tc.name != "percentage of the pods selected is wrong" {
				c.AddStatefulSet(ns, "web", 3)
			}
			if err := c.AddPDB(newPDB(1, tc.spec, 1, nil)); err != nil {
				t.Fatal(err)
			}
			run(t, c, tc.steps)
			got := violations(c)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("violations:\n%s\nwant %q", got, tc.want)
			}
			r := c.Report()
			if tc.name == "checked only once the pod watch passed the write" && (r.PDBPending != 1 || r.PDBStatuses != 0) {
				t.Fatalf("pending %d, checked %d; want the status pending", r.PDBPending, r.PDBStatuses)
			}
		})
	}
}

func TestPDBLag(t *testing.T) {
	minTwo := policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2))}
	now := time.Unix(100, 0)
	c := New(func() time.Time { return now })
	c.AddStatefulSet(ns, "web", 3)
	if err := c.AddPDB(newPDB(1, minTwo, 1, nil)); err != nil {
		t.Fatal(err)
	}
	run(t, c, []step{add(stsPod("web", 0, "a", 10, "r1", ready)), add(stsPod("web", 1, "b", 11, "r1", ready)),
		add(stsPod("web", 2, "c", 12, "r1", ready)), {pdb: newPDB(1, minTwo, 13, status(1, 3, 2, 3, 1))}})
	now = now.Add(time.Second)
	run(t, c, []step{add(stsPod("web", 2, "c", 14, "r1", ready, deleting(30)))}) // allows 0 now
	now = now.Add(250 * time.Millisecond)
	run(t, c, []step{{pdb: newPDB(1, minTwo, 15, status(1, 2, 2, 3, 0))}})
	r := c.Report()
	if r.Lag.Episodes != 1 || r.Lag.Longest != 250*time.Millisecond || r.Lag.Open != 0 {
		t.Fatalf("lag %+v, want one episode of 250ms", r.Lag)
	}
	if v := violations(c); v != "" {
		t.Fatalf("violations:\n%s", v)
	}
}

func TestRecreations(t *testing.T) {
	for _, tc := range []struct {
		name        string
		steps       []step
		explained   int
		unexplained string
	}{
		{name: "each revision once", steps: []step{
			add(stsPod("web", 0, "a", 10, "r1")), del(stsPod("web", 0, "a", 11, "r1", deleting(30))),
			add(stsPod("web", 0, "b", 12, "r2")),
		}},
		{name: "kwok deleted the new pod by name", steps: []step{
			add(stsPod("web", 0, "a", 10, "r1")), add(stsPod("web", 0, "a", 11, "r1", deleting(30))), del(stsPod("web", 0, "a", 12, "r1", deleting(0))),
			add(stsPod("web", 0, "b", 13, "r2")), add(stsPod("web", 0, "b", 14, "r2", deleting(0))), del(stsPod("web", 0, "b", 15, "r2", deleting(0))),
			add(stsPod("web", 0, "c", 16, "r2")),
		}, explained: 1},
		{name: "the controller deleted a pod of the revision it then created again", steps: []step{
			add(stsPod("web", 0, "a", 10, "r1")), add(stsPod("web", 0, "a", 11, "r1", deleting(30))), del(stsPod("web", 0, "a", 12, "r1", deleting(0))),
			add(stsPod("web", 0, "b", 13, "r1")),
		}, unexplained: "StatefulSet ns/web ordinal 0: pod web-0 (uid b, created at rv 13"},
		{name: "a deletion seen only in the delete event", steps: []step{
			add(stsPod("web", 0, "a", 10, "r1")), del(stsPod("web", 0, "a", 12, "r1", deleting(0))),
			add(stsPod("web", 0, "b", 13, "r1")),
		}, explained: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(nil)
			run(t, c, tc.steps)
			created, explained, unexplained := c.Recreations()
			if created != countAdds(tc.steps) || explained != tc.explained || (tc.unexplained == "") != (len(unexplained) == 0) ||
				(tc.unexplained != "" && !strings.Contains(unexplained[0], tc.unexplained)) {
				t.Fatalf("created %d, explained %d, unexplained %q; want %d, %d, %q", created, explained, unexplained, countAdds(tc.steps), tc.explained, tc.unexplained)
			}
		})
	}
}

func countAdds(steps []step) int {
	uids := map[types.UID]bool{}
	for _, s := range steps {
		if s.pod != nil {
			uids[s.pod.UID] = true
		}
	}
	return len(uids)
}

func TestDeletedFinalStateUnknown(t *testing.T) {
	c := New(nil)
	pods, _ := c.Handlers()
	p := stsPod("web", 0, "a", 10, "r1")
	pods.OnAdd(p, false)
	pods.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: p})
	pods.OnAdd(stsPod("web", 0, "b", 20, "r2"), false)
	if r := c.Report(); r.UnknownDeletes != 1 || r.OrdinalChecks != 3 {
		t.Fatalf("report %+v", r)
	}
	if v := violations(c); v != "" {
		t.Fatalf("violations:\n%s", v)
	}
}

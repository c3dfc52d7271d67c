package disruption

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const key = "ns/pdb"

// status is what a test expects of a written status.
type status struct {
	healthy, desired, expected, allowed int32
	reason                              string   // of the DisruptionAllowed condition
	message                             string   // of the condition, checked when set
	disrupted                           []string // names kept in disruptedPods
}

func TestSync(t *testing.T) {
	pct := intstr.FromString
	num := intstr.FromInt32
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		setup   func(f *fixture)
		want    *status // nil: no status written
		events  []string
		recheck time.Duration // 0: not queued for a recheck
		wantErr bool
	}{
		{name: "number minAvailable met: one disruption allowed",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(2))), newPod("a"), newPod("b"), newPod("c")},
			want: &status{healthy: 3, desired: 2, expected: 3, allowed: 1, reason: policyv1.SufficientPodsReason}},
		{name: "number minAvailable not met: none allowed",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(3))), newPod("a"), newPod("b", notReady), newPod("c")},
			want: &status{healthy: 2, desired: 3, expected: 3, reason: policyv1.InsufficientPodsReason}},
		{name: "no pods: NoPods, nothing expected, none allowed",
			objs:   []runtime.Object{newPDB("pdb", minAvailable(num(0)))},
			want:   &status{reason: policyv1.InsufficientPodsReason},
			events: []string{"Normal NoPods No matching pods found"}},
		{name: "pods being deleted or not ready are not healthy, other labels not selected",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(1))), newPod("a"), newPod("b", deleting), newPod("c", notReady),
				newPod("d", labels(map[string]string{"app": "db"}))},
			want: &status{healthy: 1, desired: 1, expected: 3, reason: policyv1.InsufficientPodsReason}},
		{name: "maxUnavailable number through a Deployment's ReplicaSet",
			objs: []runtime.Object{newPDB("pdb", maxUnavailable(num(1))), newDeployment("web", 4), newRS("web-1", 3, "web"),
				newPod("a", ownedBy(rsKind, "web-1")), newPod("b", ownedBy(rsKind, "web-1")), newPod("c", ownedBy(rsKind, "web-1"))},
			want: &status{healthy: 3, desired: 3, expected: 4, reason: policyv1.InsufficientPodsReason}},
		{name: "maxUnavailable percentage rounds up, two ReplicaSets of one Deployment counted once",
			objs: []runtime.Object{newPDB("pdb", maxUnavailable(pct("25%"))), newDeployment("web", 5), newRS("web-1", 2, "web"), newRS("web-2", 3, "web"),
				newPod("a", ownedBy(rsKind, "web-1")), newPod("b", ownedBy(rsKind, "web-1")), newPod("c", ownedBy(rsKind, "web-2")),
				newPod("d", ownedBy(rsKind, "web-2")), newPod("e", ownedBy(rsKind, "web-2"))},
			want: &status{healthy: 5, desired: 3, expected: 5, allowed: 2, reason: policyv1.SufficientPodsReason}},
		{name: "minAvailable percentage of a bare ReplicaSet rounds up",
			objs: []runtime.Object{newPDB("pdb", minAvailable(pct("50%"))), newRS("rs", 3, ""),
				newPod("a", ownedBy(rsKind, "rs")), newPod("b", ownedBy(rsKind, "rs")), newPod("c", ownedBy(rsKind, "rs"))},
			want: &status{healthy: 3, desired: 2, expected: 3, allowed: 1, reason: policyv1.SufficientPodsReason}},
		{name: "an extensions ReplicaSet reference is a ReplicaSet",
			objs: []runtime.Object{newPDB("pdb", minAvailable(pct("100%"))), newRS("rs", 2, ""),
				newPod("a", ownedBy(extRSKnd, "rs")), newPod("b", ownedBy(extRSKnd, "rs"))},
			want: &status{healthy: 2, desired: 2, expected: 2, reason: policyv1.InsufficientPodsReason}},
		{name: "ReplicationController",
			objs: []runtime.Object{newPDB("pdb", maxUnavailable(pct("50%"))), newRC("rc", 4),
				newPod("a", ownedBy(rcKind, "rc")), newPod("b", ownedBy(rcKind, "rc")), newPod("c", ownedBy(rcKind, "rc"))},
			want: &status{healthy: 3, desired: 2, expected: 4, allowed: 1, reason: policyv1.SufficientPodsReason}},
		{name: "StatefulSet",
			objs: []runtime.Object{newPDB("pdb", maxUnavailable(num(1))), newStatefulSet("db", 3),
				newPod("db-0", ownedBy(ssKind, "db")), newPod("db-1", ownedBy(ssKind, "db")), newPod("db-2", ownedBy(ssKind, "db"))},
			want: &status{healthy: 3, desired: 2, expected: 3, allowed: 1, reason: policyv1.SufficientPodsReason}},
		{name: "a custom resource through its scale subresource",
			objs: []runtime.Object{newPDB("pdb", maxUnavailable(num(1))),
				newPod("a", ownedBy(widgetGVK, "w")), newPod("b", ownedBy(widgetGVK, "w"))},
			setup: func(f *fixture) { f.serveScale("widgets", "w", "uid-w", 3) },
			want:  &status{healthy: 2, desired: 2, expected: 3, reason: policyv1.InsufficientPodsReason}},
		{name: "a scale of another UID is not the pod's controller: fail safe",
			objs:  []runtime.Object{newPDB("pdb", maxUnavailable(num(1)), upToDate(2, 1, 2, 1)), newPod("a", ownedBy(widgetGVK, "w"))},
			setup: func(f *fixture) { f.serveScale("widgets", "w", "other-uid", 3) },
			want: &status{healthy: 2, desired: 1, expected: 2, reason: policyv1.SyncFailedReason,
				message: `found no controllers for pod "a"`},
			events: []string{`Warning CalculateExpectedPodCountFailed Failed to calculate the number of expected pods: found no controllers for pod "a"`}},
		{name: "a ReplicaSet whose Deployment is gone is found through its scale",
			objs: []runtime.Object{newPDB("pdb", minAvailable(pct("100%"))), newRS("web-1", 2, "web"),
				newPod("a", ownedBy(rsKind, "web-1"))},
			setup: func(f *fixture) { f.serveScale("replicasets", "web-1", "uid-web-1", 2) },
			want:  &status{healthy: 1, desired: 2, expected: 2, reason: policyv1.InsufficientPodsReason}},
		{name: "a missing controller with a scale subresource: found no controllers",
			objs:   []runtime.Object{newPDB("pdb", maxUnavailable(num(0))), newPod("a", ownedBy(widgetGVK, "gone"))},
			setup:  func(f *fixture) { f.notFoundScales() },
			want:   &status{reason: policyv1.SyncFailedReason, message: `found no controllers for pod "a"`},
			events: []string{`Warning CalculateExpectedPodCountFailed Failed to calculate the number of expected pods: found no controllers for pod "a"`}},
		{name: "a controller kind without a scale subresource",
			objs:  []runtime.Object{newPDB("pdb", maxUnavailable(num(0))), newPod("a", ownedBy(gadgetGVK, "g"))},
			setup: func(f *fixture) { f.notFoundScales() },
			want:  &status{reason: policyv1.SyncFailedReason, message: "gadgets.example.com does not implement the scale subresource"},
			events: []string{"Warning CalculateExpectedPodCountFailed Failed to calculate the number of expected pods: " +
				"gadgets.example.com does not implement the scale subresource"}},
		{name: "a kind nobody serves",
			objs: []runtime.Object{newPDB("pdb", maxUnavailable(num(0))),
				newPod("a", ownedBy(widgetGVK.GroupVersion().WithKind("Thing"), "x"))},
			want:   &status{reason: policyv1.SyncFailedReason, message: `no matches for kind "Thing" in version "example.com/v1"`},
			events: []string{`Warning CalculateExpectedPodCountFailed Failed to calculate the number of expected pods: no matches for kind "Thing" in version "example.com/v1"`}},
		{name: "unmanaged pods with a percentage: warned, not counted",
			objs: []runtime.Object{newPDB("pdb", minAvailable(pct("50%"))), newRS("rs", 2, ""),
				newPod("a", ownedBy(rsKind, "rs")), newPod("b", ownedBy(rsKind, "rs")), newPod("bare")},
			want: &status{healthy: 3, desired: 1, expected: 2, allowed: 2, reason: policyv1.SufficientPodsReason},
			events: []string{"Warning UnmanagedPods Pods selected by this PodDisruptionBudget (selector: &LabelSelector{MatchLabels:map[string]string{app: web,},MatchExpressions:[]LabelSelectorRequirement{},}) were found " +
				"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. " +
				"To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."}},
		{name: "unmanaged pods with a number minAvailable: no warning",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(1))), newPod("bare")},
			want: &status{healthy: 1, desired: 1, expected: 1, reason: policyv1.InsufficientPodsReason}},
		{name: "an invalid selector: NoPods warning, fail safe",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(1)), selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: "Bogus"}}}))},
			want:   &status{reason: policyv1.SyncFailedReason, message: `"Bogus" is not a valid label selector operator`},
			events: []string{`Warning NoPods Failed to get pods: "Bogus" is not a valid label selector operator`}},
		{name: "an empty selector selects every pod of the namespace",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(1)), selector(&metav1.LabelSelector{})), newPod("a"),
				newPod("b", labels(map[string]string{"app": "db"}))},
			want: &status{healthy: 2, desired: 1, expected: 2, allowed: 1, reason: policyv1.SufficientPodsReason}},
		{name: "neither minAvailable nor maxUnavailable: nothing expected",
			objs: []runtime.Object{newPDB("pdb"), newPod("a")},
			want: &status{healthy: 1, reason: policyv1.InsufficientPodsReason}},
		{name: "a pending disruption is not healthy, kept, and rechecked when it expires",
			objs:    []runtime.Object{newPDB("pdb", minAvailable(num(1)), disruptedAt("a", t0.Add(-30*time.Second))), newPod("a"), newPod("b")},
			want:    &status{healthy: 1, desired: 1, expected: 2, reason: policyv1.InsufficientPodsReason, disrupted: []string{"a"}},
			recheck: 90 * time.Second},
		{name: "the earliest of two pending disruptions decides the recheck",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(0)), disruptedAt("a", t0.Add(-30*time.Second)), disruptedAt("b", t0.Add(-100*time.Second))),
				newPod("a"), newPod("b"), newPod("c")},
			want:    &status{healthy: 1, desired: 0, expected: 3, allowed: 1, reason: policyv1.SufficientPodsReason, disrupted: []string{"a", "b"}},
			recheck: 20 * time.Second},
		{name: "an expired disruption is dropped with NotDeleted on the pod",
			objs:   []runtime.Object{newPDB("pdb", minAvailable(num(1)), disruptedAt("a", t0.Add(-3*time.Minute))), newPod("a"), newPod("b")},
			want:   &status{healthy: 2, desired: 1, expected: 2, allowed: 1, reason: policyv1.SufficientPodsReason},
			events: []string{"Warning NotDeleted Pod was expected by PDB ns/ns to be deleted but it wasn't"}},
		{name: "disruptions of pods being deleted or gone are dropped",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(1)), disruptedAt("a", t0.Add(-time.Second)), disruptedAt("gone", t0.Add(-time.Second))),
				newPod("a", deleting), newPod("b")},
			want: &status{healthy: 1, desired: 1, expected: 2, reason: policyv1.InsufficientPodsReason}},
		{name: "a status already up to date is not written",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(2)), upToDate(3, 2, 3, 1)), newPod("a"), newPod("b"), newPod("c")}},
		{name: "a new generation is written even with equal values",
			objs: []runtime.Object{newPDB("pdb", minAvailable(num(2)), upToDate(3, 2, 3, 1), func(p *policyv1.PodDisruptionBudget) { p.Generation = 2 }),
				newPod("a"), newPod("b"), newPod("c")},
			want: &status{healthy: 3, desired: 2, expected: 3, allowed: 1, reason: policyv1.SufficientPodsReason}},
		{name: "a budget not in the cache: nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.objs...)
			if tc.setup != nil {
				tc.setup(f)
			}
			err := f.Sync(key)
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error = %v, want error %v", err, tc.wantErr)
			}
			got, written := f.lastStatus()
			switch {
			case tc.want == nil && written:
				t.Errorf("status written: %+v", got)
			case tc.want != nil && !written:
				t.Errorf("no status written, want %+v", *tc.want)
			case tc.want != nil:
				checkStatus(t, got, *tc.want)
			}
			if ev := f.Events(); !slices.Equal(ev, tc.events) {
				t.Errorf("events\n %q\nwant\n %q", ev, tc.events)
			}
			rq := f.ctrl.recheck.(*controllertest.Queue)
			if d, ok := rq.After(key); tc.recheck != d || tc.recheck == 0 && ok {
				t.Errorf("recheck after %v (%v), want %v", d, ok, tc.recheck)
			}
		})
	}
}

func checkStatus(t *testing.T, got policyv1.PodDisruptionBudgetStatus, want status) {
	t.Helper()
	if got.CurrentHealthy != want.healthy || got.DesiredHealthy != want.desired || got.ExpectedPods != want.expected ||
		got.DisruptionsAllowed != want.allowed {
		t.Errorf("status healthy/desired/expected/allowed = %d/%d/%d/%d, want %d/%d/%d/%d", got.CurrentHealthy, got.DesiredHealthy,
			got.ExpectedPods, got.DisruptionsAllowed, want.healthy, want.desired, want.expected, want.allowed)
	}
	if got.ObservedGeneration == 0 && want.reason != policyv1.SyncFailedReason {
		t.Errorf("observedGeneration not set")
	}
	cond := apimeta.FindStatusCondition(got.Conditions, policyv1.DisruptionAllowedCondition)
	switch {
	case cond == nil:
		t.Errorf("no DisruptionAllowed condition")
	case cond.Reason != want.reason || (cond.Status == metav1.ConditionTrue) != (want.allowed > 0):
		t.Errorf("condition %s %s, want reason %s", cond.Status, cond.Reason, want.reason)
	case want.message != "" && !strings.Contains(cond.Message, want.message):
		t.Errorf("condition message %q, want it to contain %q", cond.Message, want.message)
	}
	if names := slices.Sorted(maps.Keys(got.DisruptedPods)); !slices.Equal(names, want.disrupted) {
		t.Errorf("disruptedPods %v, want %v", names, want.disrupted)
	}
}

// A conflict is retried as such: no fail-safe write over the newer budget.
func TestSyncConflictIsRetried(t *testing.T) {
	f := newFixture(t, newPDB("pdb", minAvailable(intstr.FromInt32(1))), newPod("a"), newPod("b"))
	f.Client.PrependReactor("update", "poddisruptionbudgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(policyv1.Resource("poddisruptionbudgets"), "pdb", nil)
	})
	if err := f.Sync(key); !apierrors.IsConflict(err) {
		t.Fatalf("sync error = %v, want a conflict", err)
	}
	if n := len(controllertest.Actions(f.Client, controllertest.Writes)); n != 1 {
		t.Errorf("%d writes, want the one status update", n)
	}
}

// The fail-safe keeps the last values but disruptionsAllowed, and its condition keeps the
// last observedGeneration: evictions are refused until a sync succeeds again.
func TestFailSafeKeepsValues(t *testing.T) {
	f := newFixture(t, newPDB("pdb", maxUnavailable(intstr.FromInt32(1)), upToDate(3, 2, 3, 1)), newPod("a", ownedBy(rcKind, "gone")))
	f.notFoundScales()
	f.MustSync(key)
	got, _ := f.lastStatus()
	checkStatus(t, got, status{healthy: 3, desired: 2, expected: 3, reason: policyv1.SyncFailedReason,
		message: `found no controllers for pod "a"`})
	if c := apimeta.FindStatusCondition(got.Conditions, policyv1.DisruptionAllowedCondition); c.ObservedGeneration != 1 {
		t.Errorf("condition observedGeneration %d, want 1", c.ObservedGeneration)
	}
}

func TestRecheckQueuesTheBudget(t *testing.T) {
	f := newFixture(t)
	if err := f.ctrl.syncRecheck(f.TestContext(), key); err != nil {
		t.Fatal(err)
	}
	if got := f.Queue.RateLimited(); !slices.Equal(got, []string{key}) {
		t.Errorf("budget queue got %v rate-limited, want %s", got, key)
	}
}

package disruption

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

const podKey = "ns/a"

func TestSyncStalePod(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod // nil: not cached
		wantReset bool
		wantAfter time.Duration // 0: not queued again
	}{
		{name: "gone: nothing"},
		{name: "no DisruptionTarget condition: nothing", pod: newPod("a")},
		{name: "stale: reset to False",
			pod: newPod("a", disruptionTarget(corev1.ConditionTrue, "EvictionByEvictionAPI", t0.Add(-2*time.Minute))), wantReset: true},
		{name: "not yet stale: queued for when it is",
			pod:       newPod("a", disruptionTarget(corev1.ConditionTrue, "EvictionByEvictionAPI", t0.Add(-30*time.Second))),
			wantAfter: 90 * time.Second},
		{name: "already False: nothing", pod: newPod("a", disruptionTarget(corev1.ConditionFalse, "", t0.Add(-time.Hour)))},
		{name: "terminating: nothing", pod: newPod("a", deleting, disruptionTarget(corev1.ConditionTrue, "EvictionByEvictionAPI", t0.Add(-time.Hour)))},
		{name: "set by the kubelet: nothing", pod: newPod("a", disruptionTarget(corev1.ConditionTrue, corev1.PodReasonTerminationByKubelet, t0.Add(-time.Hour)))},
		{name: "failed pod: nothing", pod: newPod("a", phase(corev1.PodFailed), disruptionTarget(corev1.ConditionTrue, "PreemptionByScheduler", t0.Add(-time.Hour)))},
		{name: "succeeded pod: nothing", pod: newPod("a", phase(corev1.PodSucceeded), disruptionTarget(corev1.ConditionTrue, "DeletionByTaintManager", t0.Add(-time.Hour)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.pod != nil {
				tc.pod.Generation = 3
				objs = append(objs, tc.pod)
			}
			f := newFixture(t, objs...)
			f.MustSync(podKeyFor(f))
			ups := controllertest.StatusUpdates[*corev1.Pod](f.Client)
			if (len(ups) > 0) != tc.wantReset {
				t.Fatalf("%d status updates, want reset %v", len(ups), tc.wantReset)
			}
			if tc.wantReset {
				c := condition(ups[0].Status.Conditions, corev1.DisruptionTarget)
				want := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, ObservedGeneration: 3,
					LastTransitionTime: c.LastTransitionTime}
				if *c != want || !c.LastTransitionTime.Time.Equal(t0) {
					t.Errorf("condition %+v, want %+v at %v", *c, want, t0)
				}
				if r := condition(ups[0].Status.Conditions, corev1.PodReady); r == nil || r.Status != corev1.ConditionTrue {
					t.Errorf("the Ready condition was changed: %+v", r)
				}
			}
			d, ok := f.ctrl.stale.(*controllertest.Queue).After(podKey)
			if tc.wantAfter != d || tc.wantAfter == 0 && ok {
				t.Errorf("queued again after %v (%v), want %v", d, ok, tc.wantAfter)
			}
		})
	}
}

// podKeyFor switches the fixture's sync to the stale pod queue's and returns its key.
func podKeyFor(f *fixture) string {
	f.SyncFunc = f.ctrl.syncStalePod
	return podKey
}

func TestSetConditionFalse(t *testing.T) {
	at := t0.Add(-time.Hour)
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		wantChanged bool
		wantTime    time.Time
	}{
		{name: "added when missing", pod: newPod("a"), wantChanged: true, wantTime: t0},
		{name: "True to False transitions now", pod: newPod("a", disruptionTarget(corev1.ConditionTrue, "r", at)), wantChanged: true, wantTime: t0},
		{name: "False with a reason loses it, keeps its time", pod: newPod("a", disruptionTarget(corev1.ConditionFalse, "r", at)),
			wantChanged: true, wantTime: at},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.pod.Status.DeepCopy()
			changed := setConditionFalse(st, corev1.DisruptionTarget, 1, metav1Time(t0))
			c := condition(st.Conditions, corev1.DisruptionTarget)
			if changed != tc.wantChanged || c.Status != corev1.ConditionFalse || c.Reason != "" || c.Message != "" ||
				!c.LastTransitionTime.Time.Equal(tc.wantTime) {
				t.Errorf("changed %v, condition %+v; want changed %v at %v", changed, *c, tc.wantChanged, tc.wantTime)
			}
			if again := setConditionFalse(st, corev1.DisruptionTarget, 1, metav1Time(t0.Add(time.Hour))); again {
				t.Errorf("a second reset changed the condition again")
			}
		})
	}
}

func TestPodHandlers(t *testing.T) {
	for _, tc := range []struct {
		name       string
		budgets    []runtime.Object
		pod        *corev1.Pod
		deleted    bool
		wantQueued int // budget keys queued
		wantEvents []string
		wantStale  time.Duration // -1: not queued
	}{
		{name: "no budget: nothing", pod: newPod("a"), wantStale: -1},
		{name: "one budget queued", budgets: []runtime.Object{newPDB("pdb", minAvailable(intstr.FromInt32(1)))}, pod: newPod("a"),
			wantQueued: 1, wantStale: -1},
		{name: "a budget of other pods is not queued",
			budgets: []runtime.Object{newPDB("pdb", minAvailable(intstr.FromInt32(1)))},
			pod:     newPod("a", labels(map[string]string{"app": "db"})), wantStale: -1},
		{name: "two budgets: one queued, a warning on the pod",
			budgets: []runtime.Object{newPDB("pdb", minAvailable(intstr.FromInt32(1))), newPDB("pdb2", maxUnavailable(intstr.FromInt32(1)))},
			pod:     newPod("a"), wantQueued: 1, wantStale: -1,
			wantEvents: []string{`Warning MultiplePodDisruptionBudgets Pod "ns"/"a" matches multiple PodDisruptionBudgets.  Chose "pdb*" arbitrarily.`}},
		{name: "a pod with a DisruptionTarget condition is queued for its staleness",
			pod:       newPod("a", disruptionTarget(corev1.ConditionTrue, "EvictionByEvictionAPI", t0.Add(-time.Minute))),
			wantStale: time.Minute},
		{name: "a deleted pod queues its budget, not itself",
			budgets: []runtime.Object{newPDB("pdb", minAvailable(intstr.FromInt32(1)))}, deleted: true, wantQueued: 1, wantStale: -1,
			pod: newPod("a", disruptionTarget(corev1.ConditionTrue, "EvictionByEvictionAPI", t0.Add(-time.Minute)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.budgets...)
			log := controllertest.Logger(t)
			if tc.deleted {
				f.ctrl.podChanged(log, cache.DeletedFinalStateUnknown{Key: podKey, Obj: tc.pod}, false)
			} else {
				f.ctrl.podChanged(log, tc.pod, true)
			}
			if got := f.Queue.Keys(); len(got) != tc.wantQueued {
				t.Errorf("queued %v, want %d budget(s)", got, tc.wantQueued)
			}
			events := f.Events()
			if len(events) != len(tc.wantEvents) {
				t.Fatalf("events %q, want %q", events, tc.wantEvents)
			}
			for i, e := range events {
				if ok := matchStar(tc.wantEvents[i], e); !ok {
					t.Errorf("event %q, want %q", e, tc.wantEvents[i])
				}
			}
			d, ok := f.ctrl.stale.(*controllertest.Queue).After(podKey)
			if tc.wantStale < 0 && ok || tc.wantStale >= 0 && d != tc.wantStale {
				t.Errorf("stale queue after %v (%v), want %v", d, ok, tc.wantStale)
			}
		})
	}
}

func TestBudgetHandlers(t *testing.T) {
	f := newFixture(t)
	log := controllertest.Logger(t)
	f.ctrl.enqueueBudget(log, newPDB("pdb"))
	f.ctrl.enqueueBudget(log, cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: newPDB("gone")})
	f.ctrl.enqueueBudget(log, "not a budget")
	if got := f.Queue.Keys(); !slices.Equal(got, []string{"ns/gone", key}) {
		t.Errorf("queued %v", got)
	}
}

func metav1Time(t time.Time) metav1.Time { return metav1.NewTime(t) }

// matchStar matches s against pattern, whose one "*" stands for any text.
func matchStar(pattern, s string) bool {
	before, after, found := strings.Cut(pattern, "*")
	if !found {
		return pattern == s
	}
	return len(s) >= len(before)+len(after) && strings.HasPrefix(s, before) && strings.HasSuffix(s, after)
}

package horizontalpodautoscaling

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

var webLabels = map[string]string{"app": "web"}

// TestReconcile checks one sync's outcome in each branch of upstream's reconcile: the
// scale written, the events, the conditions and the status.
func TestReconcile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hpa      *autoscalingv2.HorizontalPodAutoscaler
		others   []runtime.Object
		scale    int32 // -1: no scale served
		propose  int32
		failCalc bool
		wantErr  bool
		// want
		replicas   int32
		events     []string
		conditions map[autoscalingv2.HorizontalPodAutoscalerConditionType]string
		desired    int32
		scaled     bool
	}{{
		name: "scale up within the limit", hpa: newHPA("web"), scale: 2, propose: 3,
		replicas: 3, desired: 3, scaled: true,
		events: []string{"Normal SuccessfulRescale New size: 3; reason: " + cpuMetric + " above target"},
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{
			autoscalingv2.AbleToScale: "True SucceededRescale", autoscalingv2.ScalingActive: "True ValidMetricFound",
			autoscalingv2.ScalingLimited: "False DesiredWithinRange", autoscalingv2.ScaledToZero: "False NotScaledToZero"},
	}, {
		name: "scale up limited to twice the replicas", hpa: newHPA("web"), scale: 3, propose: 9,
		replicas: 6, desired: 6, scaled: true,
		events:     []string{"Normal SuccessfulRescale New size: 6; reason: " + cpuMetric + " above target"},
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingLimited: "True ScaleUpLimit"},
	}, {
		name: "scale up limited by maxReplicas", hpa: newHPA("web", withMinMax(1, 5)), scale: 4, propose: 8,
		replicas: 5, desired: 5, scaled: true,
		events:     []string{"Normal SuccessfulRescale New size: 5; reason: " + cpuMetric + " above target"},
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingLimited: "True TooManyReplicas"},
	}, {
		name: "a new HPA holds its first count for the window", hpa: newHPA("web"), scale: 4, propose: 2,
		replicas: 4, desired: 4,
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{
			autoscalingv2.AbleToScale: "True ScaleDownStabilized", autoscalingv2.ScalingLimited: "False DesiredWithinRange"},
	}, {
		name: "replicas above maxReplicas", hpa: newHPA("web", withMinMax(1, 3)), scale: 5, propose: 5,
		replicas: 3, desired: 3, scaled: true,
		events: []string{"Normal SuccessfulRescale New size: 3; reason: Current number of replicas above Spec.MaxReplicas"},
	}, {
		name: "replicas below minReplicas", hpa: newHPA("web", withMinMax(3, 6)), scale: 1, propose: 1,
		replicas: 3, desired: 3, scaled: true,
		events: []string{"Normal SuccessfulRescale New size: 3; reason: Current number of replicas below Spec.MinReplicas"},
	}, {
		name: "a target at zero is not scaled", hpa: newHPA("web"), scale: 0, propose: 4,
		replicas: 0, desired: 0,
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: "False ScalingDisabled"},
	}, {
		name: "no scale", hpa: newHPA("web"), scale: -1, propose: 4, wantErr: true,
		events:     []string{`Warning FailedGetScale deployments.apps "web" not found`},
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.AbleToScale: "False FailedGetScale"},
	}, {
		name: "unknown kind", hpa: newHPA("web", func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.ScaleTargetRef.Kind = "Widget" }),
		scale: 2, propose: 4, wantErr: true, replicas: 2,
		events:     []string{"Warning FailedGetScale no matches for apps/, Resource=Widget"}, // the fake mapper's words
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.AbleToScale: "False FailedGetScale"},
	}, {
		name: "metrics fail", hpa: newHPA("web"), scale: 2, failCalc: true, wantErr: true, replicas: 2,
		events: []string{"Warning FailedComputeMetricsReplicas invalid metrics (1 invalid out of 1), first error is: no metrics"},
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{
			autoscalingv2.AbleToScale: "True SucceededGetScale", autoscalingv2.ScalingActive: "False FailedGetResourceMetric"},
	}, {
		name: "ambiguous selector", hpa: newHPA("web"), scale: 2, propose: 4, wantErr: true, replicas: 2,
		others: []runtime.Object{newHPA("other", withTarget("web")), newPod("p", webLabels)},
		events: []string{"Warning AmbiguousSelector pods by selector app=web are controlled by more than one HPA (e.g. [ns/other ns/web])",
			"Warning FailedComputeMetricsReplicas pods by selector app=web are controlled by more than one HPA (e.g. [ns/other ns/web])"},
		conditions: map[autoscalingv2.HorizontalPodAutoscalerConditionType]string{autoscalingv2.ScalingActive: "False AmbiguousSelector"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := append([]runtime.Object{tc.hpa}, tc.others...)
			f := newFixture(t, objs...)
			if tc.scale >= 0 {
				f.serveScale("web", tc.scale)
			}
			f.calc.propose(tc.propose)
			if tc.failCalc {
				f.calc.replicas, f.calc.err = -1, errors.New("invalid metrics (1 invalid out of 1), first error is: no metrics")
				f.calc.cond = &autoscalingv2.HorizontalPodAutoscalerCondition{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse,
					Reason: "FailedGetResourceMetric", Message: "the HPA was unable to compute the replica count: no metrics"}
			}
			for _, o := range objs {
				if h, ok := o.(*autoscalingv2.HorizontalPodAutoscaler); ok {
					f.ctrl.addHPA(controllertest.Logger(t), h)
				}
			}
			if len(tc.others) > 0 {
				// As the other HPA's sync registers its selector.
				f.ctrl.selectors.putIfPresent("ns", "other", labels.SelectorFromSet(webLabels))
			}
			err := f.syncAt(t0)
			if (err != nil) != tc.wantErr {
				t.Fatalf("sync error %v, want error: %v", err, tc.wantErr)
			}
			if tc.scale >= 0 {
				if got := f.replicas("web"); got != tc.replicas {
					t.Errorf("scale replicas %d, want %d", got, tc.replicas)
				}
			}
			if got := f.Events(); !slices.Equal(got, tc.events) {
				t.Errorf("events\n%q\nwant\n%q", got, tc.events)
			}
			st, ok := f.status()
			if !ok {
				t.Fatal("no status written")
			}
			for ct, want := range tc.conditions {
				if got := f.condition(ct); got != want {
					t.Errorf("condition %s %q, want %q", ct, got, want)
				}
			}
			if st.DesiredReplicas != tc.desired {
				t.Errorf("desiredReplicas %d, want %d", st.DesiredReplicas, tc.desired)
			}
			if (st.LastScaleTime != nil) != tc.scaled {
				t.Errorf("lastScaleTime %v, want set: %v", st.LastScaleTime, tc.scaled)
			}
			if (st.ObservedGeneration == nil || *st.ObservedGeneration != 1) && !strings.HasPrefix(f.condition(autoscalingv2.AbleToScale), "False FailedGetScale") {
				t.Errorf("observedGeneration %v, want 1", st.ObservedGeneration)
			}
			if d, ok := f.Queue.Delayed()["ns/web"]; ok {
				t.Errorf("key added after %s, want rate-limited only", d)
			}
			if !slices.Contains(f.Queue.RateLimited(), "ns/web") {
				t.Error("key not re-added rate-limited after the sync")
			}
		})
	}
}

// TestStabilizationWindow checks the scale-down window without behavior: the highest
// recommendation of the last 5 minutes holds, then the count follows the metrics.
func TestStabilizationWindow(t *testing.T) {
	f := newFixture(t, newHPA("web"))
	f.ctrl.addHPA(controllertest.Logger(t), newHPA("web"))
	f.serveScale("web", 2)
	f.calc.propose(8)
	if err := f.syncAt(t0); err != nil {
		t.Fatal(err)
	}
	if got := f.replicas("web"); got != 4 {
		t.Fatalf("after the first sync %d replicas, want 4 (twice 2)", got)
	}
	f.calc.propose(1)
	for _, tc := range []struct {
		at   time.Duration
		want int32
	}{
		// The window holds the first recommendation, 8: the count goes on to 8 (twice 4).
		{15 * time.Second, 8}, {time.Minute, 8}, {5 * time.Minute, 8},
		// The recommendation of 8 is out of the window.
		{5*time.Minute + 15*time.Second, 1},
	} {
		if err := f.syncAt(t0.Add(tc.at)); err != nil {
			t.Fatal(err)
		}
		if got := f.replicas("web"); got != tc.want {
			t.Errorf("at t0+%s: %d replicas, want %d", tc.at, got, tc.want)
		}
	}
}

// TestDeletedHPA checks that a deleted HPA's key is not queued again and its history is
// dropped, by the delete handler (a namespace leaving the shard) and by the sync.
func TestDeletedHPA(t *testing.T) {
	hpa := newHPA("web")
	f := newFixture(t, hpa)
	f.ctrl.addHPA(controllertest.Logger(t), hpa)
	f.serveScale("web", 2)
	f.calc.propose(2)
	if err := f.syncAt(t0); err != nil {
		t.Fatal(err)
	}
	if f.ctrl.histories.len() != 1 {
		t.Fatalf("%d histories after a sync, want 1", f.ctrl.histories.len())
	}
	f.Uncache(hpa)
	f.ctrl.deleteHPA(controllertest.Logger(t), hpa)
	if n := f.ctrl.histories.len(); n != 0 {
		t.Errorf("%d histories after the delete, want 0", n)
	}
	before := len(f.Queue.RateLimited())
	if err := f.syncAt(t0.Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(f.Queue.RateLimited()) != before {
		t.Error("a deleted HPA's key was queued again")
	}
}

// TestUpdateHandler checks that a spec change queues the HPA at once and a status change
// only after the sync period.
func TestUpdateHandler(t *testing.T) {
	for _, tc := range []struct {
		name        string
		generation  int64
		immediate   bool
		rateLimited bool
	}{
		{name: "spec changed", generation: 2, immediate: true},
		{name: "status changed", generation: 1, rateLimited: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			old := newHPA("web")
			cur := old.DeepCopy()
			cur.Generation = tc.generation
			f.ctrl.updateHPA(controllertest.Logger(t), old, cur)
			if got := slices.Contains(f.Queue.Keys(), "ns/web"); got != tc.immediate {
				t.Errorf("queued at once: %v, want %v", got, tc.immediate)
			}
			if got := slices.Contains(f.Queue.RateLimited(), "ns/web"); got != tc.rateLimited {
				t.Errorf("queued rate-limited: %v, want %v", got, tc.rateLimited)
			}
		})
	}
}

// TestSelectorRequired checks a target whose scale has no selector.
func TestSelectorRequired(t *testing.T) {
	f := newFixture(t, newHPA("web"))
	f.ctrl.addHPA(controllertest.Logger(t), newHPA("web"))
	f.serveScale("web", 2)
	f.scales["web"].Status.Selector = ""
	if err := f.syncAt(t0); err == nil {
		t.Fatal("sync succeeded")
	}
	want := []string{"Warning SelectorRequired selector is required", "Warning FailedComputeMetricsReplicas selector is required"}
	if got := f.Events(); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if got := f.condition(autoscalingv2.ScalingActive); got != "False InvalidSelector" {
		t.Errorf("ScalingActive %q", got)
	}
}

// TestBehaviorPolicies checks a behavior's policies over several syncs: Pods 2 per 60 s
// up; scale-down disabled.
func TestBehaviorPolicies(t *testing.T) {
	disabled := autoscalingv2.DisabledPolicySelect
	hpa := newHPA("web", withMinMax(1, 20), withBehavior(&autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{SelectPolicy: &disabled, StabilizationWindowSeconds: ptr.To[int32](0)},
	}))
	f := newFixture(t, hpa)
	f.ctrl.addHPA(controllertest.Logger(t), hpa)
	f.serveScale("web", 2)
	f.calc.propose(10)
	for _, tc := range []struct {
		at   time.Duration
		want int32
	}{{0, 4}, {15 * time.Second, 4}, {45 * time.Second, 4}, {61 * time.Second, 6}, {90 * time.Second, 6}, {122 * time.Second, 8}} {
		if err := f.syncAt(t0.Add(tc.at)); err != nil {
			t.Fatal(err)
		}
		if got := f.replicas("web"); got != tc.want {
			t.Errorf("at t0+%s: %d replicas, want %d", tc.at, got, tc.want)
		}
	}
	if got := f.condition(autoscalingv2.ScalingLimited); got != "True ScaleUpLimit" {
		t.Errorf("ScalingLimited %q", got)
	}
	f.calc.propose(1)
	if err := f.syncAt(t0.Add(10 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := f.replicas("web"); got != 8 {
		t.Errorf("scale-down disabled: %d replicas, want 8", got)
	}
	if got := f.condition(autoscalingv2.ScalingLimited); got != "True ScaleDownLimit" {
		t.Errorf("ScalingLimited %q, want True ScaleDownLimit", got)
	}
}

// TestStatusWrittenOnlyWhenChanged checks that a sync that changes nothing writes nothing.
func TestStatusWrittenOnlyWhenChanged(t *testing.T) {
	f := newFixture(t, newHPA("web"))
	f.ctrl.addHPA(controllertest.Logger(t), newHPA("web"))
	f.serveScale("web", 2)
	f.calc.propose(2)
	if err := f.syncAt(t0); err != nil {
		t.Fatal(err)
	}
	written := controllertest.StatusUpdates[*autoscalingv2.HorizontalPodAutoscaler](f.Client)
	if len(written) != 1 {
		t.Fatalf("%d status writes, want 1", len(written))
	}
	f.Cache(written[0])
	if err := f.syncAt(t0.Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := len(controllertest.StatusUpdates[*autoscalingv2.HorizontalPodAutoscaler](f.Client)); n != 1 {
		t.Errorf("%d status writes after an idle sync, want still 1", n)
	}
	if strings.Contains(strings.Join(f.Events(), "\n"), "Rescale") {
		t.Error("an idle sync rescaled")
	}
}

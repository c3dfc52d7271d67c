package horizontalpodautoscaling

import (
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/utils/ptr"
)

func TestLimitWithoutBehavior(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		current, desired, min, max int32
		want                       int32
		reason                     string
	}{
		{name: "within range", current: 3, desired: 5, min: 1, max: 10, want: 5, reason: "DesiredWithinRange"},
		{name: "twice current", current: 3, desired: 9, min: 1, max: 10, want: 6, reason: "ScaleUpLimit"},
		{name: "at least four", current: 1, desired: 9, min: 1, max: 10, want: 4, reason: "ScaleUpLimit"},
		{name: "max below the rate limit", current: 3, desired: 9, min: 1, max: 5, want: 5, reason: "TooManyReplicas"},
		{name: "below min", current: 3, desired: 1, min: 2, max: 10, want: 2, reason: "TooFewReplicas"},
		{name: "scale down unlimited", current: 9, desired: 1, min: 1, max: 10, want: 1, reason: "DesiredWithinRange"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := limitWithoutBehavior(tc.current, tc.desired, tc.min, tc.max)
			if got.replicas != tc.want || got.reason != tc.reason {
				t.Errorf("got %d %s, want %d %s", got.replicas, got.reason, tc.want, tc.reason)
			}
		})
	}
}

func TestStabilizeWithBehavior(t *testing.T) {
	at := func(ago time.Duration) time.Time { return t0.Add(-ago) }
	for _, tc := range []struct {
		name             string
		recs             []recommendation
		current, desired int32
		up, down         time.Duration
		want             int32
		reason           string
	}{
		{name: "down window holds the highest", recs: []recommendation{{replicas: 8, at: at(time.Minute)}},
			current: 8, desired: 2, down: 5 * time.Minute, want: 8, reason: "ScaleDownStabilized"},
		{name: "down window passed", recs: []recommendation{{replicas: 8, at: at(6 * time.Minute)}},
			current: 8, desired: 2, down: 5 * time.Minute, want: 2, reason: "ScaleDownStabilized"},
		{name: "up window holds the lowest", recs: []recommendation{{replicas: 3, at: at(30 * time.Second)}},
			current: 3, desired: 9, up: time.Minute, want: 3, reason: "ScaleUpStabilized"},
		{name: "a rebuilt recommendation never holds a scale-up", recs: []recommendation{{replicas: 3, at: at(30 * time.Second), rebuilt: true}},
			current: 3, desired: 9, up: time.Minute, want: 9, reason: "ScaleUpStabilized"},
		{name: "a rebuilt recommendation holds a scale-down", recs: []recommendation{{replicas: 7, at: at(30 * time.Second), rebuilt: true}},
			current: 7, desired: 2, down: time.Minute, want: 7, reason: "ScaleDownStabilized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &history{recommendations: tc.recs}
			got, reason, _ := h.stabilizeWithBehavior(tc.current, tc.desired, t0, tc.up, tc.down)
			if got != tc.want || reason != tc.reason {
				t.Errorf("got %d %s, want %d %s", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestLimitWithBehavior(t *testing.T) {
	minSel, maxSel, disabled := autoscalingv2.MinChangePolicySelect, autoscalingv2.MaxChangePolicySelect, autoscalingv2.DisabledPolicySelect
	policies := []autoscalingv2.HPAScalingPolicy{
		{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 60},
		{Type: autoscalingv2.PercentScalingPolicy, Value: 50, PeriodSeconds: 60},
	}
	rules := func(sel autoscalingv2.ScalingPolicySelect) *autoscalingv2.HPAScalingRules {
		return &autoscalingv2.HPAScalingRules{SelectPolicy: &sel, Policies: policies, StabilizationWindowSeconds: ptr.To[int32](0)}
	}
	for _, tc := range []struct {
		name             string
		up, down         *autoscalingv2.HPAScalingRules
		history          history
		current, desired int32
		want             int32
		reason           string
	}{
		{name: "up Max: the larger of +4 and +50%", up: rules(maxSel), current: 10, desired: 30, want: 15, reason: "ScaleUpLimit"},
		{name: "up Min: the smaller", up: rules(minSel), current: 10, desired: 30, want: 14, reason: "ScaleUpLimit"},
		{name: "up Disabled", up: rules(disabled), current: 10, desired: 30, want: 10, reason: "ScaleUpLimit"},
		{name: "up within the maximum", up: rules(maxSel), current: 10, desired: 12, want: 12, reason: "DesiredWithinRange"},
		{name: "up counted from the period's start", up: rules(maxSel), current: 14,
			history: history{up: []scaleEvent{{change: 4, at: t0.Add(-30 * time.Second)}}}, desired: 30, want: 15, reason: "ScaleUpLimit"},
		{name: "up: an event out of the period does not count", up: rules(maxSel), current: 14,
			history: history{up: []scaleEvent{{change: 4, at: t0.Add(-90 * time.Second)}}}, desired: 30, want: 20, reason: "TooManyReplicas"},
		{name: "up to maxReplicas", up: rules(maxSel), current: 18, desired: 30, want: 20, reason: "TooManyReplicas"},
		{name: "down Max: the larger change", down: rules(maxSel), current: 10, desired: 1, want: 5, reason: "ScaleDownLimit"},
		{name: "down Min: the smaller change", down: rules(minSel), current: 10, desired: 1, want: 6, reason: "ScaleDownLimit"},
		{name: "down Disabled", down: rules(disabled), current: 10, desired: 1, want: 10, reason: "ScaleDownLimit"},
		{name: "down to minReplicas", down: rules(maxSel), current: 3, desired: 1, want: 2, reason: "TooFewReplicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := withBehaviorDefaults(&autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: tc.up, ScaleDown: tc.down}, 5*time.Minute)
			got := tc.history.limitWithBehavior(b, t0, tc.current, tc.desired, 2, 20)
			if got.replicas != tc.want || got.reason != tc.reason {
				t.Errorf("got %d %s, want %d %s", got.replicas, got.reason, tc.want, tc.reason)
			}
		})
	}
}

func TestBehaviorDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		behavior                 *autoscalingv2.HorizontalPodAutoscalerBehavior
		upWindow, downWindow     int32
		upPolicies, downPolicies int
	}{
		{name: "empty behavior", behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{}, upWindow: 0, downWindow: 300, upPolicies: 2, downPolicies: 1},
		{name: "own down window", behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
			ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](30)}}, upWindow: 0, downWindow: 30, upPolicies: 2, downPolicies: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := withBehaviorDefaults(tc.behavior, 5*time.Minute)
			if *b.ScaleUp.StabilizationWindowSeconds != tc.upWindow || *b.ScaleDown.StabilizationWindowSeconds != tc.downWindow {
				t.Errorf("windows %d/%d, want %d/%d", *b.ScaleUp.StabilizationWindowSeconds, *b.ScaleDown.StabilizationWindowSeconds, tc.upWindow, tc.downWindow)
			}
			if len(b.ScaleUp.Policies) != tc.upPolicies || len(b.ScaleDown.Policies) != tc.downPolicies {
				t.Errorf("policies %d/%d", len(b.ScaleUp.Policies), len(b.ScaleDown.Policies))
			}
			if tc.behavior.ScaleDown != nil && tc.behavior.ScaleDown.Policies != nil {
				t.Error("the HPA's behavior was changed")
			}
		})
	}
}

func TestStoreScaleEventReusesOutdated(t *testing.T) {
	b := withBehaviorDefaults(&autoscalingv2.HorizontalPodAutoscalerBehavior{}, 5*time.Minute)
	h := &history{}
	h.storeScaleEvent(b, 2, 4, t0)
	h.storeScaleEvent(b, 4, 6, t0.Add(10*time.Second))
	h.storeScaleEvent(b, 6, 9, t0.Add(time.Minute)) // both older ones are out of the 15 s period
	h.storeScaleEvent(b, 9, 7, t0.Add(time.Minute))
	h.storeScaleEvent(nil, 7, 1, t0.Add(time.Minute))
	if len(h.up) != 2 || h.up[1].change != 3 || len(h.down) != 1 || h.down[0].change != 2 {
		t.Errorf("up %+v down %+v", h.up, h.down)
	}
}

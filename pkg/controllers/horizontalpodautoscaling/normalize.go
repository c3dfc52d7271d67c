package horizontalpodautoscaling

import (
	"math"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// This file holds the normalisation of a metrics recommendation into the replica count
// the controller writes, as upstream's: the stabilisation windows, the rate limits (the
// fixed ×2/+4 limit without behavior, the behavior's policies and selectPolicy with it)
// and the min/max bounds. Its functions are pure: they take the HPA's history and the
// time, so that tables can test every branch.

// The scale-up limit without behavior: at most max(2 × current, 4) replicas at a time,
// against bogus usage reports (upstream's kubernetes#32304).
const (
	scaleUpLimitFactor  = 2.0
	scaleUpLimitMinimum = 4.0
)

// recommendation is one raw recommendation of the metrics at a time. A rebuilt one was
// not seen by this process but recovered from the HPA's status and events after the HPA
// came to it (rebuild.go): it only ever holds a scale-down back (it counts in the
// scale-down window's maximum, never in the scale-up window's minimum).
type recommendation struct {
	replicas int32
	at       time.Time
	rebuilt  bool
}

// scaleEvent is one rescale's change (non-negative) at a time; an outdated one is older
// than the direction's longest policy period and is reused by the next.
type scaleEvent struct {
	change   int32
	at       time.Time
	outdated bool
}

// history is what the controller remembers of one HPA between syncs: its recent
// recommendations and, with behavior, its recent rescales up and down.
type history struct {
	recommendations []recommendation
	up, down        []scaleEvent
}

// limited is a normalised replica count with the ScalingLimited reason and message that
// say what bounded it.
type limited struct {
	replicas        int32
	reason, message string
}

// withBehaviorDefaults returns behavior with every unset field filled as the API server
// defaults a behavior (scale up: window 0, Pods 4 and Percent 100 per 15 s, Max; scale
// down: Percent 100 per 15 s, Max) and the scale-down window, when unset, from
// --horizontal-pod-autoscaler-downscale-stabilization, as upstream's
// maybeInitScaleDownStabilizationWindow. The result shares nothing with behavior.
func withBehaviorDefaults(behavior *autoscalingv2.HorizontalPodAutoscalerBehavior, downWindow time.Duration) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	maxPolicy := autoscalingv2.MaxChangePolicySelect
	up := &autoscalingv2.HPAScalingRules{
		StabilizationWindowSeconds: new(int32),
		SelectPolicy:               &maxPolicy,
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15},
		},
	}
	maxDown := autoscalingv2.MaxChangePolicySelect
	down := &autoscalingv2.HPAScalingRules{
		SelectPolicy: &maxDown,
		Policies:     []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}},
	}
	b := behavior.DeepCopy()
	out := &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: fillRules(b.ScaleUp, up), ScaleDown: fillRules(b.ScaleDown, down)}
	if out.ScaleDown.StabilizationWindowSeconds == nil {
		w := int32(downWindow.Seconds())
		out.ScaleDown.StabilizationWindowSeconds = &w
	}
	return out
}

func fillRules(from, to *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if from == nil {
		return to
	}
	if from.SelectPolicy != nil {
		to.SelectPolicy = from.SelectPolicy
	}
	if from.StabilizationWindowSeconds != nil {
		to.StabilizationWindowSeconds = from.StabilizationWindowSeconds
	}
	if from.Policies != nil {
		to.Policies = from.Policies
	}
	if from.Tolerance != nil {
		to.Tolerance = from.Tolerance
	}
	return to
}

// record stores desired as the recommendation at now, in the place of an entry that old
// says is out of every window (the last such one, as upstream), or appended.
func (h *history) record(desired int32, now time.Time, old func(recommendation) bool) {
	idx := -1
	for i, r := range h.recommendations {
		if old(r) {
			idx = i
		}
	}
	rec := recommendation{replicas: desired, at: now}
	if idx >= 0 {
		h.recommendations[idx] = rec
		return
	}
	h.recommendations = append(h.recommendations, rec)
}

// stabilize is the stabilisation without behavior: the highest recommendation within
// window (the --horizontal-pod-autoscaler-downscale-stabilization flag), desired
// included, after recording desired.
func (h *history) stabilize(desired int32, now time.Time, window time.Duration) int32 {
	cutoff := now.Add(-window)
	highest := desired
	for _, r := range h.recommendations {
		if !r.at.Before(cutoff) && r.replicas > highest {
			highest = r.replicas
		}
	}
	h.record(desired, now, func(r recommendation) bool { return r.at.Before(cutoff) })
	return highest
}

// stabilizeWithBehavior is the stabilisation with behavior: current is raised to the
// lowest recommendation within the scale-up window and lowered to the highest within
// the scale-down window (desired included in both), after recording desired. It returns
// the AbleToScale reason and message for a stabilised count that differs from desired.
func (h *history) stabilizeWithBehavior(current, desired int32, now time.Time, upWindow, downWindow time.Duration) (int32, string, string) {
	upCutoff, downCutoff := now.Add(-upWindow), now.Add(-downWindow)
	upRec, downRec := desired, desired
	for _, r := range h.recommendations {
		if r.at.After(upCutoff) && !r.rebuilt {
			upRec = min(upRec, r.replicas)
		}
		if r.at.After(downCutoff) {
			downRec = max(downRec, r.replicas)
		}
	}
	stabilized := current
	if stabilized < upRec {
		stabilized = upRec
	}
	if stabilized > downRec {
		stabilized = downRec
	}
	h.record(desired, now, func(r recommendation) bool { return r.at.Before(upCutoff) && r.at.Before(downCutoff) })
	if desired >= current {
		return stabilized, "ScaleUpStabilized", "recent recommendations were lower than current one, applying the lowest recent recommendation"
	}
	return stabilized, "ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest recent recommendation"
}

// limitWithoutBehavior bounds desired by minReplicas, maxReplicas and the fixed scale-up
// limit max(2 × current, 4).
func limitWithoutBehavior(current, desired, minReplicas, maxReplicas int32) limited {
	upLimit := int32(math.Max(scaleUpLimitFactor*float64(current), scaleUpLimitMinimum))
	highest, reason, message := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
	if maxReplicas > upLimit {
		highest, reason, message = upLimit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
	}
	switch {
	case desired < minReplicas:
		return limited{minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"}
	case desired > highest:
		return limited{highest, reason, message}
	}
	return limited{desired, "DesiredWithinRange", "the desired count is within the acceptable range"}
}

// limitWithBehavior bounds desired by the behavior's policies over the recent rescales,
// and by minReplicas and maxReplicas.
func (h *history) limitWithBehavior(b *autoscalingv2.HorizontalPodAutoscalerBehavior, now time.Time, current, desired, minReplicas, maxReplicas int32) limited {
	switch {
	case desired > current:
		upLimit := max(scaleUpLimit(current, h.up, h.down, b.ScaleUp, now), current)
		highest, reason, message := maxReplicas, "TooManyReplicas", "the desired replica count is more than the maximum replica count"
		if maxReplicas > upLimit {
			highest, reason, message = upLimit, "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate"
		}
		if desired > highest {
			return limited{highest, reason, message}
		}
	case desired < current:
		downLimit := min(scaleDownLimit(current, h.up, h.down, b.ScaleDown, now), current)
		lowest, reason, message := minReplicas, "TooFewReplicas", "the desired replica count is less than the minimum replica count"
		if minReplicas < downLimit {
			lowest, reason, message = downLimit, "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate"
		}
		if desired < lowest {
			return limited{lowest, reason, message}
		}
	}
	return limited{desired, "DesiredWithinRange", "the desired count is within the acceptable range"}
}

// changeWithin sums the changes of events newer than period before now.
func changeWithin(events []scaleEvent, periodSeconds int32, now time.Time) int32 {
	cutoff := now.Add(-time.Duration(periodSeconds) * time.Second)
	var sum int32
	for _, e := range events {
		if e.at.After(cutoff) {
			sum += e.change
		}
	}
	return sum
}

// scaleUpLimit is the highest count the scale-up rules allow: each policy's limit from
// the count at its period's start, the most permissive (Max) or least (Min) of them, or
// current when scaling up is Disabled.
func scaleUpLimit(current int32, up, down []scaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	sel := autoscalingv2.MaxChangePolicySelect
	if rules.SelectPolicy != nil {
		sel = *rules.SelectPolicy
	}
	if sel == autoscalingv2.DisabledPolicySelect {
		return current
	}
	result := int32(math.MinInt32)
	pick := func(a, b int32) int32 { return max(a, b) }
	if sel == autoscalingv2.MinChangePolicySelect {
		result, pick = math.MaxInt32, func(a, b int32) int32 { return min(a, b) }
	}
	for _, p := range rules.Policies {
		start := current - changeWithin(up, p.PeriodSeconds, now) + changeWithin(down, p.PeriodSeconds, now)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start + p.Value
		case autoscalingv2.PercentScalingPolicy:
			// Rounded up, or a small count would never grow.
			proposed = int32(math.Ceil(float64(start) * (1 + float64(p.Value)/100)))
		}
		result = pick(result, proposed)
	}
	return result
}

// scaleDownLimit is the lowest count the scale-down rules allow, as scaleUpLimit.
func scaleDownLimit(current int32, up, down []scaleEvent, rules *autoscalingv2.HPAScalingRules, now time.Time) int32 {
	sel := autoscalingv2.MaxChangePolicySelect
	if rules.SelectPolicy != nil {
		sel = *rules.SelectPolicy
	}
	if sel == autoscalingv2.DisabledPolicySelect {
		return current
	}
	result := int32(math.MaxInt32)
	pick := func(a, b int32) int32 { return min(a, b) }
	if sel == autoscalingv2.MinChangePolicySelect {
		result, pick = math.MinInt32, func(a, b int32) int32 { return max(a, b) }
	}
	for _, p := range rules.Policies {
		start := current - changeWithin(up, p.PeriodSeconds, now) + changeWithin(down, p.PeriodSeconds, now)
		var proposed int32
		switch p.Type {
		case autoscalingv2.PodsScalingPolicy:
			proposed = start - p.Value
		case autoscalingv2.PercentScalingPolicy:
			proposed = int32(float64(start) * (1 - float64(p.Value)/100))
		}
		result = pick(result, proposed)
	}
	return result
}

// longestPeriod is the longest policy period of rules, in seconds.
func longestPeriod(rules *autoscalingv2.HPAScalingRules) int32 {
	var longest int32
	if rules == nil {
		return 0
	}
	for _, p := range rules.Policies {
		longest = max(longest, p.PeriodSeconds)
	}
	return longest
}

// storeScaleEvent remembers a rescale from prev to next at now in its direction's
// events, in the place of an event older than the direction's longest policy period, or
// appended. Nothing is kept without behavior (nothing reads it).
func (h *history) storeScaleEvent(b *autoscalingv2.HorizontalPodAutoscalerBehavior, prev, next int32, now time.Time) {
	if b == nil {
		return
	}
	if next > prev {
		h.up = storeEvent(h.up, next-prev, longestPeriod(b.ScaleUp), now)
	} else {
		h.down = storeEvent(h.down, prev-next, longestPeriod(b.ScaleDown), now)
	}
}

func storeEvent(events []scaleEvent, change, longest int32, now time.Time) []scaleEvent {
	cutoff := now.Add(-time.Duration(longest) * time.Second)
	idx := -1
	for i := range events {
		if events[i].at.Before(cutoff) {
			events[i].outdated = true
		}
		if events[i].outdated {
			idx = i
		}
	}
	e := scaleEvent{change: change, at: now}
	if idx >= 0 {
		events[idx] = e
		return events
	}
	return append(events, e)
}

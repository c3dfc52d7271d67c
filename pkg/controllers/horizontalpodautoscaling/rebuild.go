package horizontalpodautoscaling

import (
	"fmt"
	"slices"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// This file rebuilds an HPA's history when it comes to this process with none: after a
// restart, and when its namespace moves here from another shard. Upstream forgets the
// history on a restart and seeds the window with the current count only; a namespace
// moves far more often than kube-controller-manager restarts, so kshard recovers what
// the previous owner knew from what it left in the API: the HPA's status and its own
// SuccessfulRescale events (docs/controllers.md, "The HPA's history after a move").

// rescaleEventReason is the reason of the event a successful rescale records.
const rescaleEventReason = "SuccessfulRescale"

// rescale is one successful rescale read back from an event.
type rescale struct {
	size int32
	// up is the direction the reason names; known is false when it names none.
	up, known bool
	at        time.Time
}

// rebuildResult says what a rebuild recovered.
type rebuildResult struct {
	// rescales is how many rescales the events told; fromStatus is true when the status's
	// lastScaleTime added one the events did not have.
	rescales   int
	fromStatus bool
	// incomplete counts rescales within a policy period whose change could not be told
	// (no older rescale, or the size moved against the reason's direction in between).
	incomplete int
}

// horizon is how far back a rebuild looks: the longest of the windows and, with
// behavior, of the policy periods. b is the defaulted behavior, nil without one.
func horizon(b *autoscalingv2.HorizontalPodAutoscalerBehavior, downWindow time.Duration) time.Duration {
	if b == nil {
		return downWindow
	}
	secs := max(*b.ScaleDown.StabilizationWindowSeconds, *b.ScaleUp.StabilizationWindowSeconds,
		longestPeriod(b.ScaleUp), longestPeriod(b.ScaleDown))
	return time.Duration(secs) * time.Second
}

// needsEvents reports whether hpa's last rescale is recent enough for a rebuild to read
// its events: most HPAs have not scaled within the horizon and cost no request.
func needsEvents(hpa *autoscalingv2.HorizontalPodAutoscaler, b *autoscalingv2.HorizontalPodAutoscalerBehavior, downWindow time.Duration, now time.Time) bool {
	last := hpa.Status.LastScaleTime
	return last != nil && last.Time.After(now.Add(-horizon(b, downWindow)))
}

// rescaleEventSelector selects the SuccessfulRescale events of the HPA with uid that a
// horizontal pod autoscaler recorded (every field is selectable for core events).
func rescaleEventSelector(hpa *autoscalingv2.HorizontalPodAutoscaler) string {
	return fields.Set{
		"involvedObject.uid": string(hpa.UID),
		"reason":             rescaleEventReason,
		"source":             EventSource,
	}.String()
}

// rescalesOf reads the rescales of hpa from events, oldest first; events of other
// objects, reasons or sources, and messages that do not parse, are skipped.
func rescalesOf(hpa *autoscalingv2.HorizontalPodAutoscaler, events []corev1.Event) []rescale {
	var out []rescale
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.UID != hpa.UID || e.Reason != rescaleEventReason || e.Source.Component != EventSource {
			continue
		}
		var size int32
		if _, err := fmt.Sscanf(e.Message, "New size: %d;", &size); err != nil {
			continue
		}
		_, reason, _ := strings.Cut(e.Message, "; reason: ")
		r := rescale{size: size, at: eventTime(e)}
		switch {
		case strings.HasSuffix(reason, " above target"), reason == "Current number of replicas below Spec.MinReplicas":
			r.up, r.known = true, true
		case reason == "All metrics below target", reason == "Current number of replicas above Spec.MaxReplicas":
			r.known = true
		}
		if r.at.IsZero() {
			continue
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b rescale) int { return a.at.Compare(b.at) })
	return out
}

// eventTime is when an event last happened: its lastTimestamp, or for an event of the
// events API its series' last observation or its eventTime.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	}
	return e.EventTime.Time
}

// rebuild returns hpa's history as it comes to this process at now with current
// replicas: upstream's seed (current at now), and, from its rescales and its status,
//
//   - each rescale to N at t within the scale-down window as a recommendation N at t: the
//     previous owner had a recommendation of at least N no earlier than that, so the
//     rebuilt window does not let the count below N before t plus the window (it may hold
//     it up to one window longer than the previous owner's would have). Recommendations
//     that led to no rescale are not recovered. Rebuilt recommendations count in the
//     scale-down window only.
//   - with behavior, each rescale within its direction's longest policy period as a scale
//     event of the change from the rescale before it, so the policies' allowance is not
//     renewed by the move.
//   - the status's lastScaleTime and desiredReplicas as a recommendation when the events
//     lack that rescale (events are best effort).
//
// b is the defaulted behavior (nil without one), downWindow the flag's window.
func rebuild(hpa *autoscalingv2.HorizontalPodAutoscaler, b *autoscalingv2.HorizontalPodAutoscalerBehavior, downWindow time.Duration,
	current int32, rescales []rescale, now time.Time) (*history, rebuildResult) {
	h := &history{recommendations: []recommendation{{replicas: current, at: now}}}
	res := rebuildResult{rescales: len(rescales)}
	window := downWindow
	if b != nil {
		window = time.Duration(*b.ScaleDown.StabilizationWindowSeconds) * time.Second
	}
	cutoff := now.Add(-window)
	for _, r := range rescales {
		if r.at.After(cutoff) {
			h.recommendations = append(h.recommendations, recommendation{replicas: r.size, at: r.at, rebuilt: true})
		}
	}
	if last := hpa.Status.LastScaleTime; last != nil && last.Time.After(cutoff) &&
		(len(rescales) == 0 || last.Time.After(rescales[len(rescales)-1].at.Add(time.Second))) {
		h.recommendations = append(h.recommendations, recommendation{replicas: hpa.Status.DesiredReplicas, at: last.Time, rebuilt: true})
		res.fromStatus = true
	}
	if b == nil {
		return h, res
	}
	upCutoff := now.Add(-time.Duration(longestPeriod(b.ScaleUp)) * time.Second)
	downCutoff := now.Add(-time.Duration(longestPeriod(b.ScaleDown)) * time.Second)
	for i, r := range rescales {
		relevant := (r.up && r.at.After(upCutoff)) || (!r.up && r.at.After(downCutoff))
		if !r.known || !relevant {
			if !r.known && (r.at.After(upCutoff) || r.at.After(downCutoff)) {
				res.incomplete++
			}
			continue
		}
		prev, ok := predecessor(hpa, rescales, i)
		if !ok {
			res.incomplete++
			continue
		}
		change := r.size - prev
		switch {
		case r.up && change > 0:
			h.up = append(h.up, scaleEvent{change: change, at: r.at})
		case !r.up && change < 0:
			h.down = append(h.down, scaleEvent{change: -change, at: r.at})
		default:
			// The target was scaled by someone else in between: the change is unknown.
			res.incomplete++
		}
	}
	return h, res
}

// predecessor is the count rescales[i] changed: the size of the rescale before it, or for
// the only rescale told, the status's currentReplicas when the status is that rescale's
// (a sync writes the count it found and the count it set, and lastScaleTime; the next
// sync overwrites currentReplicas).
func predecessor(hpa *autoscalingv2.HorizontalPodAutoscaler, rescales []rescale, i int) (int32, bool) {
	if i > 0 {
		return rescales[i-1].size, true
	}
	st := hpa.Status
	if len(rescales) == 1 && st.LastScaleTime != nil && st.DesiredReplicas == rescales[0].size && st.CurrentReplicas != st.DesiredReplicas {
		if d := st.LastScaleTime.Time.Sub(rescales[0].at); d > -2*time.Second && d < 2*time.Second {
			return st.CurrentReplicas, true
		}
	}
	return 0, false
}

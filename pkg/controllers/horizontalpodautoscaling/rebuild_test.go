package horizontalpodautoscaling

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

// TestRescalesOf checks which events a rebuild reads, and how.
func TestRescalesOf(t *testing.T) {
	hpa := newHPA("web")
	other := newHPA("other")
	ev := func(name, msg string, at time.Duration, mut ...func(*corev1.Event)) corev1.Event {
		e := *rescaleEvent(hpa, name, msg, t0.Add(at))
		for _, m := range mut {
			m(&e)
		}
		return e
	}
	events := []corev1.Event{
		ev("late", "New size: 2; reason: All metrics below target", -10*time.Second),
		ev("early", "New size: 8; reason: cpu resource utilization (percentage of request) above target", -60*time.Second),
		ev("max", "New size: 5; reason: Current number of replicas above Spec.MaxReplicas", -30*time.Second),
		ev("min", "New size: 3; reason: Current number of replicas below Spec.MinReplicas", -40*time.Second),
		ev("odd", "New size: 4; reason: something else", -20*time.Second),
		ev("garbled", "Scaled to four", -5*time.Second),
		*rescaleEvent(other, "other", "New size: 9; reason: x above target", t0),
		ev("failed", "New size: 9; reason: x above target", 0, func(e *corev1.Event) { e.Reason = "FailedRescale" }),
		ev("foreign", "New size: 9; reason: x above target", 0, func(e *corev1.Event) { e.Source.Component = "someone" }),
		ev("series", "New size: 6; reason: All metrics below target", 0, func(e *corev1.Event) {
			e.LastTimestamp = metav1.Time{}
			e.Series = &corev1.EventSeries{LastObservedTime: metav1.MicroTime{Time: t0.Add(-time.Second)}}
		}),
	}
	got := rescalesOf(hpa, events)
	var parts []string
	for _, r := range got {
		parts = append(parts, fmt.Sprintf("%d@%s up=%v known=%v", r.size, r.at.Sub(t0), r.up, r.known))
	}
	want := "8@-1m0s up=true known=true, 3@-40s up=true known=true, 5@-30s up=false known=true, 4@-20s up=false known=false, 2@-10s up=false known=true, 6@-1s up=false known=true"
	if s := strings.Join(parts, ", "); s != want {
		t.Errorf("rescales\n%s\nwant\n%s", s, want)
	}
}

// TestRebuild checks the history rebuilt from rescales and status, by table.
func TestRebuild(t *testing.T) {
	up := func(size int32, ago time.Duration) rescale {
		return rescale{size: size, up: true, known: true, at: t0.Add(-ago)}
	}
	down := func(size int32, ago time.Duration) rescale {
		return rescale{size: size, known: true, at: t0.Add(-ago)}
	}
	pods2per60 := &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp:   &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](120)},
	}
	for _, tc := range []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
		status   func(*autoscalingv2.HorizontalPodAutoscaler)
		rescales []rescale
		// want: recommendations as "N@-ago" (rebuilt ones with *), up and down events
		recs, ups, downs string
		incomplete       int
	}{{
		name: "nothing to rebuild", recs: "4@0s",
	}, {
		name:     "rescales within the window become recommendations",
		rescales: []rescale{up(6, 10*time.Minute), up(8, 4*time.Minute), down(5, time.Minute)},
		recs:     "4@0s 8@-4m0s* 5@-1m0s*",
	}, {
		name:   "the status's rescale when the events lack it",
		status: withLastScale(t0.Add(-2*time.Minute), 4, 9), recs: "4@0s 9@-2m0s*",
	}, {
		name: "the status's rescale when the events have it", rescales: []rescale{up(9, 2*time.Minute)},
		status: withLastScale(t0.Add(-2*time.Minute), 9, 9), recs: "4@0s 9@-2m0s*",
	}, {
		name:     "behavior: scale events within the policy periods",
		behavior: pods2per60,
		rescales: []rescale{up(4, 5*time.Minute), up(6, 50*time.Second), up(7, 20*time.Second), down(5, 10*time.Second)},
		recs:     "4@0s 6@-50s* 7@-20s* 5@-10s*", ups: "2@-50s 1@-20s", downs: "2@-10s",
	}, {
		name:     "behavior: the only rescale's change from the status",
		behavior: pods2per60, rescales: []rescale{up(4, 10*time.Second)}, status: withLastScale(t0.Add(-10*time.Second), 2, 4),
		recs: "4@0s 4@-10s*", ups: "2@-10s",
	}, {
		name:     "behavior: the only rescale's change unknown",
		behavior: pods2per60, rescales: []rescale{up(4, 10*time.Second)}, status: withLastScale(t0.Add(-10*time.Second), 4, 4),
		recs: "4@0s 4@-10s*", incomplete: 1,
	}, {
		name:     "behavior: a size against its reason's direction (scaled by someone else in between)",
		behavior: pods2per60, rescales: []rescale{up(8, 40*time.Second), up(6, 20*time.Second)},
		// Both unknown: the first has no rescale before it.
		recs: "4@0s 8@-40s* 6@-20s*", incomplete: 2,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			hpa := newHPA("web", withBehavior(tc.behavior))
			if tc.status != nil {
				tc.status(hpa)
			}
			var b *autoscalingv2.HorizontalPodAutoscalerBehavior
			if tc.behavior != nil {
				b = withBehaviorDefaults(tc.behavior, 5*time.Minute)
			}
			h, res := rebuild(hpa, b, 5*time.Minute, 4, tc.rescales, t0)
			var recs, ups, downs []string
			for _, r := range h.recommendations {
				s := fmt.Sprintf("%d@%s", r.replicas, r.at.Sub(t0))
				if r.rebuilt {
					s += "*"
				}
				recs = append(recs, s)
			}
			for _, e := range h.up {
				ups = append(ups, fmt.Sprintf("%d@%s", e.change, e.at.Sub(t0)))
			}
			for _, e := range h.down {
				downs = append(downs, fmt.Sprintf("%d@%s", e.change, e.at.Sub(t0)))
			}
			if got := strings.Join(recs, " "); got != tc.recs {
				t.Errorf("recommendations %q, want %q", got, tc.recs)
			}
			if got := strings.Join(ups, " "); got != tc.ups {
				t.Errorf("scale-up events %q, want %q", got, tc.ups)
			}
			if got := strings.Join(downs, " "); got != tc.downs {
				t.Errorf("scale-down events %q, want %q", got, tc.downs)
			}
			if res.incomplete != tc.incomplete {
				t.Errorf("incomplete %d, want %d", res.incomplete, tc.incomplete)
			}
		})
	}
}

// persistEvents stores the events the fixture's recorder recorded for hpa since the
// last call in the fake API server, at the fixture's time, as the shard's event sink
// would: what a namespace's next owner finds.
func (f *fixture) persistEvents(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	for i, e := range f.Events() {
		typ, rest, _ := strings.Cut(e, " ")
		reason, msg, _ := strings.Cut(rest, " ")
		ev := rescaleEvent(hpa, fmt.Sprintf("%s.%d.%d", hpa.Name, f.clock.Now().Unix(), i), msg, f.clock.Now())
		ev.Type, ev.Reason = typ, reason
		if _, err := f.Client.CoreV1().Events(hpa.Namespace).Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
			f.T.Fatal(err)
		}
	}
}

// stored is the HPA as the fake API server holds it (with the status written).
func (f *fixture) stored() *autoscalingv2.HorizontalPodAutoscaler {
	return controllertest.Get[*autoscalingv2.HorizontalPodAutoscaler](f.T, f.Client, "ns", "web")
}

// step syncs at t0+at, caching the status written and persisting the events.
func (f *fixture) step(at time.Duration) {
	f.T.Helper()
	if err := f.syncAt(t0.Add(at)); err != nil {
		f.T.Fatal(err)
	}
	f.persistEvents(f.stored())
	f.Cache(f.stored())
}

// TestMove checks that an HPA that moves to another owner (or whose owner restarts)
// does not get ahead of what the previous owner would have done: each case runs the same
// trace on one owner and with a move at the given time, and compares the counts; a run
// whose new owner finds no events and no status (what upstream's restart knows) shows
// that the comparison can fail.
func TestMove(t *testing.T) {
	podsPolicy := &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 2, PeriodSeconds: 60}}},
	}
	type step struct {
		at       time.Duration
		propose  int32
		scaleTo  int32 // > 0: someone else scales the target to this first
		replicas int32 // after the sync, on one owner
	}
	for _, tc := range []struct {
		name     string
		behavior *autoscalingv2.HorizontalPodAutoscalerBehavior
		steps    []step
		moveAt   time.Duration // the move happens before the first step at or after it
		// forgetful is the count at the last step when the new owner knows nothing.
		forgetful int32
	}{{
		name: "window without behavior, target scaled down by someone else before the move",
		steps: []step{
			{at: 0, propose: 8, replicas: 4}, {at: 15 * time.Second, propose: 8, replicas: 8},
			{at: 30 * time.Second, propose: 2, scaleTo: 3, replicas: 6},
		},
		moveAt: 30 * time.Second, forgetful: 3,
	}, {
		name:     "scale-up policy right after a scale-up",
		behavior: podsPolicy,
		steps: []step{
			{at: 0, propose: 2, replicas: 2}, {at: 15 * time.Second, propose: 10, replicas: 4},
			{at: 25 * time.Second, propose: 10, replicas: 4}, {at: 80 * time.Second, propose: 10, replicas: 6},
		},
		moveAt: 25 * time.Second, forgetful: 6,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(move, forget bool) []int32 {
				hpa := newHPA("web", withMinMax(1, 20), withBehavior(tc.behavior))
				f := newFixture(t, hpa)
				f.ctrl.addHPA(controllertest.Logger(t), hpa)
				f.serveScale("web", 2)
				var got []int32
				for _, s := range tc.steps {
					if move && s.at == tc.moveAt {
						cur := f.stored()
						if forget {
							for _, e := range controllertest.Stored[*corev1.Event](t, f.Client, "ns") {
								_ = f.Client.CoreV1().Events("ns").Delete(context.Background(), e.Name, metav1.DeleteOptions{})
							}
							cur.Status.LastScaleTime = nil
						}
						objs := []runtime.Object{cur}
						f.restart(objs...)
					}
					if s.scaleTo > 0 {
						f.serveScale("web", s.scaleTo)
					}
					f.calc.propose(s.propose)
					f.step(s.at)
					got = append(got, f.replicas("web"))
				}
				return got
			}
			var want []int32
			for _, s := range tc.steps {
				want = append(want, s.replicas)
			}
			if got := run(false, false); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("one owner: counts %v, want %v", got, want)
			}
			if got := run(true, false); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("moved: counts %v, want %v (as one owner)", got, want)
			}
			got := run(true, true)
			if last := got[len(got)-1]; last != tc.forgetful {
				t.Errorf("a new owner that knows nothing: last count %d, want %d (the case would not tell a rebuild from none)", last, tc.forgetful)
			}
		})
	}
}

// TestRebuildReadsEventsOnlyWhenRecent checks that an HPA that has not scaled within the
// horizon costs no request when it comes to a new owner.
func TestRebuildReadsEventsOnlyWhenRecent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lastScale *time.Time
		lists     int
	}{
		{name: "never scaled", lists: 0},
		{name: "scaled long ago", lastScale: ptr.To(t0.Add(-time.Hour)), lists: 0},
		{name: "scaled within the window", lastScale: ptr.To(t0.Add(-time.Minute)), lists: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hpa := newHPA("web")
			if tc.lastScale != nil {
				withLastScale(*tc.lastScale, 2, 2)(hpa)
			}
			f := newFixture(t, hpa)
			f.ctrl.addHPA(controllertest.Logger(t), hpa)
			f.serveScale("web", 2)
			f.calc.propose(2)
			if err := f.syncAt(t0); err != nil {
				t.Fatal(err)
			}
			if err := f.syncAt(t0.Add(15 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if n := controllertest.Count(f.Client, "list", "events"); n != tc.lists {
				t.Errorf("%d event lists, want %d", n, tc.lists)
			}
		})
	}
}

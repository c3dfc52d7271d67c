package hpa

import (
	"context"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// TestWindowAcrossOwnerKill: an HPA without behavior whose namespace's owner is SIGKILLed
// during its scale-down window. An external metric scales a Deployment from 1 to 4; the metric
// drops at once (the metrics ask for 1), the owner is killed, and someone scales the
// Deployment down to 2 before a new owner takes the namespace. Without a move the
// window's recommendation of 4 would scale it back to 4 (twice 2) and hold it there until
// the window has passed; the new owner must do the same from the history it rebuilds from
// the HPA's status and SuccessfulRescale events (a new owner that knew only the current
// count, as a restarted kube-controller-manager, would leave it at 2). The count must not
// go below 4 before the window since the scale-up has passed, and reaches 1 in the end.
// Not parallel: it kills one of the package's shards.
func TestWindowAcrossOwnerKill(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the HPA controller: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newEnv(t)
	const window = downscaleWindow
	e.deployment("api", 1, "")
	e.setExternal("requests", "35")
	// No behavior: the window (the flag's) holds its highest recommendation, so it scales a
	// count lowered by someone else back up (with behavior it only caps the count).
	e.hpa("api", 1, 10, externalAverage("requests", "10"), nil)
	owner := k.StableOwner(t, e.ns)
	e.waitReplicas("api", 4, settle)
	e.setExternal("requests", "5")
	var scaledUp time.Time
	framework.Eventually(t, settle, "the scale-up's lastScaleTime in the HPA's status", func(context.Context) (bool, error) {
		h := e.getHPA("api")
		if h.Status.LastScaleTime == nil || h.Status.DesiredReplicas != 4 {
			return false, nil
		}
		scaledUp = h.Status.LastScaleTime.Time
		return true, nil
	})

	killed := time.Now()
	owner.Kill()
	e.scale("api", 2)
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	t.Logf("namespace %s moved %s → %s, seen %s after SIGKILL, %s after the scale-up",
		e.ns, owner.Name, to.Name, seen.Sub(killed).Round(time.Millisecond), seen.Sub(scaledUp).Round(time.Millisecond))
	if !seen.Before(scaledUp.Add(window - 10*time.Second)) {
		t.Fatalf("the move took until %s after the scale-up, too close to the window (%s) to check it", seen.Sub(scaledUp), window)
	}
	back := e.waitReplicas("api", 4, settle)
	if !back.Before(scaledUp.Add(window)) {
		t.Fatalf("scaled back to 4 only %s after the scale-up, after the window", back.Sub(scaledUp))
	}
	// lastScaleTime is stored with a second's precision: the window runs from at most a
	// second after it.
	e.holdAtLeast("api", 4, scaledUp.Add(window-time.Second))
	down := e.waitReplicas("api", 1, 2*window+settle)
	t.Logf("scaled back to 4 %s after the scale-up, down to 1 %s after it", back.Sub(scaledUp).Round(time.Millisecond), down.Sub(scaledUp).Round(time.Millisecond))
	got := e.rescales("api")
	if len(got) < 3 || got[1] != "New size: 4; reason: All metrics below target" || got[len(got)-1] != "New size: 1; reason: All metrics below target" {
		t.Errorf("rescales %q: want the scale-up, the new owner's scale back to 4, …, the scale-down to 1", got)
	}
}

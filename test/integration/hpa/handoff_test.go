package hpa

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/utils/ptr"

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
// It kills a shard of its own (claimVictim), which owns its namespace and no other
// handoff test's, so it runs in parallel with the others.
func TestWindowAcrossOwnerKill(t *testing.T) {
	t.Parallel()
	k, victim := claimVictim(t)
	e := newEnvOn(t, k, victim)
	const window = downscaleWindow
	e.deployment("api", 1, "")
	e.setExternal("requests", "35")
	// No behavior: the window (the flag's) holds its highest recommendation, so it scales a
	// count lowered by someone else back up (with behavior it only caps the count).
	e.hpa("api", 1, 10, externalAverage("requests", "10"), nil)
	owner := stableOwner(t, k, e.ns, victim)
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
	e.waitRescales("api", func(got []string) error {
		if len(got) < 3 || got[1] != "New size: 4; reason: All metrics below target" || got[len(got)-1] != "New size: 1; reason: All metrics below target" {
			return fmt.Errorf("rescales %q: want the scale-up, the new owner's scale back to 4, …, the scale-down to 1", got)
		}
		return nil
	})
}

// TestScaleUpPolicyAcrossHandoff: an HPA whose behavior allows one pod more per 30 s
// scales a Deployment up from 1 step by step (an external metric asks for 10); right
// after its second step the namespace's owner hands it over (a spare joins, the owner
// gets SIGTERM). The new owner must not take the next step before 30 s since the second
// have passed, as the old owner would not have: the policy's allowance is rebuilt from
// the HPA's SuccessfulRescale events (a new owner that knew nothing would step at its
// first sync). It stops a shard of its own (claimVictim), so it runs in parallel with the
// others.
func TestScaleUpPolicyAcrossHandoff(t *testing.T) {
	t.Parallel()
	k, victim := claimVictim(t)
	e := newEnvOn(t, k, victim)
	const period = 30 * time.Second
	e.deployment("steps", 1, "")
	e.setExternal("backlog", "100")
	e.hpa("steps", 1, 10, externalAverage("backlog", "10"), &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0),
			Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: int32(period.Seconds())}}}})
	owner := stableOwner(t, k, e.ns, victim)
	e.waitReplicas("steps", 2, settle)
	e.waitReplicas("steps", 3, period+settle)
	// The second step's event and status are written (the precondition of the move, not
	// what the test checks).
	var second time.Time
	framework.Eventually(t, settle, "the second step's event and lastScaleTime", func(context.Context) (bool, error) {
		h := e.getHPA("steps")
		if h.Status.LastScaleTime == nil || h.Status.DesiredReplicas != 3 {
			return false, fmt.Errorf("status %+v", h.Status)
		}
		second = h.Status.LastScaleTime.Time
		if got := e.rescales("steps"); len(got) != 2 || !strings.HasPrefix(got[1], "New size: 3;") {
			return false, fmt.Errorf("rescales %q", got)
		}
		return true, nil
	})
	signalled := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
	}
	t.Logf("namespace %s handed over %s → %s, seen %s after SIGTERM, %s after the second step",
		e.ns, owner.Name, to.Name, seen.Sub(signalled).Round(time.Millisecond), seen.Sub(second).Round(time.Millisecond))
	if !seen.Before(second.Add(period - 10*time.Second)) {
		t.Fatalf("the hand-over ended %s after the second step, too close to the policy's period (%s) to check it", seen.Sub(second), period)
	}
	// lastScaleTime and the event's time are stored with a second's precision (rounded
	// down): the period runs until at least second + period.
	e.holdAtMost("steps", 3, second.Add(period))
	third := e.waitReplicas("steps", 4, settle)
	t.Logf("third step %s after the second", third.Sub(second).Round(time.Millisecond))
}

// victims are the shards the handoff tests stop, one each. A handoff test stops the owner
// of its namespace; with the tests in parallel, the owner must be a shard no other handoff
// test stops, and the namespace must not move before the test stops it. Both hold when
// each test's namespace falls in a partition of a shard of its own (NamespaceOn): a stop
// moves only the stopped shard's partitions. What would break them is a join, which moves
// partitions from every shard to the new one; so shards join only here, all that the
// handoff tests need at once, and only while no handoff test is running (between go
// test's -count rounds, or before the first). The other tests' namespaces may fall on a
// victim and move with it, at any time: none of their checks depends on where their
// namespace is (a new owner rebuilds an HPA's window from the count it finds, which holds
// it at least as long; their upper bounds leave a window and a move to spare).
var victims = struct {
	mu   sync.Mutex
	idle *sync.Cond // signalled when a handoff test ends
	pool []*framework.Shard
	// running counts the handoff tests between their claim and their end.
	running int
}{}

func init() { victims.idle = sync.NewCond(&victims.mu) }

// handoffTests is how many tests claim a victim: the shards that join at once.
const handoffTests = 2

// claimVictim returns the package's kshard and a live shard for t alone to stop, joining
// handoffTests new shards when none is left (waiting first until no handoff test runs).
// It skips t when the cluster's kube-controller-manager runs the HPA controller: there
// are no shards to move a namespace between.
func claimVictim(t *testing.T) (*framework.KShard, *framework.Shard) {
	t.Helper()
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the HPA controller: no shards to move a namespace between")
	}
	k := c.KShard
	v := &victims
	v.mu.Lock()
	defer v.mu.Unlock()
	for {
		for len(v.pool) > 0 && v.pool[0].Exited() {
			v.pool = v.pool[1:]
		}
		if len(v.pool) > 0 {
			break
		}
		if v.running == 0 {
			v.pool = k.JoinSpares(t, handoffTests)
			break
		}
		v.idle.Wait()
	}
	s := v.pool[0]
	v.pool = v.pool[1:]
	v.running++
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.running--
		v.idle.Broadcast()
	})
	return k, s
}

// stableOwner waits until victim owns ns (as it did when ns was created: nothing but a
// stop of victim moves it) and returns it.
func stableOwner(t *testing.T, k *framework.KShard, ns string, victim *framework.Shard) *framework.Shard {
	t.Helper()
	if owner := k.StableOwner(t, ns); owner != victim {
		t.Fatalf("namespace %s owned by %s, want %s (which owned its partition when it was created)", ns, owner.Name, victim.Name)
	}
	return victim
}

package disruption

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/kshard/kshard/test/framework"
)

// deletionTimeout is how long after an eviction the controller waits for the pod's
// deletion before it drops the disruptedPods entry (upstream's DeletionTimeout).
const deletionTimeout = 2 * time.Minute

// expiryAfterSignal is how long after the owner's SIGTERM the back-dated disruptedPods
// entry expires: long enough for the hand-over and the new owner's first sync (a few
// seconds), so that it is the new owner that expires it.
const expiryAfterSignal = 20 * time.Second

// TestBudgetAcrossHandoff: a budget's namespace moves to another shard (a spare joins,
// the owner gets SIGTERM and hands its partitions over) while its pods change and while
// its status holds disruptedPods entries the old owner was tracking in memory (the recheck
// queue). Six bare pods, minAvailable 3. Before the move: web-0 turns not Ready; web-1 is
// evicted through the eviction subresource but its deletion fails (a UID precondition
// that does not match: the API server records the entry, then refuses the delete), so its
// entry stays for the full two minutes; web-2 gets an entry as old as an eviction's 20 s
// before it runs out. During the move web-0 turns Ready again, after it web-5 turns not
// Ready and Ready again. The new owner must count both entries' pods out of
// currentHealthy and keep them, expire web-2's at its time (not before, one NotDeleted
// warning), keep web-1's with its time unchanged, honour it in the evictions after the
// move (one allowed per disruption left, the next refused), and observe a spec change:
// status exact throughout. Not parallel: it stops one of the package's shards.
func TestBudgetAcrossHandoff(t *testing.T) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the disruption controller: no shards to move a namespace between")
	}
	k := c.KShard
	k.JoinSpare(t)
	e := newEnv(t)
	ctx := context.Background()
	for i := range 6 {
		e.pod(fmt.Sprintf("web-%d", i), map[string]string{"app": "web"}, nil)
	}
	pods := e.waitPods("web", 6)
	uid := map[string]types.UID{}
	for _, p := range pods {
		uid[p.Name] = p.UID
	}
	e.budget("web", "web", minAvailable(num(3)))
	e.waitStatus("web", want{healthy: 6, desired: 3, expected: 6, allowed: 3})
	owner := k.StableOwner(t, e.ns)
	dropped := e.watchDisrupted(ctx, "web", "web-2")

	// Before the move, on the old owner.
	e.notReady("web-0")
	e.waitStatus("web", want{healthy: 5, desired: 3, expected: 6, allowed: 2})
	if err := e.evictFailingDelete("web-1"); !apierrors.IsConflict(err) {
		t.Fatalf("eviction of web-1 with a UID precondition that does not match: %v, want a conflict after the budget was charged", err)
	}
	p := e.waitStatus("web", want{healthy: 4, desired: 3, expected: 6, allowed: 1})
	evictedAt, ok := p.Status.DisruptedPods["web-1"]
	if !ok {
		t.Fatalf("disruptedPods %v: the eviction of web-1 recorded nothing", p.Status.DisruptedPods)
	}
	// web-2's entry, as the eviction subresource records it, back-dated so that it runs
	// out expiryAfterSignal after the SIGTERM below (stored with a second's precision).
	recorded := metav1.NewTime(time.Now().Add(expiryAfterSignal - deletionTimeout).Truncate(time.Second))
	expiry := recorded.Add(deletionTimeout)
	e.addDisrupted("web", "web-2", recorded)
	e.waitStatus("web", want{healthy: 3, desired: 3, expected: 6})
	e.wantDisrupted("web", map[string]metav1.Time{"web-1": evictedAt, "web-2": recorded})

	at := time.Now()
	if err := owner.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	e.setCondition("web-0", corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	to, seen := k.WaitMoved(t, e.ns, owner, 90*time.Second)
	if exited, err := owner.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v; want a clean exit", owner.Name, exited, err)
	}
	t.Logf("namespace %s handed over %s → %s, seen %s after SIGTERM; web-2's entry runs out %s after SIGTERM",
		e.ns, owner.Name, to.Name, seen.Sub(at).Round(time.Millisecond), expiry.Sub(at).Round(time.Millisecond))
	if !seen.Before(expiry) {
		t.Fatalf("the hand-over took %s, longer than web-2's entry had left (%s): the test cannot check its expiry on the new owner",
			seen.Sub(at).Round(time.Millisecond), expiry.Sub(at).Round(time.Millisecond))
	}

	// The new owner counts web-0 again and both entries' pods out, before web-2's runs
	// out; web-5 turning not Ready and Ready again is counted on the new owner alone.
	e.waitStatusBefore("web", want{healthy: 4, desired: 3, expected: 6, allowed: 1}, expiry)
	e.notReady("web-5")
	e.waitStatusBefore("web", want{healthy: 3, desired: 3, expected: 6}, expiry)
	e.setCondition("web-5", corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	e.waitStatusBefore("web", want{healthy: 4, desired: 3, expected: 6, allowed: 1}, expiry)
	e.wantDisrupted("web", map[string]metav1.Time{"web-1": evictedAt, "web-2": recorded})

	// web-2's entry runs out on the new owner: dropped at its time, not before, with one
	// NotDeleted warning; web-1's is kept as it was.
	e.waitStatus("web", want{healthy: 5, desired: 3, expected: 6, allowed: 2})
	e.wantDisrupted("web", map[string]metav1.Time{"web-1": evictedAt})
	var d time.Time
	framework.Eventually(t, settle, "the budget watch seeing web-2's entry dropped", func(context.Context) (bool, error) {
		d = dropped()
		return !d.IsZero(), nil
	})
	if d.Before(expiry) {
		t.Errorf("web-2's entry dropped at %s, before it ran out at %s", d.Format(time.RFC3339Nano), expiry.Format(time.RFC3339Nano))
	}
	// The event is written after the sync that drops the entry, by the recorder's own
	// goroutine: wait for it, then count.
	framework.Eventually(t, settle, "a NotDeleted warning on web-2", func(context.Context) (bool, error) {
		return e.eventCount("Pod", "web-2", "NotDeleted") > 0, nil
	})
	if got := e.eventCount("Pod", "web-2", "NotDeleted"); got != 1 {
		t.Errorf("%d NotDeleted warnings on web-2, want 1", got)
	}

	// web-1's entry is honoured by the API server's evictions on the new owner's counts:
	// two disruptions allowed, two evictions pass, the third is refused.
	for _, name := range []string{"web-3", "web-4"} {
		if err := e.evict(name); err != nil {
			t.Fatalf("evicting %s with disruptions allowed: %v", name, err)
		}
	}
	e.waitStatus("web", want{healthy: 3, desired: 3, expected: 4})
	if err := e.evict("web-5"); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting web-5 with no disruption allowed (web-1 still counted out): %v, want 429", err)
	}
	// A spec change is a generation the new owner observes.
	e.updateBudget("web", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptrTo(num(2)) })
	e.waitStatus("web", want{healthy: 3, desired: 2, expected: 4, allowed: 1})
	e.wantDisrupted("web", map[string]metav1.Time{"web-1": evictedAt})
	if got := e.eventCount("Pod", "web-1", "NotDeleted"); got != 0 {
		t.Errorf("%d NotDeleted warnings on web-1, whose entry has not run out", got)
	}
	for _, name := range []string{"web-0", "web-1", "web-2", "web-5"} {
		if p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{}); err != nil || p.UID != uid[name] || p.DeletionTimestamp != nil {
			t.Errorf("pod %s: %v; want the original pod, not being deleted", name, err)
		}
	}
}

// evictFailingDelete evicts pod with a UID precondition no pod has: the eviction
// subresource charges the budget (an entry in disruptedPods, one disruption fewer) and
// then fails to delete the pod, which stays as it was.
func (e *env) evictFailingDelete(pod string) error {
	bogus := types.UID("00000000-0000-0000-0000-000000000000")
	return e.cs.CoreV1().Pods(e.ns).EvictV1(context.Background(), &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: e.ns},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &bogus}},
	})
}

// addDisrupted adds an entry to the budget's disruptedPods, as the eviction subresource
// does (with one disruption fewer).
func (e *env) addDisrupted(budget, pod string, at metav1.Time) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(context.Background(), budget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.DisruptedPods == nil {
			p.Status.DisruptedPods = map[string]metav1.Time{}
		}
		p.Status.DisruptedPods[pod] = at
		p.Status.DisruptionsAllowed = max(p.Status.DisruptionsAllowed-1, 0)
		_, err = e.cs.PolicyV1().PodDisruptionBudgets(e.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("adding %s to disruptedPods of %s: %v", pod, budget, err)
	}
}

// wantDisrupted fails the test unless the budget's disruptedPods is exactly want.
func (e *env) wantDisrupted(budget string, want map[string]metav1.Time) {
	e.t.Helper()
	p, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(context.Background(), budget, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if !maps.EqualFunc(p.Status.DisruptedPods, want, func(a, b metav1.Time) bool { return a.Equal(&b) }) {
		e.t.Errorf("disruptedPods of %s %v, want %v", budget, p.Status.DisruptedPods, want)
	}
}

// waitStatusBefore is waitStatus with a deadline: the status must be reached before it.
func (e *env) waitStatusBefore(name string, w want, deadline time.Time) {
	e.t.Helper()
	e.waitStatus(name, w)
	if now := time.Now(); !now.Before(deadline) {
		e.t.Fatalf("budget %s reached %s at %s, after %s", name, w, now.Format(time.RFC3339Nano), deadline.Format(time.RFC3339Nano))
	}
}

// watchDisrupted watches the budget and returns a function that tells when pod's entry
// was first seen gone from disruptedPods after having been there (zero until then).
func (e *env) watchDisrupted(ctx context.Context, budget, pod string) func() time.Time {
	e.t.Helper()
	w, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + budget})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Stop)
	var mu sync.Mutex
	var seen bool
	var gone time.Time
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*policyv1.PodDisruptionBudget)
			if !ok {
				continue
			}
			_, in := p.Status.DisruptedPods[pod]
			mu.Lock()
			switch {
			case in:
				seen = true
			case seen && gone.IsZero():
				gone = time.Now()
			}
			mu.Unlock()
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return gone
	}
}

// eventCount sums the counts of the events of reason on kind/name.
func (e *env) eventCount(kind, name, reason string) int32 {
	e.t.Helper()
	l, err := e.cs.CoreV1().Events(e.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		e.t.Fatal(err)
	}
	var n int32
	for _, ev := range l.Items {
		if ev.InvolvedObject.Kind == kind && ev.Reason == reason {
			n += max(ev.Count, 1)
		}
	}
	return n
}

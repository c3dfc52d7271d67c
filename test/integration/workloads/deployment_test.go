package workloads

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const deploymentComponent = "deployment-controller"

// During a rolling update the ReplicaSets' replicas never add up to more than
// replicas+maxSurge, no ReplicaSet ever has more pods than that, and never fewer than
// replicas-maxUnavailable pods are ready (and available, says the Deployment), with the
// bounds as upstream rounds percentages (surge up, unavailable down). The surge is used
// to the full, as upstream's first step does.
func TestDeploymentRollingUpdateBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		surge, unavailable     intstr.IntOrString
		wantSurge, wantUnavail int32
	}{
		{name: "surge 1 unavailable 0", surge: intstr.FromInt32(1), unavailable: intstr.FromInt32(0), wantSurge: 1, wantUnavail: 0},
		{name: "surge 0 unavailable 1", surge: intstr.FromInt32(0), unavailable: intstr.FromInt32(1), wantSurge: 0, wantUnavail: 1},
		{name: "surge 2 unavailable 2", surge: intstr.FromInt32(2), unavailable: intstr.FromInt32(2), wantSurge: 2, wantUnavail: 2},
		{name: "surge 30% unavailable 30%", surge: intstr.FromString("30%"), unavailable: intstr.FromString("30%"), wantSurge: 2, wantUnavail: 1},
		{name: "surge 50% unavailable 0%", surge: intstr.FromString("50%"), unavailable: intstr.FromString("0%"), wantSurge: 2, wantUnavail: 0},
		{name: "surge 0% unavailable 25%", surge: intstr.FromString("0%"), unavailable: intstr.FromString("25%"), wantSurge: 0, wantUnavail: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const replicas = 4
			d := newDeployment("roll", replicas)
			d.Spec.Strategy = rollingUpdate(tc.surge, tc.unavailable)
			d.Spec.MinReadySeconds = 1
			d = e.createDeployment(d)
			e.waitComplete("roll", 60*time.Second)
			maxTotal, minReady := int32(replicas)+tc.wantSurge, int32(replicas)-tc.wantUnavail

			var mu sync.Mutex
			sums := map[int32]bool{}
			w := e.watchers()
			rss := track(t, w, w.replicaSets(), func(all []*appsv1.ReplicaSet) error {
				sum := int32(0)
				for _, rs := range all {
					if controlledBy(rs, d.UID) {
						sum += ptr.Deref(rs.Spec.Replicas, 0)
					}
				}
				mu.Lock()
				sums[sum] = true
				mu.Unlock()
				if sum > maxTotal {
					return fmt.Errorf("replicasets' spec.replicas add up to %d > replicas+maxSurge=%d", sum, maxTotal)
				}
				return nil
			})
			pods := track(t, w, w.pods(), func(all []*corev1.Pod) error {
				perHash := map[string]int32{}
				ready := int32(0)
				for _, p := range all {
					if !active(p) {
						continue
					}
					perHash[p.Labels[hashLabel]]++
					if podReady(p) {
						ready++
					}
				}
				for h, n := range perHash {
					if n > maxTotal {
						return fmt.Errorf("replicaset %s has %d active pods > replicas+maxSurge=%d", h, n, maxTotal)
					}
				}
				if ready < minReady {
					return fmt.Errorf("%d ready pods < replicas-maxUnavailable=%d (per template hash: %v)", ready, minReady, perHash)
				}
				return nil
			})
			deps := track(t, w, w.deployments(), func(all []*appsv1.Deployment) error {
				for _, d := range all {
					if d.Status.AvailableReplicas < minReady {
						return fmt.Errorf("status.availableReplicas=%d < replicas-maxUnavailable=%d", d.Status.AvailableReplicas, minReady)
					}
				}
				return nil
			})

			e.updateDeployment("roll", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
			d = e.waitComplete("roll", 90*time.Second)
			rss.assertNone(t, "sum of spec.replicas <= replicas+maxSurge")
			pods.assertNone(t, "pods per replicaset <= replicas+maxSurge and ready pods >= replicas-maxUnavailable")
			deps.assertNone(t, "status.availableReplicas >= replicas-maxUnavailable")
			mu.Lock()
			if tc.wantSurge > 0 && !sums[maxTotal] {
				t.Errorf("maxSurge %s never used to the full: spec.replicas sums seen %v, want %d among them", tc.surge.String(), sortedInts(sums), maxTotal)
			}
			if tc.wantSurge == 0 && !sums[minReady] {
				t.Errorf("maxUnavailable %s never used to the full with no surge: spec.replicas sums seen %v, want %d among them", tc.unavailable.String(), sortedInts(sums), minReady)
			}
			mu.Unlock()

			rsList, err := e.replicaSetsOf(e.ctx(), d)
			if err != nil {
				t.Fatal(err)
			}
			if len(rsList) != 2 || ptr.Deref(rsList[0].Spec.Replicas, -1) != replicas || ptr.Deref(rsList[1].Spec.Replicas, -1) != 0 {
				t.Fatalf("after the rollout: %s, want the new one at %d and the old one at 0", describeRSs(rsList), replicas)
			}
		})
	}
}

func sortedInts(m map[int32]bool) []int32 {
	out := slices.Collect(maps.Keys(m))
	slices.Sort(out)
	return out
}

func describeRSs(rss []appsv1.ReplicaSet) string {
	var parts []string
	for _, rs := range rss {
		parts = append(parts, fmt.Sprintf("%s(rev %s, spec %d, status %d)", rs.Name, rs.Annotations[revisionAnnotation], ptr.Deref(rs.Spec.Replicas, -1), rs.Status.Replicas))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Recreate: no pod of the new template exists while any pod of the old one still runs.
func TestDeploymentRecreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("recreate", 3)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	e.createDeployment(d)
	e.waitComplete("recreate", 60*time.Second)
	first, err := e.newRSOf(e.ctx(), e.deployment("recreate"))
	if err != nil {
		t.Fatal(err)
	}
	oldHash := first.Labels[hashLabel]
	var mu sync.Mutex
	sawNew := false
	w := e.watchers()
	pods := track(t, w, w.pods(), func(all []*corev1.Pod) error {
		var old, fresh []string
		for _, p := range all {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if p.Labels[hashLabel] == oldHash {
				old = append(old, p.Name)
			} else {
				fresh = append(fresh, p.Name)
			}
		}
		if len(fresh) > 0 {
			mu.Lock()
			sawNew = true
			mu.Unlock()
		}
		if len(old) > 0 && len(fresh) > 0 {
			return fmt.Errorf("new pods %v exist while old pods %v still do", fresh, old)
		}
		return nil
	})
	e.updateDeployment("recreate", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
	e.waitComplete("recreate", 90*time.Second)
	pods.assertNone(t, "no new pod before every old pod is gone")
	mu.Lock()
	defer mu.Unlock()
	if !sawNew {
		t.Fatal("no pod of the new template was observed")
	}
}

// The ReplicaSet is named <deployment>-<pod-template-hash>, and the hash label is on its
// labels, selector and template and on every pod.
func TestDeploymentReplicaSetNameAndHashLabel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.createDeployment(newDeployment("named", 2))
	e.waitComplete("named", 60*time.Second)
	check := func() string {
		t.Helper()
		d := e.deployment("named")
		rs, err := e.newRSOf(e.ctx(), d)
		if err != nil {
			t.Fatal(err)
		}
		h := rs.Labels[hashLabel]
		if h == "" || rs.Name != "named-"+h {
			t.Fatalf("replicaset %s has %s=%q; want it named named-<hash>", rs.Name, hashLabel, h)
		}
		if rs.Spec.Selector.MatchLabels[hashLabel] != h || rs.Spec.Template.Labels[hashLabel] != h || rs.Spec.Selector.MatchLabels["app"] != "named" {
			t.Fatalf("replicaset %s: selector %v, template labels %v; want both to carry %s=%s", rs.Name, rs.Spec.Selector.MatchLabels, rs.Spec.Template.Labels, hashLabel, h)
		}
		want := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "named", UID: d.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
		if len(rs.OwnerReferences) != 1 || !equality.Semantic.DeepEqual(rs.OwnerReferences[0], want) {
			t.Fatalf("replicaset %s owner references %+v, want %+v", rs.Name, rs.OwnerReferences, want)
		}
		act, _, err := e.ownedPods(e.ctx(), rs.UID)
		if err != nil {
			t.Fatal(err)
		}
		if len(act) != 2 {
			t.Fatalf("replicaset %s controls pods %v, want 2", rs.Name, names(act))
		}
		for _, p := range act {
			if p.Labels[hashLabel] != h {
				t.Fatalf("pod %s has labels %v, want %s=%s", p.Name, p.Labels, hashLabel, h)
			}
		}
		return h
	}
	h1 := check()
	e.updateDeployment("named", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
	e.waitComplete("named", 60*time.Second)
	h2 := check()
	if h1 == h2 {
		t.Fatalf("a new template kept the hash %s", h1)
	}
	// The same template again is the same hash: the first ReplicaSet comes back.
	e.updateDeployment("named", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Env = nil })
	e.waitComplete("named", 60*time.Second)
	if h3 := check(); h3 != h1 {
		t.Fatalf("the first template again has hash %s, first time %s", h3, h1)
	}
	rss, err := e.replicaSetsOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(rss) != 2 {
		t.Fatalf("replicasets %s, want 2 (the first one reused)", describeRSs(rss))
	}
}

// A ReplicaSet whose template was changed behind the controller's back makes the next name
// collide: status.collisionCount goes to 1 and a new ReplicaSet is created (as upstream's
// TestDeploymentHashCollision).
func TestDeploymentHashCollision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createDeployment(newDeployment("collide", 1))
	d := e.waitComplete("collide", 60*time.Second)
	rs, err := e.newRSOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	e.updateRS(rs.Name, func(rs *appsv1.ReplicaSet) {
		rs.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	})
	e.eventually(60*time.Second, "collisionCount=1 and a second ReplicaSet at revision 2", func(ctx context.Context) error {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, "collide", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ptr.Deref(d.Status.CollisionCount, 0) != 1 {
			return fmt.Errorf("status.collisionCount=%s", ptrString(d.Status.CollisionCount))
		}
		if d.Annotations[revisionAnnotation] != "2" {
			return fmt.Errorf("revision %q", d.Annotations[revisionAnnotation])
		}
		rss, err := e.replicaSetsOf(ctx, d)
		if err != nil {
			return err
		}
		if len(rss) != 2 || rss[0].Name == rs.Name || rss[0].Annotations[revisionAnnotation] != "2" {
			return fmt.Errorf("replicasets %s", describeRSs(rss))
		}
		if !strings.HasPrefix(rss[0].Name, "collide-") || rss[0].Name != "collide-"+rss[0].Labels[hashLabel] {
			return fmt.Errorf("new replicaset %s is not named after its hash %s", rss[0].Name, rss[0].Labels[hashLabel])
		}
		return nil
	})
	d = e.waitComplete("collide", 60*time.Second)
	if ptr.Deref(d.Status.CollisionCount, 0) != 1 {
		t.Fatalf("collisionCount=%s after the rollout, want 1", ptrString(d.Status.CollisionCount))
	}
}

// The revision, revision-history, desired-replicas and max-replicas annotations.
func TestDeploymentRevisionAnnotations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("rev", 2)
	d.Spec.Strategy = rollingUpdate(intstr.FromInt32(1), intstr.FromInt32(0))
	e.createDeployment(d)
	e.waitComplete("rev", 60*time.Second)
	want := func(annotations map[string]map[string]string, depRevision string) {
		t.Helper()
		e.eventually(30*time.Second, "annotations", func(ctx context.Context) error {
			d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, "rev", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got := d.Annotations[revisionAnnotation]; got != depRevision {
				return fmt.Errorf("deployment revision %q, want %q", got, depRevision)
			}
			rss, err := e.replicaSetsOf(ctx, d)
			if err != nil {
				return err
			}
			byTemplate := map[string]*appsv1.ReplicaSet{}
			for i := range rss {
				byTemplate[templateKey(&rss[i].Spec.Template)] = &rss[i]
			}
			if len(byTemplate) != len(annotations) {
				return fmt.Errorf("replicasets %s, want %d", describeRSs(rss), len(annotations))
			}
			for key, wantAnn := range annotations {
				rs := byTemplate[key]
				if rs == nil {
					return fmt.Errorf("no replicaset for template %s in %s", key, describeRSs(rss))
				}
				for k, v := range wantAnn {
					if got, ok := rs.Annotations[k]; v == "" && ok || v != "" && got != v {
						return fmt.Errorf("replicaset %s (template %s): %s=%q, want %q", rs.Name, key, k, got, v)
					}
				}
			}
			return nil
		})
	}
	a := map[string]string{revisionAnnotation: "1", desiredReplicasAnnotation: "2", maxReplicasAnnotation: "3", revisionHistoryAnnotation: ""}
	want(map[string]map[string]string{"v=": a}, "1")

	e.updateDeployment("rev", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
	e.waitComplete("rev", 60*time.Second)
	b := map[string]string{revisionAnnotation: "2", desiredReplicasAnnotation: "2", maxReplicasAnnotation: "3", revisionHistoryAnnotation: ""}
	want(map[string]map[string]string{"v=": a, "v=2": b}, "2")

	e.updateDeployment("rev", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](4) })
	e.waitComplete("rev", 60*time.Second)
	b = map[string]string{revisionAnnotation: "2", desiredReplicasAnnotation: "4", maxReplicasAnnotation: "5", revisionHistoryAnnotation: ""}
	want(map[string]map[string]string{"v=": a, "v=2": b}, "2")

	// Back to the first template: its ReplicaSet is reused at revision 3 and remembers 1.
	e.updateDeployment("rev", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Env = nil })
	e.waitComplete("rev", 60*time.Second)
	a = map[string]string{revisionAnnotation: "3", revisionHistoryAnnotation: "1", desiredReplicasAnnotation: "4", maxReplicasAnnotation: "5"}
	want(map[string]map[string]string{"v=": a, "v=2": b}, "3")

	// And forth again: revision 4, history 2.
	e.updateDeployment("rev", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
	e.waitComplete("rev", 60*time.Second)
	b = map[string]string{revisionAnnotation: "4", revisionHistoryAnnotation: "2", desiredReplicasAnnotation: "4", maxReplicasAnnotation: "5"}
	want(map[string]map[string]string{"v=": a, "v=2": b}, "4")
}

// templateKey names a template by the ROLLOUT variable bumpTemplate sets.
func templateKey(t *corev1.PodTemplateSpec) string {
	for _, ev := range t.Spec.Containers[0].Env {
		if ev.Name == "ROLLOUT" {
			return "v=" + ev.Value
		}
	}
	return "v="
}

// Old ReplicaSets beyond revisionHistoryLimit are deleted, oldest first.
func TestDeploymentRevisionHistoryLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int32{0, 2} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			d := newDeployment("history", 1)
			d.Spec.RevisionHistoryLimit = ptr.To(limit)
			d = e.createDeployment(d)
			e.waitComplete("history", 60*time.Second)
			const rollouts = 4
			for i := 2; i <= rollouts+1; i++ {
				e.updateDeployment("history", func(d *appsv1.Deployment) { bumpTemplate(d, strconv.Itoa(i)) })
				e.waitComplete("history", 60*time.Second)
			}
			e.eventually(30*time.Second, "old replicasets cleaned up", func(ctx context.Context) error {
				rss, err := e.replicaSetsOf(ctx, d)
				if err != nil {
					return err
				}
				var revs []int
				for _, rs := range rss {
					revs = append(revs, revision(&rs))
				}
				var want []int
				for r := rollouts + 1; r >= rollouts+1-int(limit); r-- {
					want = append(want, r)
				}
				if !slices.Equal(revs, want) {
					return fmt.Errorf("replicasets at revisions %v (%s), want %v", revs, describeRSs(rss), want)
				}
				return nil
			})
		})
	}
}

// A paused Deployment does not roll out a new template, but scaling still applies; on
// resume the rollout happens. The Progressing condition says so.
func TestDeploymentPaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var progressing []string
	w := e.watchers()
	track(t, w, w.deployments(), func(all []*appsv1.Deployment) error {
		recordProgressing(&mu, &progressing, all)
		return nil
	})
	d := e.createDeployment(newDeployment("paused", 2))
	e.waitComplete("paused", 60*time.Second)
	e.updateDeployment("paused", func(d *appsv1.Deployment) { d.Spec.Paused = true })
	e.waitProgressing("paused", corev1.ConditionUnknown, "DeploymentPaused", func(string) string { return "Deployment is paused" })

	up := e.updateDeployment("paused", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
	e.eventually(30*time.Second, "template change observed while paused", func(ctx context.Context) error {
		d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, "paused", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ObservedGeneration != up.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", d.Status.ObservedGeneration, up.Generation)
		}
		return nil
	})
	noRollout := func(ctx context.Context) error {
		rss, err := e.replicaSetsOf(ctx, d)
		if err != nil {
			return err
		}
		if len(rss) != 1 {
			return fmt.Errorf("replicasets %s while paused, want only the first", describeRSs(rss))
		}
		if got := e.deployment("paused").Annotations[revisionAnnotation]; got != "1" {
			return fmt.Errorf("revision %q while paused", got)
		}
		return nil
	}
	e.consistently(3*time.Second, "no rollout while paused", noRollout)

	e.updateDeployment("paused", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](3) })
	e.eventually(60*time.Second, "scaled to 3 while paused", func(ctx context.Context) error {
		if err := noRollout(ctx); err != nil {
			return err
		}
		rss, err := e.replicaSetsOf(ctx, d)
		if err != nil {
			return err
		}
		rs := rss[0]
		if ptr.Deref(rs.Spec.Replicas, -1) != 3 || rs.Status.ReadyReplicas != 3 || rs.Annotations[desiredReplicasAnnotation] != "3" {
			return fmt.Errorf("replicaset %s spec %d ready %d desired-replicas %q", rs.Name, ptr.Deref(rs.Spec.Replicas, -1), rs.Status.ReadyReplicas, rs.Annotations[desiredReplicasAnnotation])
		}
		dep, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, "paused", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if dep.Status.Replicas != 3 || dep.Status.AvailableReplicas != 3 {
			return fmt.Errorf("deployment status replicas=%d available=%d", dep.Status.Replicas, dep.Status.AvailableReplicas)
		}
		return nil
	})

	e.updateDeployment("paused", func(d *appsv1.Deployment) { d.Spec.Paused = false })
	done := e.waitComplete("paused", 60*time.Second)
	if done.Annotations[revisionAnnotation] != "2" || done.Status.UpdatedReplicas != 3 {
		t.Fatalf("after resume: revision %q, updatedReplicas %d; want 2 and 3", done.Annotations[revisionAnnotation], done.Status.UpdatedReplicas)
	}
	e.waitSeen(&mu, &progressing, "Progressing", "True/NewReplicaSetAvailable", "Unknown/DeploymentPaused", "Unknown/DeploymentResumed", "True/NewReplicaSetAvailable")
}

// waitSeen waits until the watch has shown the values of want in that order (the watch
// may lag behind the GET that saw the last one).
func (e *env) waitSeen(mu *sync.Mutex, seen *[]string, what string, want ...string) {
	e.t.Helper()
	e.eventually(10*time.Second, what+" went through "+strings.Join(want, ", "), func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !inOrder(*seen, want) {
			return fmt.Errorf("%s went %v", what, *seen)
		}
		return nil
	})
}

// recordProgressing appends each Deployment's Progressing status/reason to seen when it
// differs from the last one recorded.
func recordProgressing(mu *sync.Mutex, seen *[]string, all []*appsv1.Deployment) {
	for _, d := range all {
		if c := condition(d, appsv1.DeploymentProgressing); c != nil {
			s := fmt.Sprintf("%s/%s", c.Status, c.Reason)
			mu.Lock()
			if n := len(*seen); n == 0 || (*seen)[n-1] != s {
				*seen = append(*seen, s)
			}
			mu.Unlock()
		}
	}
}

// inOrder reports whether want is a subsequence of got.
func inOrder(got, want []string) bool {
	at := 0
	for _, s := range got {
		if at < len(want) && s == want[at] {
			at++
		}
	}
	return at == len(want)
}

// A Deployment adopts an orphan ReplicaSet whose template is its own: no new ReplicaSet,
// no pod replaced, Progressing FoundNewReplicaSet, revision 1.
func TestDeploymentAdoptsMatchingReplicaSet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("legacy", 2)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-rs", Labels: copyMap(d.Spec.Template.Labels)},
		Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), Selector: d.Spec.Selector.DeepCopy(), Template: *d.Spec.Template.DeepCopy()},
	}
	rs = e.createRS(rs)
	e.waitRSPods("legacy-rs", 2, true, 60*time.Second)
	before, _, err := e.ownedPods(e.ctx(), rs.UID)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var progressing []string
	w := e.watchers()
	track(t, w, w.deployments(), func(all []*appsv1.Deployment) error {
		recordProgressing(&mu, &progressing, all)
		return nil
	})
	e.createDeployment(d)
	d = e.waitComplete("legacy", 60*time.Second)
	rss, err := e.replicaSetsOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	if len(rss) != 1 || rss[0].UID != rs.UID || rss[0].Annotations[revisionAnnotation] != "1" || d.Annotations[revisionAnnotation] != "1" {
		t.Fatalf("after adoption: replicasets %s, deployment revision %q; want only %s at revision 1", describeRSs(rss), d.Annotations[revisionAnnotation], rs.Name)
	}
	after, _, err := e.ownedPods(e.ctx(), rs.UID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(before), names(after)) {
		t.Fatalf("pods %v became %v: adoption replaced pods", names(before), names(after))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progressing) == 0 || progressing[0] != "True/FoundNewReplicaSet" {
		t.Errorf("Progressing went %v; want it to start with True/FoundNewReplicaSet", progressing)
	}
}

// waitProgressing waits for the Progressing condition with this status and reason, and a
// message msg(newRSName) gives.
func (e *env) waitProgressing(name string, status corev1.ConditionStatus, reason string, msg func(rs string) string) *appsv1.Deployment {
	e.t.Helper()
	var d *appsv1.Deployment
	e.eventually(60*time.Second, fmt.Sprintf("Progressing=%s with reason %s", status, reason), func(ctx context.Context) error {
		var err error
		d, err = e.cs.AppsV1().Deployments(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := condition(d, appsv1.DeploymentProgressing)
		if c == nil {
			return fmt.Errorf("no Progressing condition")
		}
		rsName := ""
		if rs, err := e.newRSOf(ctx, d); err == nil {
			rsName = rs.Name
		}
		if c.Status != status || c.Reason != reason || c.Message != msg(rsName) {
			return fmt.Errorf("Progressing %s %s %q; want %s %s %q", c.Status, c.Reason, c.Message, status, reason, msg(rsName))
		}
		return nil
	})
	return d
}

// A scale made mid-rollout is spread over the old and new ReplicaSets in proportion, as
// upstream does (largest first, rounding each share, the leftover to the largest).
func TestDeploymentProportionalScaling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("prop", 6)
	d.Spec.Strategy = rollingUpdate(intstr.FromInt32(2), intstr.FromInt32(1))
	d = e.createDeployment(d)
	e.waitComplete("prop", 60*time.Second)
	old, err := e.newRSOf(e.ctx(), e.deployment("prop"))
	if err != nil {
		t.Fatal(err)
	}
	w := e.watchers()
	var mu sync.Mutex
	type pair struct{ old, new int32 }
	var seen []pair
	rssTracker := track(t, w, w.replicaSets(), func(all []*appsv1.ReplicaSet) error {
		var p pair
		var n int
		for _, rs := range all {
			if !controlledBy(rs, d.UID) {
				continue
			}
			n++
			if rs.UID == old.UID {
				p.old = ptr.Deref(rs.Spec.Replicas, 0)
			} else {
				p.new = ptr.Deref(rs.Spec.Replicas, 0)
			}
		}
		mu.Lock()
		if len(seen) == 0 || seen[len(seen)-1] != p {
			seen = append(seen, p)
		}
		mu.Unlock()
		if n > 2 {
			return fmt.Errorf("%d replicasets", n)
		}
		return nil
	})
	// Ready pods never fall below replicas-maxUnavailable of the smallest size asked for
	// so far (all 6 old pods are ready now; the new ones never become ready).
	var minReady atomic.Int32
	minReady.Store(5)
	ready := track(t, w, w.pods(), func(all []*corev1.Pod) error {
		n := int32(0)
		for _, p := range all {
			if active(p) && podReady(p) {
				n++
			}
		}
		if m := minReady.Load(); n < m {
			return fmt.Errorf("%d ready pods < replicas-maxUnavailable=%d", n, m)
		}
		return nil
	})
	// The new template cannot be scheduled, so the rollout stops where the bounds hold it.
	e.updateDeployment("prop", func(d *appsv1.Deployment) { bumpTemplate(d, "2"); unschedulable(&d.Spec.Template.Spec) })
	waitSpecs := func(wantOld, wantNew int32, desired, maxR string) {
		t.Helper()
		e.eventually(60*time.Second, fmt.Sprintf("old replicaset at %d, new at %d", wantOld, wantNew), func(ctx context.Context) error {
			rss, err := e.replicaSetsOf(ctx, d)
			if err != nil {
				return err
			}
			if len(rss) != 2 {
				return fmt.Errorf("replicasets %s", describeRSs(rss))
			}
			nw, ol := rss[0], rss[1]
			if ol.UID != old.UID || ptr.Deref(ol.Spec.Replicas, -1) != wantOld || ptr.Deref(nw.Spec.Replicas, -1) != wantNew {
				return fmt.Errorf("replicasets %s", describeRSs(rss))
			}
			for _, rs := range rss {
				if rs.Annotations[desiredReplicasAnnotation] != desired || rs.Annotations[maxReplicasAnnotation] != maxR {
					return fmt.Errorf("replicaset %s desired-replicas %q max-replicas %q, want %s and %s", rs.Name, rs.Annotations[desiredReplicasAnnotation], rs.Annotations[maxReplicasAnnotation], desired, maxR)
				}
			}
			return nil
		})
	}
	staysAt := func(wantOld, wantNew int32) {
		t.Helper()
		e.consistently(2*time.Second, fmt.Sprintf("the stuck rollout stays at old %d, new %d", wantOld, wantNew), func(ctx context.Context) error {
			rss, err := e.replicaSetsOf(ctx, d)
			if err != nil {
				return err
			}
			if len(rss) != 2 || ptr.Deref(rss[1].Spec.Replicas, -1) != wantOld || ptr.Deref(rss[0].Spec.Replicas, -1) != wantNew {
				return fmt.Errorf("replicasets %s", describeRSs(rss))
			}
			return nil
		})
	}
	// 6 replicas, surge 2, unavailable 1: the new ReplicaSet surges to 2, the old one
	// gives up 1, the new one takes the freed slot: old 5 + new 3 = 8.
	waitSpecs(5, 3, "6", "8")
	staysAt(5, 3)
	// Scale to 12 (14 with the surge): the 6 more are shared 5*14/8 -> 9 and 3*14/8 -> 5.
	e.updateDeployment("prop", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](12) })
	waitSpecs(9, 5, "12", "14")
	staysAt(9, 5)
	// Scale to 4 (6 with the surge): 8 fewer, shared 9*6/14 -> 4 and 5*6/14 -> 2; then the
	// rollout goes on to old 3, new 3.
	minReady.Store(3)
	e.updateDeployment("prop", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](4) })
	waitSpecs(3, 3, "4", "6")
	rssTracker.assertNone(t, "two replicasets")
	ready.assertNone(t, "ready pods >= replicas-maxUnavailable")
	e.eventually(10*time.Second, "scaling 12 -> 4 mid-rollout showed old 4, new 2 first", func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(seen, pair{4, 2}) {
			return fmt.Errorf("(old, new) seen: %v", seen)
		}
		return nil
	})
	mu.Lock()
	if slices.ContainsFunc(seen, func(p pair) bool { return p.old+p.new > 14 }) {
		t.Errorf("replicas above 12+surge at some point: (old, new) seen: %v", seen)
	}
	mu.Unlock()

	// Unblocked, the rollout completes at the new size.
	e.updateDeployment("prop", func(d *appsv1.Deployment) { d.Spec.Template.Spec.NodeSelector = nil })
	e.waitComplete("prop", 90*time.Second)
}

// Pods count available only minReadySeconds after they are ready; the Available
// condition follows.
func TestDeploymentMinReadySeconds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const minReady = 4
	d := newDeployment("minready", 2)
	d.Spec.MinReadySeconds = minReady
	var mu sync.Mutex
	var seen []availabilitySample
	var seenConds []string
	w := e.watchers()
	track(t, w, w.deployments(), func(all []*appsv1.Deployment) error {
		for _, d := range all {
			c := condition(d, appsv1.DeploymentAvailable)
			s := "none"
			if c != nil {
				s = fmt.Sprintf("%s/%s/%s", c.Status, c.Reason, c.Message)
			}
			mu.Lock()
			seen = append(seen, availabilitySample{time.Now(), d.Status.AvailableReplicas})
			seenConds = append(seenConds, s)
			mu.Unlock()
		}
		return nil
	})
	e.createDeployment(d)
	d = e.waitComplete("minready", time.Duration(minReady+60)*time.Second)
	rs, err := e.newRSOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	e.waitSeen(&mu, &seenConds, "Available",
		"False/MinimumReplicasUnavailable/Deployment does not have minimum availability.",
		"True/MinimumReplicasAvailable/Deployment has minimum availability.")
	mu.Lock()
	defer mu.Unlock()
	e.checkNotAvailableEarly(rs.UID, minReady*time.Second, seen)
	if last := seenConds[len(seenConds)-1]; !strings.HasPrefix(last, "True/") {
		t.Errorf("Available condition ends %q", last)
	}
}

// Progressing: NewReplicaSetCreated, ProgressDeadlineExceeded once pods stay pending past
// progressDeadlineSeconds, then ReplicaSetUpdated and NewReplicaSetAvailable when a fixed
// template rolls out; Available False then True.
func TestDeploymentProgressDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const deadline = 5
	d := newDeployment("deadline", 1, unschedulable)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](deadline)
	var mu sync.Mutex
	var progressing []string
	w := e.watchers()
	track(t, w, w.deployments(), func(all []*appsv1.Deployment) error {
		recordProgressing(&mu, &progressing, all)
		return nil
	})
	start := time.Now()
	e.createDeployment(d)
	stuck := e.waitProgressing("deadline", corev1.ConditionFalse, "ProgressDeadlineExceeded", func(rs string) string {
		return fmt.Sprintf("ReplicaSet %q has timed out progressing.", rs)
	})
	if el := time.Since(start); el < deadline*time.Second {
		t.Errorf("ProgressDeadlineExceeded %s after creation, before progressDeadlineSeconds=%d", el, deadline)
	}
	if c := condition(stuck, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "MinimumReplicasUnavailable" {
		t.Errorf("Available condition %+v while stuck, want False MinimumReplicasUnavailable", c)
	}
	if st := stuck.Status; st.Replicas != 1 || st.UpdatedReplicas != 1 || st.AvailableReplicas != 0 || st.UnavailableReplicas != 1 {
		t.Errorf("status while stuck %+v, want replicas 1 updated 1 available 0 unavailable 1", st)
	}

	e.updateDeployment("deadline", func(d *appsv1.Deployment) { d.Spec.Template.Spec.NodeSelector = nil })
	e.waitProgressing("deadline", corev1.ConditionTrue, "NewReplicaSetAvailable", func(rs string) string {
		return fmt.Sprintf("ReplicaSet %q has successfully progressed.", rs)
	})
	done := e.waitComplete("deadline", 60*time.Second)
	if c := condition(done, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Available condition %+v after the rollout", c)
	}
	e.waitSeen(&mu, &progressing, "Progressing", "True/NewReplicaSetCreated", "False/ProgressDeadlineExceeded", "True/ReplicaSetUpdated", "True/NewReplicaSetAvailable")
}

// Status fields replicas, updatedReplicas, readyReplicas, availableReplicas,
// unavailableReplicas, terminatingReplicas and observedGeneration in a complete, a stuck
// and a terminating state.
func TestDeploymentStatusFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("fields", 3)
	d.Spec.Strategy = rollingUpdate(intstr.FromInt32(1), intstr.FromInt32(0))
	d.Spec.Template.Finalizers = []string{holdFinalizer}
	d = e.createDeployment(d)
	done := e.waitComplete("fields", 60*time.Second)
	type fields struct{ replicas, updated, ready, available, unavailable, terminating int32 }
	got := func(d *appsv1.Deployment) fields {
		s := d.Status
		return fields{s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.UnavailableReplicas, ptr.Deref(s.TerminatingReplicas, -1)}
	}
	waitFields := func(what string, want fields) {
		t.Helper()
		e.eventually(60*time.Second, what, func(ctx context.Context) error {
			d, err := e.cs.AppsV1().Deployments(e.ns).Get(ctx, "fields", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.ObservedGeneration != d.Generation {
				return fmt.Errorf("observedGeneration %d, generation %d", d.Status.ObservedGeneration, d.Generation)
			}
			if g := got(d); g != want {
				return fmt.Errorf("status %+v, want %+v (terminating -1 = unset)", g, want)
			}
			return nil
		})
	}
	if g := got(done); g != (fields{3, 3, 3, 3, 0, 0}) {
		t.Fatalf("complete: status %+v", g)
	}
	// A new template that cannot be scheduled: one surge pod, pending.
	e.updateDeployment("fields", func(d *appsv1.Deployment) { bumpTemplate(d, "2"); unschedulable(&d.Spec.Template.Spec) })
	waitFields("stuck rollout", fields{replicas: 4, updated: 1, ready: 3, available: 3, unavailable: 1, terminating: 0})

	// An old pod deleted is held by its finalizer: it is terminating and is replaced.
	old, err := e.replicaSetsOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	act, _, err := e.ownedPods(e.ctx(), old[len(old)-1].UID)
	if err != nil || len(act) == 0 {
		t.Fatalf("old pods %v: %v", names(act), err)
	}
	if err := e.cs.CoreV1().Pods(e.ns).Delete(e.ctx(), act[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFields("a terminating old pod", fields{replicas: 4, updated: 1, ready: 3, available: 3, unavailable: 1, terminating: 1})
}

// ScalingReplicaSet events, worded as upstream: a rolling update with surge 1 and
// unavailable 0 of 2 replicas is exactly these four steps.
func TestDeploymentScalingEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := newDeployment("events", 2)
	d.Spec.Strategy = rollingUpdate(intstr.FromInt32(1), intstr.FromInt32(0))
	e.createDeployment(d)
	d = e.waitComplete("events", 60*time.Second)
	first, err := e.newRSOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	e.updateDeployment("events", func(d *appsv1.Deployment) { bumpTemplate(d, "2") })
	d = e.waitComplete("events", 60*time.Second)
	second, err := e.newRSOf(e.ctx(), d)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Scaled up replica set " + first.Name + " from 0 to 2",
		"Scaled up replica set " + second.Name + " from 0 to 1",
		"Scaled down replica set " + first.Name + " from 2 to 1",
		"Scaled up replica set " + second.Name + " from 1 to 2",
		"Scaled down replica set " + first.Name + " from 1 to 0",
	}
	e.eventually(30*time.Second, "ScalingReplicaSet events", func(ctx context.Context) error {
		evs, err := e.events(ctx, "Deployment", "events")
		if err != nil {
			return err
		}
		var got []string
		for _, ev := range evs {
			if ev.Reason != "ScalingReplicaSet" {
				continue
			}
			if ev.Type != corev1.EventTypeNormal || ev.Source.Component != deploymentComponent {
				return fmt.Errorf("event %q is %s from %q, want Normal from %s", ev.Message, ev.Type, ev.Source.Component, deploymentComponent)
			}
			got = append(got, ev.Message)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("ScalingReplicaSet events %q, want %q", got, want)
		}
		return nil
	})
}

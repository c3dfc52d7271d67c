package workloads

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
)

const rsComponent = "replicaset-controller"

func TestReplicaSetScalesToSpecReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "scale"}
	e.createRS(newReplicaSet("scale", 3, labels))
	rs := e.waitRSPods("scale", 3, true, 60*time.Second)
	if rs.Status.AvailableReplicas != 3 || rs.Status.FullyLabeledReplicas != 3 {
		t.Fatalf("after scale-up to 3: status %+v, want available=3 fullyLabeled=3", rs.Status)
	}

	for _, n := range []int32{5, 1, 0, 2} {
		e.scaleRS("scale", n)
		rs = e.waitRSPods("scale", n, true, 60*time.Second)
		if rs.Status.ReadyReplicas != n || rs.Status.FullyLabeledReplicas != n {
			t.Fatalf("after scaling to %d: status %+v", n, rs.Status)
		}
	}
}

// Expectations must keep a burst of scale changes from creating more pods than needed:
// at no observed instant more active pods than the largest replicas written so far, at
// most as many creations as the targets' upward steps add up to, and afterwards exactly
// spec.replicas pods, stably.
func TestReplicaSetNoDuplicateCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "burst"}
	rs := e.createRS(newReplicaSet("burst", 0, labels, unassigned))
	var limit atomic.Int32
	var createdMu sync.Mutex
	created := map[types.UID]bool{}
	w := e.watchers()
	pods := track(t, w, w.pods(), func(ps []*corev1.Pod) error {
		n := 0
		for _, p := range ps {
			if !controlledBy(p, rs.UID) {
				continue
			}
			createdMu.Lock()
			created[p.UID] = true
			createdMu.Unlock()
			if active(p) {
				n++
			}
		}
		if l := limit.Load(); int32(n) > l {
			return fmt.Errorf("%d active pods, but spec.replicas was never above %d", n, l)
		}
		return nil
	})

	targets := []int32{4, 1, 6, 2, 5, 3}
	upward, prev := 0, int32(0)
	for _, n := range targets {
		if n > limit.Load() {
			limit.Store(n)
		}
		upward += int(max(n-prev, 0))
		prev = n
		e.scaleRS("burst", n)
		time.Sleep(150 * time.Millisecond)
	}
	final := targets[len(targets)-1]
	e.waitRSPods("burst", final, false, 60*time.Second)
	limit.Store(final)
	createdMu.Lock()
	settled := len(created)
	createdMu.Unlock()
	e.consistently(3*time.Second, "pod count stays at spec.replicas", func(ctx context.Context) error {
		act, _, err := e.ownedPods(ctx, rs.UID)
		if err != nil {
			return err
		}
		if len(act) != int(final) {
			return fmt.Errorf("%d active pods %v, want %d", len(act), names(act), final)
		}
		return nil
	})
	pods.assertNone(t, "active pods never above the largest spec.replicas written")
	createdMu.Lock()
	defer createdMu.Unlock()
	if len(created) != settled {
		t.Errorf("%d pods created after the count settled at %d", len(created)-settled, final)
	}
	if len(created) > upward {
		t.Errorf("%d pods created for targets %v; at most %d are ever needed", len(created), targets, upward)
	}
	t.Logf("%d pods created for targets %v (upward steps add up to %d)", len(created), targets, upward)
}

func TestReplicaSetAdoptsOrphansAndReleasesPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "adopt"}
	orphans := e.createOrphans(2, labels)
	e.waitRunning(orphans) // see waitRunning: the orphans run before the ReplicaSet comes
	rs := e.createRS(newReplicaSet("adopt", 3, labels))
	e.waitRSPods("adopt", 3, true, 60*time.Second)
	for _, o := range orphans {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(e.ctx(), o.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ref := metav1.GetControllerOf(p)
		want := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "adopt", UID: rs.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
		if ref == nil || !equality.Semantic.DeepEqual(*ref, want) {
			t.Fatalf("orphan %s: controller reference %+v, want %+v", p.Name, ref, want)
		}
	}
	msgs, err := e.eventMessages(e.ctx(), "ReplicaSet", "adopt", "SuccessfulCreate")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("the ReplicaSet adopted 2 orphans and needed 1 pod, but its SuccessfulCreate events are %q", msgs)
	}

	// A pod whose labels stop matching is released (its owner reference removed) and
	// replaced; it is not deleted.
	released := orphans[0].Name
	e.releaseAndReplace(released, rs.UID, "replicaset", 3)
	e.waitRSPods("adopt", 3, true, 60*time.Second)
}

func TestReplicaSetLeavesPodsOfOtherControllers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "shared"}
	owner, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(e.ctx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreignRef := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}
	foreign := e.createPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: copyMap(labels), OwnerReferences: []metav1.OwnerReference{foreignRef}},
		Spec:       podSpec(),
	})
	e.createRS(newReplicaSet("shared", 2, labels))
	e.waitRSPods("shared", 2, true, 60*time.Second)
	check := func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, foreign.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("pod of another controller: %w", err)
		}
		if p.DeletionTimestamp != nil {
			return fmt.Errorf("pod of another controller is being deleted")
		}
		if len(p.OwnerReferences) != 1 || !equality.Semantic.DeepEqual(p.OwnerReferences[0], foreignRef) {
			return fmt.Errorf("pod of another controller has owner references %+v, want only %+v", p.OwnerReferences, foreignRef)
		}
		return nil
	}
	if err := check(e.ctx()); err != nil {
		t.Fatal(err)
	}
	e.scaleRS("shared", 0)
	e.waitRSPods("shared", 0, false, 60*time.Second)
	e.consistently(2*time.Second, "pod of another controller untouched", check)
}

func TestReplicaSetTerminatingPodsDoNotCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "term"}
	held := newReplicaSet("term", 2, labels)
	held.Spec.Template.Finalizers = []string{holdFinalizer}
	e.createRS(held)
	rs := e.waitRSPods("term", 2, true, 60*time.Second)
	act, _, err := e.ownedPods(e.ctx(), rs.UID)
	if err != nil {
		t.Fatal(err)
	}
	victim := act[0].Name
	if err := e.cs.CoreV1().Pods(e.ns).Delete(e.ctx(), victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(60*time.Second, "a replacement for the terminating pod, and terminatingReplicas=1", func(ctx context.Context) error {
		rs, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, "term", metav1.GetOptions{})
		if err != nil {
			return err
		}
		act, term, err := e.ownedPods(ctx, rs.UID)
		if err != nil {
			return err
		}
		if len(act) != 2 || len(term) != 1 || term[0].Name != victim {
			return fmt.Errorf("active %v, terminating %v", names(act), names(term))
		}
		st := rs.Status
		if st.Replicas != 2 || st.ReadyReplicas != 2 || ptr.Deref(st.TerminatingReplicas, -1) != 1 {
			return fmt.Errorf("status replicas=%d ready=%d terminatingReplicas=%v, want 2, 2, 1", st.Replicas, st.ReadyReplicas, ptrString(st.TerminatingReplicas))
		}
		return nil
	})
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(e.ctx(), victim, types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(60*time.Second, "terminatingReplicas back to 0 once the pod is gone", func(ctx context.Context) error {
		rs, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, "term", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if rs.Status.Replicas != 2 || ptr.Deref(rs.Status.TerminatingReplicas, -1) != 0 {
			return fmt.Errorf("status replicas=%d terminatingReplicas=%s", rs.Status.Replicas, ptrString(rs.Status.TerminatingReplicas))
		}
		return nil
	})
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// Scale-down deletes pods in upstream's order: unassigned before assigned, pending before
// running, not ready before ready, lower pod-deletion-cost first. The pods are made by
// hand (the ReplicaSet adopts them) on a node nobody runs, so their states stay put.
func TestReplicaSetDeletionOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.ghostNode()
	labels := map[string]string{"app": "order"}
	mk := func(name string, mut func(*corev1.Pod)) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: copyMap(labels)}, Spec: podSpec()}
		mut(p)
		e.createPod(p)
	}
	onNode := func(p *corev1.Pod) { p.Spec.NodeName = node }
	mk("a-unassigned", func(p *corev1.Pod) { unassigned(&p.Spec) })
	mk("b-pending", onNode)
	mk("c-running-not-ready", onNode)
	mk("d-ready", onNode)
	mk("e-ready-costly", func(p *corev1.Pod) {
		onNode(p)
		p.Annotations = map[string]string{"controller.kubernetes.io/pod-deletion-cost": "100"}
	})
	e.setPodStatus("c-running-not-ready", corev1.PodRunning, false)
	e.setPodStatus("d-ready", corev1.PodRunning, true)
	e.setPodStatus("e-ready-costly", corev1.PodRunning, true)

	rs := e.createRS(newReplicaSet("order", 5, labels))
	e.waitRSPods("order", 5, false, 60*time.Second)
	order := []string{"a-unassigned", "b-pending", "c-running-not-ready", "d-ready"}
	for i, victim := range order {
		n := int32(len(order) - i)
		e.scaleRS("order", n)
		e.eventually(60*time.Second, fmt.Sprintf("scale to %d deletes %s", n, victim), func(ctx context.Context) error {
			act, _, err := e.ownedPods(ctx, rs.UID)
			if err != nil {
				return err
			}
			want := append([]string(nil), order[i+1:]...)
			want = append(want, "e-ready-costly")
			if got := names(act); !slices.Equal(got, want) {
				return fmt.Errorf("active pods %v, want %v", got, want)
			}
			return nil
		})
	}
	e.waitRSPods("order", 1, false, 30*time.Second)
}

// ghostNode registers a Node that no kubelet or kwok serves (tainted so the scheduler
// keeps off it): pods bound to it keep whatever status the test writes.
func (e *env) ghostNode() string {
	e.t.Helper()
	name := "e2e-ghost-" + strings.ToLower(rand.String(8))
	_, err := e.cs.CoreV1().Nodes().Create(e.ctx(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kshard.io/e2e-ghost": "true"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kshard.io/e2e-ghost", Effect: corev1.TaintEffectNoSchedule}}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating node %s: %v", name, err)
	}
	e.t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// setPodStatus writes a pod's phase and Ready condition, as a kubelet would.
func (e *env) setPodStatus(name string, phase corev1.PodPhase, ready bool) {
	e.t.Helper()
	p, err := e.cs.CoreV1().Pods(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	p.Status.Phase = phase
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).UpdateStatus(e.ctx(), p, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("setting the status of pod %s: %v", name, err)
	}
}

// Status: replicas, fullyLabeledReplicas (an adopted pod lacks a template label),
// readyReplicas, availableReplicas only minReadySeconds after readiness (and reached
// without any other event, so the controller requeues itself), observedGeneration.
func TestReplicaSetStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const minReady = 4
	sel := map[string]string{"app": "status"}
	e.createPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "partly-labeled", Labels: copyMap(sel)}, Spec: podSpec()})
	rs := newReplicaSet("status", 3, sel)
	rs.Spec.Template.Labels["tier"] = "web"
	rs.Spec.MinReadySeconds = minReady

	var mu sync.Mutex
	var seen []availabilitySample
	w := e.watchers()
	rss := track(t, w, w.replicaSets(), func(all []*appsv1.ReplicaSet) error {
		for _, r := range all {
			mu.Lock()
			seen = append(seen, availabilitySample{time.Now(), r.Status.AvailableReplicas})
			mu.Unlock()
			if r.Status.AvailableReplicas > r.Status.ReadyReplicas || r.Status.ReadyReplicas > r.Status.Replicas {
				return fmt.Errorf("status available=%d ready=%d replicas=%d", r.Status.AvailableReplicas, r.Status.ReadyReplicas, r.Status.Replicas)
			}
		}
		return nil
	})
	created := e.createRS(rs)
	got := e.waitRSPods("status", 3, true, 60*time.Second)
	if got.Status.FullyLabeledReplicas != 2 {
		t.Errorf("fullyLabeledReplicas=%d, want 2 (one adopted pod lacks the template's tier label)", got.Status.FullyLabeledReplicas)
	}
	e.eventually(time.Duration(minReady+20)*time.Second, "availableReplicas=3 after minReadySeconds", func(ctx context.Context) error {
		r, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, "status", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r.Status.AvailableReplicas != 3 {
			return fmt.Errorf("availableReplicas=%d", r.Status.AvailableReplicas)
		}
		return nil
	})
	mu.Lock()
	e.checkNotAvailableEarly(created.UID, minReady*time.Second, seen)
	mu.Unlock()
	rss.assertNone(t, "available <= ready <= replicas")

	updated := e.updateRS("status", func(r *appsv1.ReplicaSet) { r.Spec.MinReadySeconds = 0 })
	e.eventually(30*time.Second, "observedGeneration follows generation", func(ctx context.Context) error {
		r, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, "status", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r.Status.ObservedGeneration != updated.Generation {
			return fmt.Errorf("observedGeneration=%d, generation=%d", r.Status.ObservedGeneration, updated.Generation)
		}
		return nil
	})
}

// A quota that forbids pods gives the ReplicaSet a ReplicaFailure condition and
// FailedCreate events; once the quota allows, the pod is created and the condition goes.
func TestReplicaSetReplicaFailureOnQuota(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}},
	}
	if _, err := e.cs.CoreV1().ResourceQuotas(e.ns).Create(e.ctx(), quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(30*time.Second, "quota status computed", func(ctx context.Context) error {
		q, err := e.cs.CoreV1().ResourceQuotas(e.ns).Get(ctx, "pods", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := q.Status.Hard[corev1.ResourcePods]; !ok {
			return fmt.Errorf("status.hard %v", q.Status.Hard)
		}
		return nil
	})
	labels := map[string]string{"app": "quota"}
	rs := e.createRS(newReplicaSet("quota", 3, labels, unassigned))
	e.eventually(60*time.Second, "2 pods and a ReplicaFailure condition", func(ctx context.Context) error {
		r, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, "quota", metav1.GetOptions{})
		if err != nil {
			return err
		}
		act, _, err := e.ownedPods(ctx, rs.UID)
		if err != nil {
			return err
		}
		if len(act) != 2 || r.Status.Replicas != 2 {
			return fmt.Errorf("%d active pods, status.replicas=%d", len(act), r.Status.Replicas)
		}
		var cond *appsv1.ReplicaSetCondition
		for i := range r.Status.Conditions {
			if r.Status.Conditions[i].Type == appsv1.ReplicaSetReplicaFailure {
				cond = &r.Status.Conditions[i]
			}
		}
		if cond == nil {
			return fmt.Errorf("no ReplicaFailure condition in %+v", r.Status.Conditions)
		}
		if cond.Status != corev1.ConditionTrue || cond.Reason != "FailedCreate" ||
			!strings.HasPrefix(cond.Message, `pods "quota-`) || !strings.Contains(cond.Message, "is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2") {
			return fmt.Errorf("ReplicaFailure condition %+v", *cond)
		}
		return nil
	})
	e.waitEvent("ReplicaSet", "quota", "FailedCreate", corev1.EventTypeWarning, rsComponent, func(msg string) bool {
		return strings.HasPrefix(msg, `Error creating: pods "quota-`) &&
			strings.HasSuffix(msg, `is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2`)
	})

	q, err := e.cs.CoreV1().ResourceQuotas(e.ns).Get(e.ctx(), "pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard[corev1.ResourcePods] = resource.MustParse("3")
	if _, err := e.cs.CoreV1().ResourceQuotas(e.ns).Update(e.ctx(), q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(90*time.Second, "the third pod created and the ReplicaFailure condition removed", func(ctx context.Context) error {
		r, err := e.cs.AppsV1().ReplicaSets(e.ns).Get(ctx, "quota", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r.Status.Replicas != 3 {
			return fmt.Errorf("status.replicas=%d", r.Status.Replicas)
		}
		if len(r.Status.Conditions) != 0 {
			return fmt.Errorf("conditions %+v", r.Status.Conditions)
		}
		return nil
	})
}

// Events SuccessfulCreate and SuccessfulDelete name each pod as upstream words them.
func TestReplicaSetEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "events"}
	rs := e.createRS(newReplicaSet("events", 2, labels, unassigned))
	e.waitRSPods("events", 2, false, 60*time.Second)
	act, _, err := e.ownedPods(e.ctx(), rs.UID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range act {
		want := "Created pod: " + p.Name
		e.waitEvent("ReplicaSet", "events", "SuccessfulCreate", corev1.EventTypeNormal, rsComponent, func(msg string) bool { return msg == want })
	}
	e.scaleRS("events", 1)
	e.waitRSPods("events", 1, false, 60*time.Second)
	left, _, err := e.ownedPods(e.ctx(), rs.UID)
	if err != nil {
		t.Fatal(err)
	}
	var gone string
	for _, p := range act {
		if p.Name != left[0].Name {
			gone = p.Name
		}
	}
	e.waitEvent("ReplicaSet", "events", "SuccessfulDelete", corev1.EventTypeNormal, rsComponent, func(msg string) bool { return msg == "Deleted pod: "+gone })
	msgs, err := e.eventMessages(e.ctx(), "ReplicaSet", "events", "SuccessfulCreate")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Errorf("SuccessfulCreate events %q, want one per created pod (2)", msgs)
	}
}

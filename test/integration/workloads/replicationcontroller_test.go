package workloads

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// rcComponent is the source of the ReplicationController controller's events, as
// kube-controller-manager names it.
const rcComponent = "replication-controller"

// newRC returns a ReplicationController without a selector: the API server defaults it
// from the template's labels.
func newRC(name string, replicas int32, labels map[string]string, spec ...func(*corev1.PodSpec)) *corev1.ReplicationController {
	ps := podSpec()
	for _, fn := range spec {
		fn(&ps)
	}
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To(replicas),
			Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: copyMap(labels)}, Spec: ps},
		},
	}
}

func (e *env) createRC(rc *corev1.ReplicationController) *corev1.ReplicationController {
	e.t.Helper()
	out, err := e.cs.CoreV1().ReplicationControllers(e.ns).Create(e.ctx(), rc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating replicationcontroller %s: %v", rc.Name, err)
	}
	return out
}

// scaleRC sets spec.replicas, retrying on conflicts.
func (e *env) scaleRC(name string, replicas int32) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rc, err := e.cs.CoreV1().ReplicationControllers(e.ns).Get(e.ctx(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rc.Spec.Replicas = ptr.To(replicas)
		_, err = e.cs.CoreV1().ReplicationControllers(e.ns).Update(e.ctx(), rc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("scaling replicationcontroller %s: %v", name, err)
	}
}

// waitRCPods waits until the ReplicationController controls exactly n active pods, all
// Ready and available when ready is set, and its status says so for its current
// generation.
func (e *env) waitRCPods(name string, n int32, ready bool, timeout time.Duration) *corev1.ReplicationController {
	e.t.Helper()
	var rc *corev1.ReplicationController
	e.eventually(timeout, fmt.Sprintf("replicationcontroller %s has %d active pods (ready=%v) and status to match", name, n, ready), func(ctx context.Context) error {
		var err error
		rc, err = e.cs.CoreV1().ReplicationControllers(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		act, _, err := e.ownedPods(ctx, rc.UID)
		if err != nil {
			return err
		}
		if int32(len(act)) != n {
			return fmt.Errorf("%d active pods %v", len(act), names(act))
		}
		st := rc.Status
		if st.ObservedGeneration != rc.Generation || st.Replicas != n || st.FullyLabeledReplicas != n {
			return fmt.Errorf("status %+v (generation %d)", st, rc.Generation)
		}
		if ready {
			for _, p := range act {
				if !podReady(&p) {
					return fmt.Errorf("pod %s not ready", p.Name)
				}
			}
			if st.ReadyReplicas != n || st.AvailableReplicas != n {
				return fmt.Errorf("status readyReplicas=%d availableReplicas=%d", st.ReadyReplicas, st.AvailableReplicas)
			}
		}
		return nil
	})
	return rc
}

// wantRCRef checks that the pod is controlled by the ReplicationController as its
// controller writes it.
func (e *env) wantRCRef(p *corev1.Pod, rc *corev1.ReplicationController) {
	e.t.Helper()
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "ReplicationController", Name: rc.Name, UID: rc.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	if ref := metav1.GetControllerOf(p); ref == nil || !equality.Semantic.DeepEqual(*ref, want) {
		e.t.Fatalf("pod %s: controller reference %+v, want %+v", p.Name, ref, want)
	}
}

// A ReplicationController gets its pods (owned by kind ReplicationController, named after
// it), follows scale-ups and -downs, replaces a deleted pod, reports its status, and
// records SuccessfulCreate and SuccessfulDelete as "replication-controller".
func TestReplicationControllerScalesAndReplacesPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "rc-scale"}
	rc := e.createRC(newRC("rc-scale", 3, labels))
	if !equality.Semantic.DeepEqual(rc.Spec.Selector, labels) {
		t.Fatalf("selector %v: the API server should default it to the template's labels %v", rc.Spec.Selector, labels)
	}
	e.waitRCPods("rc-scale", 3, true, 60*time.Second)
	act, _, err := e.ownedPods(e.ctx(), rc.UID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range act {
		e.wantRCRef(&p, rc)
		if !strings.HasPrefix(p.Name, "rc-scale-") {
			t.Errorf("pod %s is not named after its ReplicationController", p.Name)
		}
	}
	e.waitEvent("ReplicationController", "rc-scale", "SuccessfulCreate", corev1.EventTypeNormal, rcComponent, func(msg string) bool {
		return strings.HasPrefix(msg, "Created pod: rc-scale-")
	})

	for _, n := range []int32{5, 1} {
		e.scaleRC("rc-scale", n)
		e.waitRCPods("rc-scale", n, true, 60*time.Second)
	}
	e.waitEvent("ReplicationController", "rc-scale", "SuccessfulDelete", corev1.EventTypeNormal, rcComponent, func(msg string) bool {
		return strings.HasPrefix(msg, "Deleted pod: rc-scale-")
	})

	// A deleted pod is replaced.
	act, _, err = e.ownedPods(e.ctx(), rc.UID)
	if err != nil || len(act) != 1 {
		t.Fatalf("owned pods %v, %v; want 1", names(act), err)
	}
	gone := act[0]
	if err := e.cs.CoreV1().Pods(e.ns).Delete(e.ctx(), gone.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	e.eventually(60*time.Second, "the deleted pod replaced", func(ctx context.Context) error {
		act, _, err := e.ownedPods(ctx, rc.UID)
		if err != nil {
			return err
		}
		if len(act) != 1 || act[0].UID == gone.UID {
			return fmt.Errorf("active pods %v", names(act))
		}
		return nil
	})
	e.waitRCPods("rc-scale", 1, true, 60*time.Second)
}

// A ReplicationController adopts the running orphans its selector matches and creates only
// what is missing; a pod relabelled out of its selector is released (not deleted) and
// replaced; a pod of another controller with matching labels is left alone.
func TestReplicationControllerAdoptsAndReleasesPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labels := map[string]string{"app": "rc-adopt"}
	orphans := e.createOrphans(2, labels)
	owner, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(e.ctx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign := e.createPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Labels: copyMap(labels), OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
		Spec: podSpec(),
	})
	e.waitRunning(orphans) // see waitRunning
	rc := e.createRC(newRC("rc-adopt", 3, labels))
	e.waitRCPods("rc-adopt", 3, true, 60*time.Second)
	for _, o := range orphans {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(e.ctx(), o.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.wantRCRef(p, rc)
	}
	if p, err := e.cs.CoreV1().Pods(e.ns).Get(e.ctx(), foreign.Name, metav1.GetOptions{}); err != nil || metav1.GetControllerOf(p).UID != owner.UID {
		t.Fatalf("the pod of another controller was taken: %v %v", p.OwnerReferences, err)
	}
	msgs, err := e.eventMessages(e.ctx(), "ReplicationController", "rc-adopt", "SuccessfulCreate")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("the ReplicationController adopted 2 orphans and needed 1 pod, but its SuccessfulCreate events are %q", msgs)
	}

	released := orphans[0].Name
	e.releaseAndReplace(released, rc.UID, "replicationcontroller", 3)
	e.waitRCPods("rc-adopt", 3, true, 60*time.Second)
}

// kubectl scale rc goes through the ReplicationController's scale subresource; the
// controller follows, and kubectl's --current-replicas precondition holds.
func TestKubectlScaleRC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createRC(newRC("rc-kubectl", 2, map[string]string{"app": "rc-kubectl"}))
	e.waitRCPods("rc-kubectl", 2, true, 60*time.Second)
	out := e.mustKubectl("scale", "rc/rc-kubectl", "--replicas=4")
	if !strings.Contains(out, "replicationcontroller/rc-kubectl scaled") {
		t.Errorf("kubectl scale printed %q", out)
	}
	e.waitRCPods("rc-kubectl", 4, true, 60*time.Second)
	if _, stderr, err := e.kubectl("scale", "rc/rc-kubectl", "--current-replicas=3", "--replicas=1"); err == nil ||
		!strings.Contains(strings.ToLower(stderr), "expected replicas to be 3, was 4") {
		t.Errorf("kubectl scale with a wrong --current-replicas: err=%v stderr=%q; want the precondition to fail", err, stderr)
	}
	e.mustKubectl("scale", "rc/rc-kubectl", "--current-replicas=4", "--replicas=1")
	e.waitRCPods("rc-kubectl", 1, true, 60*time.Second)
	out = e.mustKubectl("get", "rc/rc-kubectl", "-o", "jsonpath={.status.replicas}/{.status.readyReplicas}")
	if out != "1/1" {
		t.Errorf("kubectl get rc: replicas/ready %q, want 1/1", out)
	}
}

// A quota that forbids pods gives the ReplicationController a ReplicaFailure condition
// (reason FailedCreate, the API's error as message) and FailedCreate events; once the
// quota allows, the pod is created and the condition removed.
func TestReplicationControllerReplicaFailureOnQuota(t *testing.T) {
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
	rc := e.createRC(newRC("rc-quota", 3, map[string]string{"app": "rc-quota"}, unassigned))
	const quotaMsg = "is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2"
	e.eventually(60*time.Second, "2 pods and a ReplicaFailure condition", func(ctx context.Context) error {
		r, err := e.cs.CoreV1().ReplicationControllers(e.ns).Get(ctx, "rc-quota", metav1.GetOptions{})
		if err != nil {
			return err
		}
		act, _, err := e.ownedPods(ctx, rc.UID)
		if err != nil {
			return err
		}
		if len(act) != 2 || r.Status.Replicas != 2 {
			return fmt.Errorf("%d active pods, status.replicas=%d", len(act), r.Status.Replicas)
		}
		var cond *corev1.ReplicationControllerCondition
		for i := range r.Status.Conditions {
			if r.Status.Conditions[i].Type == corev1.ReplicationControllerReplicaFailure {
				cond = &r.Status.Conditions[i]
			}
		}
		if cond == nil {
			return fmt.Errorf("no ReplicaFailure condition in %+v", r.Status.Conditions)
		}
		if cond.Status != corev1.ConditionTrue || cond.Reason != "FailedCreate" ||
			!strings.HasPrefix(cond.Message, `pods "rc-quota-`) || !strings.Contains(cond.Message, quotaMsg) {
			return fmt.Errorf("ReplicaFailure condition %+v", *cond)
		}
		return nil
	})
	e.waitEvent("ReplicationController", "rc-quota", "FailedCreate", corev1.EventTypeWarning, rcComponent, func(msg string) bool {
		return strings.HasPrefix(msg, `Error creating: pods "rc-quota-`) && strings.HasSuffix(msg, quotaMsg)
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
		r, err := e.cs.CoreV1().ReplicationControllers(e.ns).Get(ctx, "rc-quota", metav1.GetOptions{})
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

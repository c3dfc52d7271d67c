package disruption

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kshard/kshard/test/framework"
)

// drainTaint keeps every pod but the drain test's off its node.
const drainTaint = "kshard.io/e2e-drain"

// kubectl drain of a kwok node evicts through the eviction subresource, so it honours the
// budget kshard keeps: with no disruption allowed nothing is evicted, with one allowed one
// pod goes (its replacement cannot be placed on the cordoned node, so none is allowed
// afterwards), with minAvailable 0 the drain completes. The node is the test's own (kwok
// manages it: annotated kwok.x-k8s.io/node=fake) and tainted, so that the drain disturbs
// no other test's pods.
func TestKubectlDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	node := "kwok-drain-" + e.ns[len(e.ns)-5:]
	_, err := e.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels:      map[string]string{"kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "type": "kwok-drain"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: drainTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	framework.Eventually(t, settle, "node "+node+" Ready", func(ctx context.Context) (bool, error) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	e.deployment("web", 2, func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		s.Tolerations = []corev1.Toleration{{Key: drainTaint, Operator: corev1.TolerationOpExists}}
	})
	e.budget("web", "web", minAvailable(intstr.FromInt32(2)))
	e.waitStatus("web", want{healthy: 2, desired: 2, expected: 2})
	original := e.waitPods("web", 2)

	onNode := func() []string {
		l, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				out = append(out, p.Name)
			}
		}
		return out
	}
	drain := func(timeout string) (string, error) {
		return e.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout="+timeout)
	}

	out, err := drain("10s")
	if err == nil || !strings.Contains(out, "disruption budget") {
		t.Fatalf("drain with no disruption allowed: err=%v, want it to fail on the budget", err)
	}
	if got := onNode(); len(got) != 2 {
		t.Fatalf("pods on the node after a refused drain: %v, want both", got)
	}

	e.updateBudget("web", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptrTo(intstr.FromInt32(1)) })
	e.waitStatus("web", want{healthy: 2, desired: 1, expected: 2, allowed: 1})
	if _, err := drain("15s"); err == nil {
		t.Fatalf("drain with one disruption allowed completed, want the second eviction refused")
	}
	left := onNode()
	if len(left) != 1 {
		t.Fatalf("pods on the node: %v, want exactly one of %s, %s evicted", left, original[0].Name, original[1].Name)
	}
	// The replacement is Pending (the node is cordoned): one healthy of one desired.
	e.waitStatus("web", want{healthy: 1, desired: 1, expected: 2})

	e.updateBudget("web", func(p *policyv1.PodDisruptionBudget) { p.Spec.MinAvailable = ptrTo(intstr.FromInt32(0)) })
	e.waitStatus("web", want{healthy: 1, desired: 0, expected: 2, allowed: 1})
	if out, err := drain("30s"); err != nil {
		t.Fatalf("drain with the budget allowing it: %v\n%s", err, out)
	}
	framework.Eventually(t, settle, "node emptied", func(context.Context) (bool, error) {
		got := onNode()
		if len(got) > 0 {
			return false, fmt.Errorf("left: %v", got)
		}
		return true, nil
	})
}

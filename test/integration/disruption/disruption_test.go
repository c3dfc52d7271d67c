package disruption

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/kshard/kshard/test/framework"
)

var (
	num = intstr.FromInt32
	pct = intstr.FromString
)

var (
	crds    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgets = schema.GroupVersionResource{Group: "disruption.kshard.io", Version: "v1", Resource: "widgets"}
)

// A custom resource with a scale subresource is a pod controller like the built-in ones:
// its scale is read through the scale subresource, and a change of it is seen at the next
// sync. A controller kind without a scale subresource (a ConfigMap) makes the sync fail
// safe. Not parallel: it runs first, before anything asked the controller's RESTMapper.
func TestScaleSubresource(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(e.f.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.disruption.kshard.io"},
		"spec": map[string]any{
			"group": "disruption.kshard.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"scale": map[string]any{
					"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	framework.Eventually(t, settle, "widgets served", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(widgets).Namespace(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	w, err := dyn.Resource(widgets).Namespace(e.ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "disruption.kshard.io/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"},
		"spec": map[string]any{"replicas": int64(3)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := controllerRef("disruption.kshard.io/v1", "Widget", "w", w.GetUID())
	e.pod("w-0", map[string]string{"app": "w"}, ref)
	e.pod("w-1", map[string]string{"app": "w"}, ref)
	e.waitPods("w", 2)
	e.budget("w", "w", maxUnavailable(num(1)))
	e.waitStatus("w", want{healthy: 2, desired: 2, expected: 3})

	if _, err := dyn.Resource(widgets).Namespace(e.ns).Patch(ctx, "w", types.MergePatchType, []byte(`{"spec":{"replicas":2}}`),
		metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	// The budget learns the new scale at its next sync: a pod's update is one.
	e.setCondition("w-0", corev1.PodCondition{Type: "example.com/touched", Status: corev1.ConditionTrue})
	e.waitStatus("w", want{healthy: 2, desired: 1, expected: 2, allowed: 1})

	cm, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.pod("cm-0", map[string]string{"app": "cm"}, controllerRef("v1", "ConfigMap", "cm", cm.UID))
	e.budget("cm", "cm", minAvailable(pct("50%")))
	p := e.waitStatus("cm", want{reason: policyv1.SyncFailedReason})
	if msg := describe(p); !strings.Contains(msg, "configmaps does not implement the scale subresource") {
		t.Errorf("status %s, want the condition to say configmaps have no scale subresource", msg)
	}
	e.waitEvent("PodDisruptionBudget", "cm", corev1.EventTypeWarning, "CalculateExpectedPodCountFailed")
}

// Each built-in controller kind resolves to its scale: a Deployment through its
// ReplicaSet, a bare ReplicaSet, a ReplicationController, a StatefulSet (whose pods the
// cluster's kube-controller-manager makes), with numbers and percentages.
func TestControllerKinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deployment("dep", 3)
	e.replicaSet("rs", 4)
	e.rc("rc", 4)
	e.statefulSet("sts", 2)
	e.budget("dep", "dep", maxUnavailable(num(1)))
	e.budget("rs", "rs", minAvailable(pct("50%")))
	e.budget("rc", "rc", maxUnavailable(pct("25%")))
	e.budget("sts", "sts", maxUnavailable(pct("50%")))
	e.waitStatus("dep", want{healthy: 3, desired: 2, expected: 3, allowed: 1})
	e.waitStatus("rs", want{healthy: 4, desired: 2, expected: 4, allowed: 2})
	e.waitStatus("rc", want{healthy: 4, desired: 3, expected: 4, allowed: 1})
	e.waitStatus("sts", want{healthy: 2, desired: 1, expected: 2, allowed: 1})

	// A changed spec is a new generation, observed.
	e.updateBudget("dep", func(p *policyv1.PodDisruptionBudget) { p.Spec.MaxUnavailable = ptrTo(pct("100%")) })
	e.waitStatus("dep", want{healthy: 3, desired: 0, expected: 3, allowed: 3})
	// A scaled Deployment changes the expected pods.
	if _, err := e.cs.AppsV1().Deployments(e.ns).Patch(context.Background(), "dep", types.MergePatchType,
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitStatus("dep", want{healthy: 1, desired: 0, expected: 1, allowed: 1})
}

func ptrTo[T any](v T) *T { return &v }

// Readiness (a pod the kubelet reports not Ready) and failure (kwok fails a pod) change
// the healthy count; a failed pod stays selected, so a number minAvailable expects it.
func TestReadinessAndFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rc("web", 3)
	e.budget("web", "web", minAvailable(num(2)))
	e.waitStatus("web", want{healthy: 3, desired: 2, expected: 3, allowed: 1})
	pods := e.waitPods("web", 3)
	e.notReady(pods[0].Name)
	e.waitStatus("web", want{healthy: 2, desired: 2, expected: 3})

	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(context.Background(), pods[1].Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"kshard.io/kwok":"fail"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The failed pod is replaced by a ready one; four pods selected, two of them ready.
	e.waitStatus("web", want{healthy: 2, desired: 2, expected: 4})
}

// The eviction subresource allows an eviction while disruptionsAllowed > 0, records the
// pod in disruptedPods and lowers the count; the next is refused until the controller has
// counted a new Ready pod. Bare pods, so that nothing replaces the evicted one before the
// second eviction is tried.
func TestEvictionHonoursBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, n := range []string{"web-0", "web-1", "web-2"} {
		e.pod(n, map[string]string{"app": "web"}, nil)
	}
	e.waitPods("web", 3)
	e.budget("web", "web", minAvailable(num(2)))
	e.waitStatus("web", want{healthy: 3, desired: 2, expected: 3, allowed: 1})
	if err := e.evict("web-0"); err != nil {
		t.Fatalf("first eviction refused: %v", err)
	}
	if err := e.evict("web-1"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("second eviction: %v, want it refused (429) by the budget", err)
	}
	p := e.waitStatus("web", want{healthy: 2, desired: 2, expected: 2})
	if len(p.Status.DisruptedPods) != 0 {
		t.Errorf("disruptedPods %v, want none once the evicted pod is gone", p.Status.DisruptedPods)
	}
	e.pod("web-3", map[string]string{"app": "web"}, nil)
	e.waitStatus("web", want{healthy: 3, desired: 2, expected: 3, allowed: 1})
	if err := e.evict("web-1"); err != nil {
		t.Fatalf("eviction after a new pod became Ready refused: %v", err)
	}
}

// An entry of disruptedPods whose pod is not deleted within two minutes is dropped when it
// expires (the recheck queue), with a NotDeleted warning on the pod; until then the pod
// does not count as healthy.
func TestDisruptedPodsExpire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rc("web", 2)
	e.budget("web", "web", minAvailable(num(1)))
	e.waitStatus("web", want{healthy: 2, desired: 1, expected: 2, allowed: 1})
	pods := e.waitPods("web", 2)
	victim := pods[0].Name
	// As the eviction subresource would record it, 110 s ago: 10 s left.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.PolicyV1().PodDisruptionBudgets(e.ns).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.DisruptedPods = map[string]metav1.Time{victim: metav1.NewTime(time.Now().Add(-110 * time.Second))}
		p.Status.DisruptionsAllowed = 0
		_, err = e.cs.PolicyV1().PodDisruptionBudgets(e.ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	p := e.waitStatus("web", want{healthy: 1, desired: 1, expected: 2})
	if _, ok := p.Status.DisruptedPods[victim]; !ok {
		t.Fatalf("disruptedPods %v lost %s before it expired", p.Status.DisruptedPods, victim)
	}
	p = e.waitStatus("web", want{healthy: 2, desired: 1, expected: 2, allowed: 1})
	if len(p.Status.DisruptedPods) != 0 {
		t.Errorf("disruptedPods %v after the expiry", p.Status.DisruptedPods)
	}
	msg := e.waitEvent("Pod", victim, corev1.EventTypeWarning, "NotDeleted")
	if want := fmt.Sprintf("Pod was expected by PDB %s/%s to be deleted but it wasn't", e.ns, e.ns); msg != want {
		t.Errorf("NotDeleted message %q, want upstream's %q", msg, want)
	}
}

// A True DisruptionTarget condition on a pod that is not terminating two minutes after its
// transition is reset to False; one the kubelet set is left alone.
func TestStaleDisruptionTarget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pod("evicted", map[string]string{"app": "stale"}, nil)
	e.pod("kubelet", map[string]string{"app": "stale"}, nil)
	e.waitPods("stale", 2)
	ago := metav1.NewTime(time.Now().Add(-110 * time.Second))
	e.setCondition("evicted", corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting", LastTransitionTime: ago})
	e.setCondition("kubelet", corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: corev1.PodReasonTerminationByKubelet, Message: "node shutdown", LastTransitionTime: ago})
	condOf := func(ctx context.Context, pod string) (*corev1.PodCondition, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget {
				return &c, nil
			}
		}
		return nil, fmt.Errorf("no DisruptionTarget condition")
	}
	framework.Eventually(t, settle, "the stale condition reset", func(ctx context.Context) (bool, error) {
		c, err := condOf(ctx, "evicted")
		if err != nil {
			return false, err
		}
		if c.Status != corev1.ConditionFalse {
			return false, fmt.Errorf("condition %+v", *c)
		}
		if c.Reason != "" || c.Message != "" {
			t.Errorf("reset condition %+v, want no reason or message (upstream's)", *c)
		}
		return true, nil
	})
	if c, err := condOf(context.Background(), "kubelet"); err != nil || c.Status != corev1.ConditionTrue {
		t.Errorf("the kubelet's condition: %+v, %v; want it left True", c, err)
	}
}

// A pod selected by two budgets gets upstream's MultiplePodDisruptionBudgets warning at
// each of its events, and only one of the budgets, chosen arbitrarily, is queued for it
// (as upstream: each budget still counts every pod it selects when it syncs, so the pods
// are created first here and each budget's own creation syncs it with all of them); a
// budget of unmanaged pods with maxUnavailable warns UnmanagedPods; one selecting nothing
// records NoPods.
func TestBudgetEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pod("bare-0", map[string]string{"app": "bare"}, nil)
	e.pod("bare-1", map[string]string{"app": "bare"}, nil)
	e.waitPods("bare", 2)
	e.budget("first", "bare", minAvailable(num(1)))
	e.budget("second", "bare", maxUnavailable(num(1)))
	e.budget("empty", "nothing", minAvailable(num(1)))
	e.waitStatus("first", want{healthy: 2, desired: 1, expected: 2, allowed: 1})
	// Unmanaged pods have no scale: nothing expected, none allowed.
	e.waitStatus("second", want{healthy: 2, desired: 0, expected: 0})
	e.waitStatus("empty", want{desired: 1})
	e.setCondition("bare-0", corev1.PodCondition{Type: "example.com/touched", Status: corev1.ConditionTrue})
	msg := e.waitEvent("Pod", "bare-0", corev1.EventTypeWarning, "MultiplePodDisruptionBudgets")
	if !strings.Contains(msg, "matches multiple PodDisruptionBudgets.  Chose ") {
		t.Errorf("MultiplePodDisruptionBudgets message %q", msg)
	}
	e.waitEvent("PodDisruptionBudget", "second", corev1.EventTypeWarning, "UnmanagedPods")
	if msg := e.waitEvent("PodDisruptionBudget", "empty", corev1.EventTypeNormal, "NoPods"); msg != "No matching pods found" {
		t.Errorf("NoPods message %q", msg)
	}
}

// unhealthyPodEvictionPolicy is the eviction subresource's, on the controller's counts: with
// IfHealthyBudget a not-Ready pod may be evicted only while currentHealthy ≥
// desiredHealthy, with AlwaysAllow always.
func TestUnhealthyPodEvictionPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.rc("strict", 2)
	e.rc("lenient", 2)
	e.budget("strict", "strict", minAvailable(num(2)), policy(policyv1.IfHealthyBudget))
	e.budget("lenient", "lenient", minAvailable(num(2)), policy(policyv1.AlwaysAllow))
	e.waitStatus("strict", want{healthy: 2, desired: 2, expected: 2})
	e.waitStatus("lenient", want{healthy: 2, desired: 2, expected: 2})
	strict, lenient := e.waitPods("strict", 2), e.waitPods("lenient", 2)
	e.notReady(strict[0].Name)
	e.notReady(lenient[0].Name)
	e.waitStatus("strict", want{healthy: 1, desired: 2, expected: 2})
	e.waitStatus("lenient", want{healthy: 1, desired: 2, expected: 2})
	if err := e.evict(strict[0].Name); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting the unready pod under IfHealthyBudget: %v, want it refused", err)
	}
	if err := e.evict(lenient[0].Name); err != nil {
		t.Errorf("evicting the unready pod under AlwaysAllow: %v, want it allowed", err)
	}
	if err := e.evict(lenient[1].Name); !apierrors.IsTooManyRequests(err) {
		t.Errorf("evicting a ready pod under AlwaysAllow with none allowed: %v, want it refused", err)
	}
}

package namespace

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// holdFinalizer is the test's own finalizer: content carrying it stays until the test
// removes it.
const holdFinalizer = "kshard.io/e2e-hold"

// The test CRD's resource: namespaced widgets.
var (
	widgetGroup = "ns-e2e.kshard.io"
	widgets     = schema.GroupVersionResource{Group: widgetGroup, Version: "v1", Resource: "widgets"}
	crds        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

// env is one test's clients and namespace.
type env struct {
	t   *testing.T
	f   *framework.Framework
	cs  kubernetes.Interface
	dyn dynamic.Interface
	ns  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	dyn, err := dynamic.NewForConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, f: f, cs: f.Client, dyn: dyn}
	e.ns = f.Namespace(t, nil).Name
	ensureWidgetCRD(t, dyn)
	return e
}

// ensureWidgetCRD creates the widgets CRD once per cluster (it stays: other runs use it)
// and waits until it is served.
func ensureWidgetCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "widgets." + widgetGroup},
		"spec": map[string]any{
			"group": widgetGroup,
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the widgets CRD: %v", err)
	}
	framework.Eventually(t, 30*time.Second, "widgets CRD served", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
}

// content creates ConfigMaps, a Secret, a Deployment, widgets, and a running pod (kwok
// runs it; a grace period of 1 s keeps the deletion's estimate short) in e.ns; objects
// named in held carry holdFinalizer.
func (e *env) content(held ...string) {
	e.t.Helper()
	e.t.Cleanup(e.releaseAll)
	ctx := context.Background()
	isHeld := func(name string) []string {
		for _, h := range held {
			if h == name {
				return []string{holdFinalizer}
			}
		}
		return nil
	}
	for _, n := range []string{"cm-a", "cm-b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Finalizers: isHeld(n)}, Data: map[string]string{"k": n}}
		if _, err := e.cs.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret", Finalizers: isHeld("secret")}, StringData: map[string]string{"k": "v"}}
	if _, err := e.cs.CoreV1().Secrets(e.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	if _, err := e.cs.AppsV1().Deployments(e.ns).Create(ctx, deployment("web", labels), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	for _, n := range []string{"w-a", "w-b"} {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": widgetGroup + "/v1", "kind": "Widget",
			"metadata": map[string]any{"name": n},
			"spec":     map[string]any{"size": 1},
		}}
		if f := isHeld(n); f != nil {
			w.SetFinalizers(f)
		}
		if _, err := e.dyn.Resource(widgets).Namespace(e.ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod", Labels: labels, Finalizers: isHeld("pod")},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// deleteNamespace deletes e.ns.
func (e *env) deleteNamespace() {
	e.t.Helper()
	if err := e.cs.CoreV1().Namespaces().Delete(context.Background(), e.ns, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitGone waits until e.ns no longer exists.
func (e *env) waitGone(timeout time.Duration) {
	e.t.Helper()
	framework.Eventually(e.t, timeout, "namespace "+e.ns+" gone", func(ctx context.Context) (bool, error) {
		ns, err := e.cs.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("phase %s, conditions %s", ns.Status.Phase, conditions(ns))
	})
}

// waitCondition waits until e.ns has condition t with status and a message for which
// match holds, and returns the namespace.
func (e *env) waitCondition(timeout time.Duration, t corev1.NamespaceConditionType, status corev1.ConditionStatus, match func(msg string) bool) *corev1.Namespace {
	e.t.Helper()
	var out *corev1.Namespace
	framework.Eventually(e.t, timeout, fmt.Sprintf("namespace %s condition %s=%s", e.ns, t, status), func(ctx context.Context) (bool, error) {
		ns, err := e.cs.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range ns.Status.Conditions {
			if c.Type == t && c.Status == status && match(c.Message) {
				out = ns
				return true, nil
			}
		}
		return false, fmt.Errorf("phase %s, conditions %s", ns.Status.Phase, conditions(ns))
	})
	return out
}

// conditions renders ns's conditions as "Type=Status(Reason: Message)", sorted.
func conditions(ns *corev1.Namespace) string {
	var out []string
	for _, c := range ns.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// release removes holdFinalizer from e.ns's object of gvr named name.
func (e *env) release(gvr schema.GroupVersionResource, name string) {
	e.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.dyn.Resource(gvr).Namespace(e.ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatalf("removing the finalizer of %s %s: %v", gvr.Resource, name, err)
	}
}

// names lists e.ns's objects of gvr.
func (e *env) names(gvr schema.GroupVersionResource) []string {
	e.t.Helper()
	list, err := e.dyn.Resource(gvr).Namespace(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, o := range list.Items {
		if o.GetName() != "kube-root-ca.crt" { // the root CA publisher's, not the test's
			out = append(out, o.GetName())
		}
	}
	sort.Strings(out)
	return out
}

// releaseAll removes holdFinalizer from every object of e.ns that carries it, so that a
// failed test leaves no namespace Terminating for good.
func (e *env) releaseAll() {
	for _, gvr := range []schema.GroupVersionResource{
		corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithResource("configmaps"),
		corev1.SchemeGroupVersion.WithResource("secrets"), widgets,
	} {
		list, err := e.dyn.Resource(gvr).Namespace(e.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, o := range list.Items {
			if len(o.GetFinalizers()) > 0 {
				e.release(gvr, o.GetName())
			}
		}
	}
}

// deployment is a one-replica Deployment of pause pods.
func deployment(name string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
}

package differential

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
	kptr "k8s.io/utils/ptr"
)

// The namespace scenario: tenants with mixed contents (pods, ConfigMaps, Secrets, a
// Deployment and its ReplicaSet and pods, a CRD's objects); some are deleted, one of them
// holding a ConfigMap with a foreign finalizer, which is then removed. Compared per
// tenant: whether it exists and its phase, its deletion conditions (type, status, reason,
// message), and the names of its objects of each kind (pods counted per owner, their
// names being generated).

// nsHold is the scenario's foreign finalizer.
const nsHold = "kshard.io/e2e-hold"

var (
	nsWidgetGroup = "ns-differential.kshard.io"
	nsWidgets     = schema.GroupVersionResource{Group: nsWidgetGroup, Version: "v1", Resource: "widgets"}
	nsCRDs        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	// nsTenants are the scenario's namespaces; deleted are those its second step deletes.
	nsTenants = []string{"keep-a", "keep-b", "gone-a", "gone-b", "held"}
	nsDeleted = map[string]bool{"gone-a": true, "gone-b": true, "held": true}
)

func TestDifferentialNamespace(t *testing.T) {
	scenario{
		controllers: []string{"namespace", "deployment", "replicaset"},
		namespaces:  nsTenants,
		steps:       namespaceSteps(),
		snapshot:    namespaceSnapshot,
	}.run(t)
}

func namespaceSteps() []step {
	return []step{
		{name: "create tenants with pods, ConfigMaps, a Secret, a Deployment and a CRD's objects", do: func(ctx context.Context, s *side) error {
			if err := ensureNSWidgetCRD(ctx, s); err != nil {
				return err
			}
			for _, ns := range nsTenants {
				if err := s.tenantContent(ctx, ns); err != nil {
					return fmt.Errorf("tenant %s: %w", ns, err)
				}
			}
			return nil
		}},
		{name: "delete gone-a, gone-b and held (a ConfigMap of held has a foreign finalizer)", do: func(ctx context.Context, s *side) error {
			for ns := range nsDeleted {
				if err := s.f.Client.CoreV1().Namespaces().Delete(ctx, s.ns[ns], metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "remove the foreign finalizer", do: func(ctx context.Context, s *side) error {
			_, err := s.f.Client.CoreV1().ConfigMaps(s.ns["held"]).Patch(ctx, "held", types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			return err
		}},
	}
}

// ensureNSWidgetCRD creates the scenario's CRD on s's cluster (it stays) and waits until
// it is served.
func ensureNSWidgetCRD(ctx context.Context, s *side) error {
	dyn, err := dynamic.NewForConfig(s.f.Config)
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets." + nsWidgetGroup},
		"spec": map[string]any{
			"group": nsWidgetGroup, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	if _, err := dyn.Resource(nsCRDs).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return pollCtx(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(nsWidgets).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
}

// tenantContent creates one tenant's objects; held's ConfigMap "held" carries nsHold.
func (s *side) tenantContent(ctx context.Context, logical string) error {
	ns, cs := s.ns[logical], s.f.Client
	dyn, err := dynamic.NewForConfig(s.f.Config)
	if err != nil {
		return err
	}
	cms := []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "features"}, Data: map[string]string{"b": "2"}},
	}
	if logical == "held" {
		cms = append(cms, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{nsHold}}})
	}
	for _, cm := range cms {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "credentials"}, StringData: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return err
	}
	labels := map[string]string{"app": "web"}
	podSpec := corev1.PodSpec{TerminationGracePeriodSeconds: new(int64),
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: kptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "standalone"}, Spec: podSpec}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, n := range []string{"small", "large"} {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": nsWidgetGroup + "/v1", "kind": "Widget", "metadata": map[string]any{"name": n}}}
		if _, err := dyn.Resource(nsWidgets).Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// namespaceSnapshot reads every tenant: its phase (or "gone"), its deletion conditions, and
// its objects. A step is done when every kept tenant's Deployment is available, every
// deleted tenant is gone or (held, while its ConfigMap has the finalizer) has reported
// what remains.
func namespaceSnapshot(ctx context.Context, s *side) (view, error) {
	out := flat{}
	var pending notReady
	n := newNormaliser(s, nil, nil)
	dyn, err := dynamic.NewForConfig(s.f.Config)
	if err != nil {
		return view{}, err
	}
	for _, logical := range nsTenants {
		p := "namespace " + logical
		ns, err := s.f.Client.CoreV1().Namespaces().Get(ctx, s.ns[logical], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out[p] = "gone"
			continue
		}
		if err != nil {
			return view{}, err
		}
		out[p] = string(ns.Status.Phase)
		for _, c := range ns.Status.Conditions {
			out[p+" condition "+string(c.Type)] = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, n.text(c.Message))
		}
		objects, err := s.tenantObjects(ctx, dyn, s.ns[logical])
		if err != nil {
			return view{}, err
		}
		for k, v := range objects {
			out[p+" "+k] = v
		}
		switch {
		case ns.DeletionTimestamp == nil:
			if objects["deployment web available"] != "2" {
				pending = append(pending, logical+": Deployment web not available")
			}
		case logical == "held" && strings.Contains(objects["configmaps"], "held") && objects["configmaps"] != "held":
			pending = append(pending, logical+": content other than the held ConfigMap left")
		case logical == "held" && strings.Contains(objects["configmaps"], "held"):
			if !strings.HasPrefix(out[p+" condition "+string(corev1.NamespaceFinalizersRemaining)], "True") {
				pending = append(pending, logical+": remaining finalizers not reported")
			}
		default:
			pending = append(pending, logical+": being deleted")
		}
	}
	return view{values: out, pending: pending}, nil
}

// tenantObjects describes one namespace's objects: names per kind, pods counted per owner
// kind, the Deployment's available replicas.
func (s *side) tenantObjects(ctx context.Context, dyn dynamic.Interface, ns string) (map[string]string, error) {
	out := map[string]string{}
	cs := s.f.Client
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range cms.Items {
		if c.Name != "kube-root-ca.crt" { // the root CA publisher's, compared in its own scenario
			names = append(names, c.Name)
		}
	}
	out["configmaps"] = sortedJoin(names)
	secs, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names = nil
	for _, c := range secs.Items {
		names = append(names, c.Name)
	}
	out["secrets"] = sortedJoin(names)
	deps, err := cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		out["deployment "+d.Name+" available"] = fmt.Sprint(d.Status.AvailableReplicas)
	}
	rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out["replicasets"] = fmt.Sprint(len(rss.Items))
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	byOwner := map[string]int{}
	for _, p := range pods.Items {
		owner := "none"
		if ref := metav1.GetControllerOf(&p); ref != nil {
			owner = ref.Kind
		}
		byOwner[owner]++
	}
	for o, c := range byOwner {
		out["pods owned by "+o] = fmt.Sprint(c)
	}
	ws, err := dyn.Resource(nsWidgets).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names = nil
	for _, w := range ws.Items {
		names = append(names, w.GetName())
	}
	out["widgets"] = sortedJoin(names)
	return out, nil
}

func sortedJoin(ss []string) string {
	sort.Strings(ss)
	return strings.Join(ss, ",")
}

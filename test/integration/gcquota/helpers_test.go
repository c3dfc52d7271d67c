package gcquota

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

// holdFinalizer keeps a deleted object until the test removes it.
const holdFinalizer = "kshard.io/e2e-hold"

var (
	configMaps  = corev1.SchemeGroupVersion.WithResource("configmaps")
	pods        = corev1.SchemeGroupVersion.WithResource("pods")
	replicaSets = appsv1.SchemeGroupVersion.WithResource("replicasets")
	deployments = appsv1.SchemeGroupVersion.WithResource("deployments")
	pvcs        = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	namespaces  = corev1.SchemeGroupVersion.WithResource("namespaces")
	crds        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// collectTimeout bounds how long a collection may take: the discovery period of a CRD
// created during the test (30 s upstream) and the controllers' work.
const collectTimeout = 90 * time.Second

// env is one test's clients and namespace.
type env struct {
	t   *testing.T
	f   *framework.Framework
	cs  kubernetes.Interface
	dyn dynamic.Interface
	md  metadata.Interface
	ns  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	dyn, err := dynamic.NewForConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewForConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, f: f, cs: f.Client, dyn: dyn, md: md}
	e.ns = e.namespace()
	return e
}

// namespace creates one more namespace for the test; objects the test held are released
// when it ends, so that the namespace can go.
func (e *env) namespace() string {
	ns := e.f.Namespace(e.t, nil).Name
	e.t.Cleanup(func() { e.releaseAll(ns) })
	return ns
}

// ref is an owner reference to obj; block sets blockOwnerDeletion.
func ref(obj metav1.Object, apiVersion, kind string, block bool) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID()}
	if block {
		r.BlockOwnerDeletion = ptr.To(true)
	}
	return r
}

// configMap creates ConfigMap name in ns with owners; hold adds holdFinalizer.
func (e *env) configMap(ns, name string, hold bool, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	e.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}
	if hold {
		cm.Finalizers = []string{holdFinalizer}
	}
	out, err := e.cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating ConfigMap %s/%s: %v", ns, name, err)
	}
	return out
}

// del deletes gvr ns/name with policy (nil: the resource's default).
func (e *env) del(gvr schema.GroupVersionResource, ns, name string, policy *metav1.DeletionPropagation) {
	e.t.Helper()
	err := e.md.Resource(gvr).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: policy})
	if err != nil {
		e.t.Fatalf("deleting %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

// get returns gvr ns/name's metadata, nil when it does not exist.
func (e *env) get(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	o, err := e.md.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return o, err
}

// waitGone waits until gvr ns/name no longer exists.
func (e *env) waitGone(gvr schema.GroupVersionResource, ns, name string) {
	e.t.Helper()
	framework.Eventually(e.t, collectTimeout, fmt.Sprintf("%s %s/%s gone", gvr.Resource, ns, name), func(ctx context.Context) (bool, error) {
		o, err := e.get(ctx, gvr, ns, name)
		return o == nil && err == nil, err
	})
}

// names lists the names of gvr in ns.
func (e *env) names(ctx context.Context, gvr schema.GroupVersionResource, ns string) ([]string, error) {
	l, err := e.md.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, o := range l.Items {
		out = append(out, o.Name)
	}
	slices.Sort(out)
	return out, nil
}

// release removes holdFinalizer from gvr ns/name.
func (e *env) release(gvr schema.GroupVersionResource, ns, name string) {
	e.t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, err := e.md.Resource(gvr).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatalf("releasing %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

// releaseAll removes holdFinalizer from every ConfigMap and pod of ns.
func (e *env) releaseAll(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, gvr := range []schema.GroupVersionResource{configMaps, pods} {
		l, err := e.md.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, o := range l.Items {
			if slices.Contains(o.Finalizers, holdFinalizer) {
				_, _ = e.md.Resource(gvr).Namespace(ns).Patch(ctx, o.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		}
	}
}

// deletions records the resourceVersion at which each object of some resources of a
// namespace was deleted, from watches started before the test deletes anything: the
// order of the deletions, across resources, as etcd committed them.
type deletions struct {
	mu sync.Mutex
	rv map[string]int64 // "resource/name"
}

func (e *env) watchDeletions(ns string, gvrs ...schema.GroupVersionResource) *deletions {
	e.t.Helper()
	d := &deletions{rv: map[string]int64{}}
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	for _, gvr := range gvrs {
		w, err := e.md.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatalf("watching %s: %v", gvr.Resource, err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				if ev.Type != watch.Deleted {
					continue
				}
				m, err := meta.Accessor(ev.Object)
				if err != nil {
					continue
				}
				rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
				d.mu.Lock()
				d.rv[gvr.Resource+"/"+m.GetName()] = rv
				d.mu.Unlock()
			}
		}()
	}
	return d
}

// at returns the resourceVersion of resource/name's deletion, 0 if not seen (yet).
func (d *deletions) at(resource, name string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rv[resource+"/"+name]
}

// last returns the highest deletion resourceVersion of resource's objects, and how many.
func (d *deletions) last(resource string) (int64, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var top int64
	n := 0
	for k, rv := range d.rv {
		if len(k) > len(resource) && k[:len(resource)+1] == resource+"/" {
			n++
			top = max(top, rv)
		}
	}
	return top, n
}

// webDeployment creates a Deployment of replicas pods (labelled app=name) that kwok runs,
// and waits until its ReplicaSet and pods exist; it returns the Deployment, the
// ReplicaSet and the pods' names.
func (e *env) webDeployment(name string, replicas int32) (*appsv1.Deployment, *appsv1.ReplicaSet, []string) {
	e.t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
	e.f.WaitDefaultServiceAccount(e.t, e.ns)
	d, err := e.cs.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var rs *appsv1.ReplicaSet
	var podNames []string
	framework.Eventually(e.t, 60*time.Second, "Deployment "+name+"'s ReplicaSet and pods", func(ctx context.Context) (bool, error) {
		rss, err := e.cs.AppsV1().ReplicaSets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(rss.Items) != 1 {
			return false, err
		}
		rs = &rss.Items[0]
		ps, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		podNames = nil
		for _, p := range ps.Items {
			if metav1.IsControlledBy(&p, rs) {
				podNames = append(podNames, p.Name)
			}
		}
		return len(podNames) == int(replicas), nil
	})
	return d, rs, podNames
}

// crd creates a CRD of a group of its own for the test (scope "Namespaced" or "Cluster"),
// deleted when the test ends, and waits until it is served; it returns its resource.
func (e *env) crd(kind, scope string) schema.GroupVersionResource {
	e.t.Helper()
	ctx := context.Background()
	group := fmt.Sprintf("gc%d.e2e.kshard.io", time.Now().UnixNano())
	plural := "things"
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group,
			"names": map[string]any{"plural": plural, "singular": "thing", "kind": kind, "listKind": kind + "List"},
			"scope": scope,
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if _, err := e.dyn.Resource(crds).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating CRD: %v", err)
	}
	e.t.Cleanup(func() {
		_ = e.dyn.Resource(crds).Delete(context.Background(), plural+"."+group, metav1.DeleteOptions{})
	})
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	framework.Eventually(e.t, 30*time.Second, "CRD "+gvr.String()+" served", func(ctx context.Context) (bool, error) {
		_, err := e.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	return gvr
}

// custom creates an object of a CRD's resource (ns "" for a cluster-scoped one).
func (e *env) custom(gvr schema.GroupVersionResource, kind, ns, name string, owners ...metav1.OwnerReference) *unstructured.Unstructured {
	e.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"name": name},
	}}
	u.SetOwnerReferences(owners)
	out, err := e.dyn.Resource(gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating %s %s: %v", kind, name, err)
	}
	return out
}

// events returns the reasons of the events about ns/name of kind.
func (e *env) eventReasons(ctx context.Context, ns, kind, name string) ([]string, error) {
	l, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ev := range l.Items {
		out = append(out, ev.Reason)
	}
	return out, nil
}

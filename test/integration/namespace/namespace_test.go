package namespace

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kshard/kshard/test/framework"
)

var (
	configMaps = corev1.SchemeGroupVersion.WithResource("configmaps")
	secrets    = corev1.SchemeGroupVersion.WithResource("secrets")
	pods       = corev1.SchemeGroupVersion.WithResource("pods")
)

// TestDeletionRemovesEverything: a namespace with pods, ConfigMaps, a Secret, a
// Deployment and a CRD's objects is emptied and finished.
func TestDeletionRemovesEverything(t *testing.T) {
	e := newEnv(t)
	e.content()
	start := time.Now()
	e.deleteNamespace()
	e.waitGone(60 * time.Second)
	t.Logf("namespace with content gone %s after its deletion", time.Since(start).Round(100*time.Millisecond))
	for _, gvr := range []schema.GroupVersionResource{configMaps, secrets, pods, widgets} {
		if left := e.names(gvr); len(left) > 0 {
			t.Errorf("%s left in the deleted namespace: %v", gvr.Resource, left)
		}
	}
}

// TestForeignFinalizers: content held by another controller's finalizer keeps the
// namespace Terminating, with upstream's remaining-content conditions, while the rest is
// deleted; the namespace is finished once the finalizers are removed.
func TestForeignFinalizers(t *testing.T) {
	e := newEnv(t)
	e.content("cm-a", "w-a")
	e.deleteNamespace()
	ns := e.waitCondition(60*time.Second, corev1.NamespaceFinalizersRemaining, corev1.ConditionTrue, func(msg string) bool {
		return msg == "Some content in the namespace has finalizers remaining: "+holdFinalizer+" in 2 resource instances"
	})
	if ns.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("phase %s, want Terminating", ns.Status.Phase)
	}
	want := map[corev1.NamespaceConditionType]string{
		corev1.NamespaceDeletionDiscoveryFailure: "False ResourcesDiscovered",
		corev1.NamespaceDeletionGVParsingFailure: "False ParsedGroupVersions",
		corev1.NamespaceDeletionContentFailure:   "False ContentDeleted",
		corev1.NamespaceContentRemaining:         "True SomeResourcesRemain: Some resources are remaining: configmaps. has 1 resource instances, widgets." + widgetGroup + " has 1 resource instances",
	}
	for _, c := range ns.Status.Conditions {
		w, ok := want[c.Type]
		if !ok {
			continue
		}
		got := string(c.Status) + " " + c.Reason
		if strings.Contains(w, ":") {
			got += ": " + c.Message
		}
		if got != w {
			t.Errorf("condition %s: %q, want %q", c.Type, got, w)
		}
	}
	if got := e.names(configMaps); !slices.Equal(got, []string{"cm-a"}) {
		t.Errorf("ConfigMaps left %v, want only the held cm-a", got)
	}
	if got := e.names(widgets); !slices.Equal(got, []string{"w-a"}) {
		t.Errorf("widgets left %v, want only the held w-a", got)
	}
	e.release(configMaps, "cm-a")
	e.release(widgets, "w-a")
	e.waitGone(60 * time.Second)
}

// TestPodsFirst: while a pod is held, the namespace's other content stays; once it goes,
// the rest is deleted and the namespace finished.
func TestPodsFirst(t *testing.T) {
	e := newEnv(t)
	e.content("pod")
	e.deleteNamespace()
	framework.Eventually(t, 60*time.Second, "the held pod being deleted", func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, "pod", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, err
	})
	// Give the controller a few syncs: the other content must stay while the pod does.
	time.Sleep(3 * time.Second)
	if got := e.names(configMaps); !slices.Equal(got, []string{"cm-a", "cm-b"}) {
		t.Errorf("ConfigMaps %v while a pod remains, want both (pods go first)", got)
	}
	e.release(pods, "pod")
	e.waitGone(60 * time.Second)
}

// TestAggregatedAPIUnavailable: an aggregated API that is down (its APIService's Service
// does not exist) fails discovery of its group: the namespace reports it in
// NamespaceDeletionDiscoveryFailure and keeps its finalizer, while the content of every
// other group is deleted; it is finished once the APIService is gone.
func TestAggregatedAPIUnavailable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	group := "unavailable-" + strings.ToLower(e.f.RunID) + ".ns-e2e.kshard.io"
	name := "v1." + group
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"group": group, "version": "v1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
			"service":               map[string]any{"namespace": "default", "name": "kshard-e2e-missing"},
		},
	}}
	if _, err := e.dyn.Resource(apiServices).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removed := false
	removeAPIService := func() {
		if removed {
			return
		}
		removed = true
		if err := e.dyn.Resource(apiServices).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting APIService %s: %v", name, err)
		}
	}
	t.Cleanup(removeAPIService)
	e.content()
	e.deleteNamespace()
	ns := e.waitCondition(90*time.Second, corev1.NamespaceDeletionDiscoveryFailure, corev1.ConditionTrue, func(msg string) bool {
		return strings.HasPrefix(msg, "Discovery failed for some groups, ") && strings.Contains(msg, group+"/v1")
	})
	for _, c := range ns.Status.Conditions {
		if c.Type == corev1.NamespaceDeletionDiscoveryFailure {
			t.Logf("%s: %s: %s", c.Type, c.Reason, c.Message)
			if c.Reason != "DiscoveryFailed" {
				t.Errorf("reason %q, want DiscoveryFailed", c.Reason)
			}
		}
	}
	// The other groups' content goes meanwhile.
	framework.Eventually(t, 60*time.Second, "content of the available groups deleted", func(ctx context.Context) (bool, error) {
		for _, gvr := range []schema.GroupVersionResource{configMaps, secrets, pods, widgets} {
			if left := e.names(gvr); len(left) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if got, err := e.cs.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{}); err != nil || !slices.Contains(got.Spec.Finalizers, corev1.FinalizerKubernetes) {
		t.Errorf("namespace %v (err %v): want it kept with its kubernetes finalizer while discovery fails", got, err)
	}
	removeAPIService()
	// Upstream retries a failing namespace with backoff up to a minute.
	e.waitGone(90 * time.Second)
}

package gcquota

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/test/framework"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// TestUnavailableAPIs: an aggregated API whose backend is down (its group fails
// discovery) and a CRD whose conversion webhook does not answer stop neither the garbage
// collector nor ResourceQuota: owners' dependents are still collected and quotas still
// counted, and the shards stay ready. With kshard, a user finds the failed discovery in
// garbagecollector_controller_resources_sync_error_total (and in the shards' logs). The
// CRD's typed lists fail, its metadata-only lists (what the shards' informers make) do
// not: the API server answers them without converting. An informer whose lists do fail
// is shardcache's TestCacheOptional.
func TestUnavailableAPIs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	group := fmt.Sprintf("down%d.e2e.kshard.io", time.Now().UnixNano())
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1." + group},
		"spec": map[string]any{
			"group": group, "version": "v1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
			"service":               map[string]any{"namespace": "default", "name": "kshard-e2e-missing"},
		},
	}}
	if _, err := e.dyn.Resource(apiServices).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.dyn.Resource(apiServices).Delete(context.Background(), "v1."+group, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting APIService: %v", err)
		}
	})
	e.brokenCRD()

	// Collected and counted meanwhile.
	e.waitRootCA()
	e.quota(e.ns, "cms", rl("count/configmaps", "10", "count/secrets", "100"))
	e.waitCountsLive(e.ns, "cms", "count/secrets", false)
	owner := e.configMap(e.ns, "owner", false)
	e.configMap(e.ns, "dependent", false, ref(owner, "v1", "ConfigMap", false))
	e.del(configMaps, e.ns, "owner", ptr.To(metav1.DeletePropagationBackground))
	e.waitGone(configMaps, e.ns, "dependent")
	cms, err := e.names(ctx, configMaps, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	e.waitUsed(e.ns, "cms", rl("count/configmaps", fmt.Sprint(len(cms)), "count/secrets", "0"))

	c := framework.RunningControllers(t)
	if c.KShard == nil {
		return
	}
	for _, s := range c.KShard.Shards {
		if s.Exited() {
			continue
		}
		framework.WaitHTTP(t, s.HTTPURL+"/readyz", 30*time.Second)
		framework.Eventually(t, 60*time.Second, s.Name+" reports the failed discovery", func(ctx context.Context) (bool, error) {
			samples, err := framework.Scrape(ctx, s.HTTPURL)
			if err != nil {
				return false, err
			}
			return samples.Value("garbagecollector_controller_resources_sync_error_total") >= 1, nil
		})
	}
}

// brokenCRD creates a CRD whose preferred version v2 is converted from the stored v1 by a
// webhook that does not exist, with one object: every typed list of v2 fails. It returns
// v2's resource.
func (e *env) brokenCRD() schema.GroupVersionResource {
	e.t.Helper()
	ctx := context.Background()
	group := fmt.Sprintf("broken%d.e2e.kshard.io", time.Now().UnixNano())
	version := func(name string, storage bool) map[string]any {
		return map[string]any{"name": name, "served": true, "storage": storage,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "gizmos." + group},
		"spec": map[string]any{
			"group":    group,
			"names":    map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
			"scope":    "Namespaced",
			"versions": []any{version("v1", true), version("v2", false)},
			"conversion": map[string]any{
				"strategy": "Webhook",
				"webhook": map[string]any{
					"conversionReviewVersions": []any{"v1"},
					"clientConfig":             map[string]any{"service": map[string]any{"namespace": "default", "name": "kshard-e2e-missing", "path": "/convert"}},
				},
			},
		},
	}}
	if _, err := e.dyn.Resource(crds).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating the broken CRD: %v", err)
	}
	e.t.Cleanup(func() { _ = e.dyn.Resource(crds).Delete(context.Background(), "gizmos."+group, metav1.DeleteOptions{}) })
	v1 := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gizmos"}
	framework.Eventually(e.t, 30*time.Second, "the broken CRD served", func(ctx context.Context) (bool, error) {
		_, err := e.dyn.Resource(v1).Namespace(e.ns).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1", "kind": "Gizmo", "metadata": map[string]any{"name": "g"}}}, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	v2 := v1
	v2.Version = "v2"
	if _, err := e.dyn.Resource(v2).Namespace(e.ns).List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "conversion") {
		e.t.Fatalf("listing the broken CRD's v2: %v, want a conversion webhook failure", err)
	}
	return v2
}

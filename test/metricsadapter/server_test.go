package metricsadapter

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func pod(name string, labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: name, UID: "uid-" + types.UID(name), Labels: labels, Annotations: annotations,
	}}
}

func configMap(name string, labels, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels}, Data: data}
}

func newServer(t *testing.T, objects ...runtime.Object) http.Handler {
	t.Helper()
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Node"), meta.RESTScopeRoot)
	mapper.Add(appsv1.SchemeGroupVersion.WithKind("Deployment"), meta.RESTScopeNamespace)
	var dyn, typed []runtime.Object
	for _, o := range objects {
		if _, ok := o.(*corev1.ConfigMap); ok {
			typed = append(typed, o)
		} else {
			dyn = append(dyn, o)
		}
	}
	lists := map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "pods"}:                       "PodList",
		{Version: "v1", Resource: "nodes"}:                      "NodeList",
		{Version: "v1", Resource: "namespaces"}:                 "NamespaceList",
		{Group: "apps", Version: "v1", Resource: "deployments"}: "DeploymentList",
	}
	s := &Server{
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme.Scheme, lists, dyn...),
		Client:  fake.NewClientset(typed...),
		Mapper:  mapper,
		Now:     func() time.Time { return now },
	}
	return s.Handler()
}

func get(t *testing.T, h http.Handler, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET %s: %d, body %q is not JSON: %v", path, rec.Code, rec.Body.String(), err)
	}
	return rec.Code, body
}

// items returns, per item, the fields the tests compare.
func items(body map[string]any, fields ...string) []map[string]any {
	var out []map[string]any
	list, _ := body["items"].([]any)
	for _, it := range list {
		m := it.(map[string]any)
		row := map[string]any{}
		for _, f := range fields {
			if d, ok := m["describedObject"].(map[string]any); ok && f == "object" {
				row[f] = d["kind"].(string) + " " + d["apiVersion"].(string) + " " + str(d["namespace"]) + "/" + d["name"].(string)
				continue
			}
			if f == "metric" {
				if mi, ok := m["metric"].(map[string]any); ok {
					row[f] = mi["name"]
					continue
				}
				row[f] = m["metricName"]
				continue
			}
			row[f] = m[f]
		}
		out = append(out, row)
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func TestCustomMetrics(t *testing.T) {
	objects := []runtime.Object{
		pod("a", map[string]string{"app": "web"}, map[string]string{Annotation("qps"): "250m"}),
		pod("b", map[string]string{"app": "web"}, map[string]string{Annotation("qps"): "3", Annotation("other"): "1"}),
		pod("c", map[string]string{"app": "web"}, nil),
		pod("d", map[string]string{"app": "db"}, map[string]string{Annotation("qps"): "9"}),
		pod("bad", map[string]string{"app": "bad"}, map[string]string{Annotation("qps"): "lots"}),
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web",
			Annotations: map[string]string{Annotation("queue"): "120"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{Annotation("temp"): "40"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Annotations: map[string]string{Annotation("load"): "7"}}},
	}
	h := newServer(t, objects...)
	const v2 = "/apis/custom.metrics.k8s.io/v1beta2"
	tests := []struct {
		name   string
		path   string
		code   int
		kind   string
		fields []string
		want   []map[string]any
	}{
		{
			name: "pods by selector: only those with the annotation",
			path: v2 + "/namespaces/ns/pods/*/qps?labelSelector=app%3Dweb",
			code: 200, kind: "MetricValueList", fields: []string{"object", "metric", "value", "windowSeconds", "timestamp"},
			want: []map[string]any{
				{"object": "Pod v1 ns/a", "metric": "qps", "value": "250m", "windowSeconds": 60.0, "timestamp": "2026-11-30T12:00:00Z"},
				{"object": "Pod v1 ns/b", "metric": "qps", "value": "3", "windowSeconds": 60.0, "timestamp": "2026-11-30T12:00:00Z"},
			},
		},
		{
			name: "pods by selector, none has it: an empty list",
			path: v2 + "/namespaces/ns/pods/*/missing?labelSelector=app%3Dweb",
			code: 200, kind: "MetricValueList", fields: []string{"object"},
		},
		{
			name: "one pod",
			path: v2 + "/namespaces/ns/pods/d/qps",
			code: 200, kind: "MetricValueList", fields: []string{"object", "value"},
			want: []map[string]any{{"object": "Pod v1 ns/d", "value": "9"}},
		},
		{
			name: "an object metric of a Deployment, by its qualified resource",
			path: v2 + "/namespaces/ns/deployments.apps/web/queue",
			code: 200, kind: "MetricValueList", fields: []string{"object", "metric", "value"},
			want: []map[string]any{{"object": "Deployment apps/v1 ns/web", "metric": "queue", "value": "120"}},
		},
		{
			name: "a cluster-scoped object",
			path: v2 + "/nodes/n1/temp",
			code: 200, kind: "MetricValueList", fields: []string{"object", "value"},
			want: []map[string]any{{"object": "Node v1 /n1", "value": "40"}},
		},
		{
			name: "a namespace's own metric",
			path: v2 + "/namespaces/ns/metrics/load",
			code: 200, kind: "MetricValueList", fields: []string{"object", "value"},
			want: []map[string]any{{"object": "Namespace v1 /ns", "value": "7"}},
		},
		{
			name: "v1beta1's form",
			path: "/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns/pods/*/qps?labelSelector=app%3Ddb",
			code: 200, kind: "MetricValueList", fields: []string{"object", "metric", "value", "window"},
			want: []map[string]any{{"object": "Pod v1 ns/d", "metric": "qps", "value": "9", "window": 60.0}},
		},
		{
			name: "a metric selector that needs a label matches nothing",
			path: v2 + "/namespaces/ns/pods/*/qps?labelSelector=app%3Ddb&metricLabelSelector=verb%3DGET",
			code: 200, kind: "MetricValueList", fields: []string{"object"},
		},
		{
			name: "a metric selector the empty label set matches",
			path: v2 + "/namespaces/ns/pods/*/qps?labelSelector=app%3Ddb&metricLabelSelector=%21verb",
			code: 200, kind: "MetricValueList", fields: []string{"object"},
			want: []map[string]any{{"object": "Pod v1 ns/d"}},
		},
		{name: "an object without the annotation", path: v2 + "/namespaces/ns/pods/c/qps", code: 404, kind: "Status"},
		{name: "a missing object", path: v2 + "/namespaces/ns/pods/zz/qps", code: 404, kind: "Status"},
		{name: "an unknown resource", path: v2 + "/namespaces/ns/widgets/x/qps", code: 404, kind: "Status"},
		{name: "a value that is no quantity", path: v2 + "/namespaces/ns/pods/*/qps?labelSelector=app%3Dbad", code: 500, kind: "Status"},
		{name: "an unknown version", path: "/apis/custom.metrics.k8s.io/v2/namespaces/ns/pods/a/qps", code: 404, kind: "Status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.path)
			if code != tc.code || body["kind"] != tc.kind {
				t.Fatalf("GET %s: %d %v, want %d %s; body %v", tc.path, code, body["kind"], tc.code, tc.kind, body)
			}
			if tc.kind != "MetricValueList" {
				return
			}
			if got := items(body, tc.fields...); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GET %s: items %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

func TestExternalMetrics(t *testing.T) {
	marked := func(extra map[string]string) map[string]string {
		l := map[string]string{ExternalLabel: "true"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	h := newServer(t,
		configMap("queue-a", marked(map[string]string{"queue": "a"}), map[string]string{"depth": "30", "age": "5"}),
		configMap("queue-b", marked(map[string]string{"queue": "b"}), map[string]string{"depth": " 12 "}),
		configMap("no-depth", marked(nil), map[string]string{"age": "1"}),
		configMap("unmarked", map[string]string{"queue": "a"}, map[string]string{"depth": "999"}),
		configMap("broken", marked(map[string]string{"queue": "broken"}), map[string]string{"depth": "deep"}),
	)
	const base = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns/"
	tests := []struct {
		name string
		path string
		code int
		want []map[string]any
	}{
		{
			name: "every marked series by selector",
			path: base + "depth?labelSelector=queue+in+%28a%2Cb%29",
			code: 200,
			want: []map[string]any{
				{"metricName": "depth", "metricLabels": map[string]any{"queue": "a"}, "value": "30", "window": 60.0, "timestamp": "2026-11-30T12:00:00Z"},
				{"metricName": "depth", "metricLabels": map[string]any{"queue": "b"}, "value": "12", "window": 60.0, "timestamp": "2026-11-30T12:00:00Z"},
			},
		},
		{
			name: "one series",
			path: base + "depth?labelSelector=queue%3Db",
			code: 200,
			want: []map[string]any{{"metricName": "depth", "metricLabels": map[string]any{"queue": "b"}, "value": "12", "window": 60.0, "timestamp": "2026-11-30T12:00:00Z"}},
		},
		{
			name: "no selector: every series with the key",
			path: base + "age",
			code: 200,
			want: []map[string]any{
				{"metricName": "age", "metricLabels": map[string]any{}, "value": "1", "window": 60.0, "timestamp": "2026-11-30T12:00:00Z"},
				{"metricName": "age", "metricLabels": map[string]any{"queue": "a"}, "value": "5", "window": 60.0, "timestamp": "2026-11-30T12:00:00Z"},
			},
		},
		{name: "a metric nobody has: an empty list", path: base + "nothing", code: 200},
		{name: "a value that is no quantity", path: base + "depth?labelSelector=queue%3Dbroken", code: 500},
		{name: "a path without a namespace", path: "/apis/external.metrics.k8s.io/v1beta1/depth", code: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.path)
			if code != tc.code {
				t.Fatalf("GET %s: %d, want %d; body %v", tc.path, code, tc.code, body)
			}
			if code != 200 {
				return
			}
			if body["kind"] != "ExternalMetricValueList" {
				t.Fatalf("GET %s: kind %v", tc.path, body["kind"])
			}
			if got := items(body, "metricName", "metricLabels", "value", "window", "timestamp"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GET %s: items %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

func TestDiscovery(t *testing.T) {
	h := newServer(t)
	tests := []struct {
		name string
		path string
		code int
		kind string
		// check is a field of the body and its expected value.
		field string
		want  any
	}{
		{name: "groups", path: "/apis", code: 200, kind: "APIGroupList", field: "groups", want: []any{
			map[string]any{"name": "custom.metrics.k8s.io",
				"versions": []any{
					map[string]any{"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"},
					map[string]any{"groupVersion": "custom.metrics.k8s.io/v1beta1", "version": "v1beta1"},
				},
				"preferredVersion": map[string]any{"groupVersion": "custom.metrics.k8s.io/v1beta2", "version": "v1beta2"}},
			map[string]any{"name": "external.metrics.k8s.io",
				"versions":         []any{map[string]any{"groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"}},
				"preferredVersion": map[string]any{"groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"}},
		}},
		{name: "a group", path: "/apis/external.metrics.k8s.io", code: 200, kind: "APIGroup", field: "name", want: "external.metrics.k8s.io"},
		{name: "a version: no resources", path: "/apis/custom.metrics.k8s.io/v1beta1", code: 200, kind: "APIResourceList", field: "resources", want: []any{}},
		{name: "an unknown group", path: "/apis/apps/v1", code: 404, kind: "Status", field: "reason", want: "NotFound"},
		{name: "an unknown version", path: "/apis/external.metrics.k8s.io/v1", code: 404, kind: "Status", field: "reason", want: "NotFound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.path)
			if code != tc.code || body["kind"] != tc.kind {
				t.Fatalf("GET %s: %d %v, want %d %s", tc.path, code, body["kind"], tc.code, tc.kind)
			}
			got := body[tc.field]
			if g, ok := got.([]any); ok {
				// The APIGroup entries carry a TypeMeta of their own in JSON; drop it.
				for _, e := range g {
					if m, ok := e.(map[string]any); ok {
						delete(m, "kind")
						delete(m, "apiVersion")
					}
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("GET %s: %s = %v, want %v", tc.path, tc.field, got, tc.want)
			}
		})
	}
}

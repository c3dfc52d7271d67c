package replicacalc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sync"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	custommetricsv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	externalmetricsv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	resourcemetricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	resourcefake "k8s.io/metrics/pkg/client/clientset/versioned/fake"
	customclient "k8s.io/metrics/pkg/client/custom_metrics"
	customfake "k8s.io/metrics/pkg/client/custom_metrics/fake"
	externalfake "k8s.io/metrics/pkg/client/external_metrics/fake"
)

// t0 is the tests' "now".
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

const ns = "team-a"

// webSelector selects the tests' target pods.
var webSelector = labels.SelectorFromSet(labels.Set{"app": "web"})

// usage is a container's usage as "name=cpu/memory" pieces for podMetrics.
type usage struct {
	container string
	res       corev1.ResourceList
}

func cpuMem(container, cpu, mem string) usage {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return usage{container, l}
}

// podMetrics is a metrics.k8s.io PodMetrics of pod name (labelled app=web) taken at ts
// over window.
func podMetrics(name string, ts time.Time, window time.Duration, containers ...usage) *resourcemetricsv1beta1.PodMetrics {
	m := &resourcemetricsv1beta1.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Timestamp:  metav1.NewTime(ts),
		Window:     metav1.Duration{Duration: window},
	}
	for _, c := range containers {
		m.Containers = append(m.Containers, resourcemetricsv1beta1.ContainerMetrics{Name: c.container, Usage: c.res})
	}
	return m
}

// servePodMetrics is a fake metrics.k8s.io client serving items (or failing with err
// when set) to LISTs of pods, by namespace and label selector as the API does, in the
// order given. (The fake's object tracker cannot: it guesses the resource "podmetricses".)
func servePodMetrics(err error, items ...*resourcemetricsv1beta1.PodMetrics) *resourcefake.Clientset {
	rc := resourcefake.NewSimpleClientset()
	rc.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if err != nil {
			return true, nil, err
		}
		sel := a.(clienttesting.ListAction).GetListRestrictions().Labels
		list := &resourcemetricsv1beta1.PodMetricsList{}
		for _, m := range items {
			if m.Namespace == a.GetNamespace() && sel.Matches(labels.Set(m.Labels)) {
				list.Items = append(list.Items, *m.DeepCopy())
			}
		}
		return true, list, nil
	})
	return rc
}

// selectorRecorder wraps a custom metrics client and records the metric selectors it is
// asked for (k8s.io/metrics' fake drops them).
type selectorRecorder struct {
	customclient.CustomMetricsClient
	seen []string
}

func (r *selectorRecorder) NamespacedMetrics(namespace string) customclient.MetricsInterface {
	return recordingInterface{r.CustomMetricsClient.NamespacedMetrics(namespace), r}
}

func (r *selectorRecorder) RootScopedMetrics() customclient.MetricsInterface {
	return recordingInterface{r.CustomMetricsClient.RootScopedMetrics(), r}
}

type recordingInterface struct {
	customclient.MetricsInterface
	r *selectorRecorder
}

func (i recordingInterface) GetForObject(gk schema.GroupKind, name, metric string, sel labels.Selector) (*custommetricsv1beta2.MetricValue, error) {
	i.r.seen = append(i.r.seen, sel.String())
	return i.MetricsInterface.GetForObject(gk, name, metric, sel)
}

func (i recordingInterface) GetForObjects(gk schema.GroupKind, sel labels.Selector, metric string, metricSel labels.Selector) (*custommetricsv1beta2.MetricValueList, error) {
	i.r.seen = append(i.r.seen, metricSel.String())
	return i.MetricsInterface.GetForObjects(gk, sel, metric, metricSel)
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func TestGetResourceMetric(t *testing.T) {
	minute := time.Minute
	tests := []struct {
		name      string
		items     []*resourcemetricsv1beta1.PodMetrics
		listErr   error
		resource  corev1.ResourceName
		container string
		want      PodMetricsInfo
		wantTS    time.Time
		wantErr   string
	}{
		{
			name: "containers summed per pod, each pod's own timestamp and window",
			items: []*resourcemetricsv1beta1.PodMetrics{
				podMetrics("a", t0, minute, cpuMem("app", "100m", "1Mi"), cpuMem("sidecar", "50m", "1Mi")),
				podMetrics("b", t0.Add(-10*time.Second), 30*time.Second, cpuMem("app", "1", "1Mi")),
			},
			resource: corev1.ResourceCPU,
			want: PodMetricsInfo{
				"a": {Timestamp: t0, Window: minute, Value: 150},
				"b": {Timestamp: t0.Add(-10 * time.Second), Window: 30 * time.Second, Value: 1000},
			},
			wantTS: t0,
		},
		{
			name: "memory in milli-bytes",
			items: []*resourcemetricsv1beta1.PodMetrics{
				podMetrics("a", t0, minute, cpuMem("app", "100m", "1Ki")),
			},
			resource: corev1.ResourceMemory,
			want:     PodMetricsInfo{"a": {Timestamp: t0, Window: minute, Value: 1024 * 1000}},
			wantTS:   t0,
		},
		{
			name: "a pod with a container lacking the resource, and a pod without containers, left out",
			items: []*resourcemetricsv1beta1.PodMetrics{
				podMetrics("a", t0, minute, cpuMem("app", "100m", ""), cpuMem("sidecar", "", "1Mi")),
				podMetrics("b", t0, minute),
				podMetrics("c", t0, minute, cpuMem("app", "200m", "")),
			},
			resource: corev1.ResourceCPU,
			want:     PodMetricsInfo{"c": {Timestamp: t0, Window: minute, Value: 200}},
			wantTS:   t0,
		},
		{
			name: "one container's usage; a pod without it, or whose container lacks the resource, left out",
			items: []*resourcemetricsv1beta1.PodMetrics{
				podMetrics("a", t0, minute, cpuMem("app", "100m", ""), cpuMem("sidecar", "50m", "")),
				podMetrics("b", t0, minute, cpuMem("app", "300m", "")),
				podMetrics("c", t0, minute, cpuMem("other", "200m", "")),
				podMetrics("d", t0, minute, cpuMem("sidecar", "", "1Mi")),
			},
			resource:  corev1.ResourceCPU,
			container: "sidecar",
			want:      PodMetricsInfo{"a": {Timestamp: t0, Window: minute, Value: 50}},
			wantTS:    t0,
		},
		{
			name: "pods the selector does not match are not listed",
			items: []*resourcemetricsv1beta1.PodMetrics{
				podMetrics("a", t0, minute, cpuMem("app", "100m", "")),
				func() *resourcemetricsv1beta1.PodMetrics {
					m := podMetrics("other", t0, minute, cpuMem("app", "900m", ""))
					m.Labels = map[string]string{"app": "db"}
					return m
				}(),
			},
			resource: corev1.ResourceCPU,
			want:     PodMetricsInfo{"a": {Timestamp: t0, Window: minute, Value: 100}},
			wantTS:   t0,
		},
		{
			name:     "no metrics at all is an error",
			resource: corev1.ResourceCPU,
			wantErr:  "no metrics returned from resource metrics API",
		},
		{
			name:     "the API's error, wrapped",
			listErr:  errors.New("the server is currently unable to handle the request"),
			resource: corev1.ResourceCPU,
			wantErr:  "unable to fetch metrics from resource metrics API: the server is currently unable to handle the request",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := servePodMetrics(tc.listErr, tc.items...)
			c := NewMetricsClient(rc.MetricsV1beta1(), &customfake.FakeCustomMetricsClient{}, &externalfake.FakeExternalMetricsClient{})
			got, ts, err := c.GetResourceMetric(testContext(t), tc.resource, ns, webSelector, tc.container)
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("metrics %v, want %v", got, tc.want)
			}
			if !ts.Equal(tc.wantTS) {
				t.Errorf("timestamp %v, want %v", ts, tc.wantTS)
			}
			lists := 0
			for _, a := range rc.Actions() {
				if l, ok := a.(clienttesting.ListAction); ok {
					lists++
					if a.GetNamespace() != ns || l.GetListRestrictions().Labels.String() != "app=web" {
						t.Errorf("listed %s with %q, want %s with app=web", a.GetNamespace(), l.GetListRestrictions().Labels, ns)
					}
				}
			}
			if lists != 1 {
				t.Errorf("%d lists, want 1", lists)
			}
		})
	}
}

// customValue is a custom metrics API value of the object kind/name.
func customValue(kind, name, value string, ts time.Time, window *int64) custommetricsv1beta2.MetricValue {
	return custommetricsv1beta2.MetricValue{
		DescribedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name},
		Metric:          custommetricsv1beta2.MetricIdentifier{Name: "qps"},
		Timestamp:       metav1.NewTime(ts),
		WindowSeconds:   window,
		Value:           resource.MustParse(value),
	}
}

func TestGetRawMetric(t *testing.T) {
	thirty := int64(30)
	tests := []struct {
		name    string
		items   []custommetricsv1beta2.MetricValue
		err     error
		want    PodMetricsInfo
		wantTS  time.Time
		wantErr string
	}{
		{
			name: "values by pod, windows from windowSeconds or a minute",
			items: []custommetricsv1beta2.MetricValue{
				customValue("Pod", "a", "10", t0.Add(-time.Second), &thirty),
				customValue("Pod", "b", "1500m", t0, nil),
			},
			want: PodMetricsInfo{
				"a": {Timestamp: t0.Add(-time.Second), Window: 30 * time.Second, Value: 10000},
				"b": {Timestamp: t0, Window: time.Minute, Value: 1500},
			},
			wantTS: t0.Add(-time.Second),
		},
		{name: "no values is an error", wantErr: "no metrics returned from custom metrics API"},
		{
			name:    "the API's error, wrapped",
			err:     errors.New("no custom metrics API (custom.metrics.k8s.io) registered"),
			wantErr: "unable to fetch metrics from custom metrics API: no custom metrics API (custom.metrics.k8s.io) registered",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &customfake.FakeCustomMetricsClient{}
			var got clienttesting.Action
			fake.AddReactor("get", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
				got = a
				return true, &custommetricsv1beta2.MetricValueList{Items: tc.items}, tc.err
			})
			rec := &selectorRecorder{CustomMetricsClient: fake}
			c := NewMetricsClient(resourcefake.NewSimpleClientset().MetricsV1beta1(), rec, &externalfake.FakeExternalMetricsClient{})
			metricSelector := labels.SelectorFromSet(labels.Set{"verb": "GET"})
			m, ts, err := c.GetRawMetric("qps", ns, webSelector, metricSelector)
			if got == nil {
				t.Fatal("the custom metrics API was not asked")
			}
			fa := got.(customfake.GetForAction)
			if fa.GetNamespace() != ns || fa.GetResource().Resource != "pods" || fa.GetName() != "*" || fa.GetMetricName() != "qps" || fa.GetLabelSelector().String() != "app=web" {
				t.Errorf("asked for %s %s/%s metric %s selector %s, want pods %s/* metric qps selector app=web", fa.GetResource().Resource, fa.GetNamespace(), fa.GetName(), fa.GetMetricName(), fa.GetLabelSelector(), ns)
			}
			if !reflect.DeepEqual(rec.seen, []string{"verb=GET"}) {
				t.Errorf("metric selectors %v, want [verb=GET]", rec.seen)
			}
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if !reflect.DeepEqual(m, tc.want) || !ts.Equal(tc.wantTS) {
				t.Errorf("got %v at %v, want %v at %v", m, ts, tc.want, tc.wantTS)
			}
		})
	}
}

func TestGetObjectMetric(t *testing.T) {
	tests := []struct {
		name         string
		ref          autoscalingv2.CrossVersionObjectReference
		err          error
		wantResource string
		wantNS       string
		wantName     string
		wantErr      string
	}{
		{
			name:         "a namespaced object",
			ref:          autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			wantResource: "deployments.apps", wantNS: ns, wantName: "web",
		},
		{
			name:         "a Namespace is the HPA's own, whatever its name",
			ref:          autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "kube-system"},
			wantResource: "namespaces", wantNS: "", wantName: ns,
		},
		{
			name:         "a Namespace kind of another group is an ordinary object",
			ref:          autoscalingv2.CrossVersionObjectReference{APIVersion: "example.com/v1", Kind: "Namespace", Name: "n"},
			wantResource: "namespaces.example.com", wantNS: ns, wantName: "n",
		},
		{
			name:         "the API's error, wrapped",
			ref:          autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			err:          errors.New("not found"),
			wantResource: "deployments.apps", wantNS: ns, wantName: "web",
			wantErr: "unable to fetch metrics from custom metrics API: not found",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &customfake.FakeCustomMetricsClient{}
			var got clienttesting.Action
			fake.AddReactor("get", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
				got = a
				if tc.err != nil {
					return true, nil, tc.err
				}
				return true, &custommetricsv1beta2.MetricValueList{Items: []custommetricsv1beta2.MetricValue{customValue(tc.ref.Kind, tc.wantName, "2500m", t0, nil)}}, nil
			})
			rec := &selectorRecorder{CustomMetricsClient: fake}
			c := NewMetricsClient(resourcefake.NewSimpleClientset().MetricsV1beta1(), rec, &externalfake.FakeExternalMetricsClient{})
			v, ts, err := c.GetObjectMetric("qps", ns, &tc.ref, labels.SelectorFromSet(labels.Set{"verb": "GET"}))
			fa := got.(customfake.GetForAction)
			if fa.GetResource().Resource != tc.wantResource || fa.GetNamespace() != tc.wantNS || fa.GetName() != tc.wantName || fa.GetMetricName() != "qps" {
				t.Errorf("asked for %s %q/%s metric %s, want %s %q/%s metric qps", fa.GetResource().Resource, fa.GetNamespace(), fa.GetName(), fa.GetMetricName(), tc.wantResource, tc.wantNS, tc.wantName)
			}
			if !reflect.DeepEqual(rec.seen, []string{"verb=GET"}) {
				t.Errorf("metric selectors %v, want [verb=GET]", rec.seen)
			}
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if v != 2500 || !ts.Equal(t0) {
				t.Errorf("got %d at %v, want 2500 at %v", v, ts, t0)
			}
		})
	}
}

func TestGetExternalMetric(t *testing.T) {
	tests := []struct {
		name    string
		values  []string
		err     error
		want    []int64
		wantErr string
	}{
		{name: "every value, as milli-values", values: []string{"1", "250m", "3k"}, want: []int64{1000, 250, 3000000}},
		{name: "no values is an error", wantErr: "no metrics returned from external metrics API"},
		{
			name:    "the API's error, wrapped",
			err:     errors.New("the server could not find the requested resource"),
			wantErr: "unable to fetch metrics from external metrics API: the server could not find the requested resource",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fake := &externalfake.FakeExternalMetricsClient{}
			var got clienttesting.ListAction
			fake.AddReactor("list", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
				got = a.(clienttesting.ListAction)
				list := &externalmetricsv1beta1.ExternalMetricValueList{}
				for i, v := range tc.values {
					list.Items = append(list.Items, externalmetricsv1beta1.ExternalMetricValue{
						MetricName: "queue_length",
						Timestamp:  metav1.NewTime(t0.Add(time.Duration(i) * time.Second)),
						Value:      resource.MustParse(v),
					})
				}
				return true, list, tc.err
			})
			c := NewMetricsClient(resourcefake.NewSimpleClientset().MetricsV1beta1(), &customfake.FakeCustomMetricsClient{}, fake)
			values, ts, err := c.GetExternalMetric("queue_length", ns, labels.SelectorFromSet(labels.Set{"queue": "jobs"}))
			if got.GetNamespace() != ns || got.GetResource().Resource != "queue_length" || got.GetListRestrictions().Labels.String() != "queue=jobs" {
				t.Errorf("listed %s/%s with %q, want %s/queue_length with queue=jobs", got.GetNamespace(), got.GetResource().Resource, got.GetListRestrictions().Labels, ns)
			}
			if errorIs(t, err, tc.wantErr) {
				return
			}
			if !reflect.DeepEqual(values, tc.want) || !ts.Equal(t0) {
				t.Errorf("got %v at %v, want %v at %v", values, ts, tc.want, t0)
			}
		})
	}
}

// metricsAPIServer serves discovery (custom.metrics.k8s.io preferring v1beta2) and the
// tests' values of the three metrics APIs, and counts the requests by path and query.
type metricsAPIServer struct {
	mu       sync.Mutex
	requests map[string]int
}

func (s *metricsAPIServer) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[key]
}

func (s *metricsAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Discovery adds a timeout; the rest is what the clients ask.
	query := r.URL.Query()
	query.Del("timeout")
	key := r.URL.Path
	if len(query) > 0 {
		q, _ := url.QueryUnescape(query.Encode())
		key += "?" + q
	}
	s.mu.Lock()
	s.requests[key]++
	s.mu.Unlock()
	ts := t0.Format(time.RFC3339)
	bodies := map[string]string{
		"/api":  `{"kind":"APIVersions","versions":["v1"]}`,
		"/apis": `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"custom.metrics.k8s.io","versions":[{"groupVersion":"custom.metrics.k8s.io/v1beta1","version":"v1beta1"},{"groupVersion":"custom.metrics.k8s.io/v1beta2","version":"v1beta2"}],"preferredVersion":{"groupVersion":"custom.metrics.k8s.io/v1beta2","version":"v1beta2"}}]}`,
		"/apis/metrics.k8s.io/v1beta1/namespaces/team-a/pods?labelSelector=app=web": `{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1","items":[` +
			`{"metadata":{"name":"a","namespace":"team-a"},"timestamp":"` + ts + `","window":"15s","containers":[{"name":"app","usage":{"cpu":"250m","memory":"1Mi"}}]}]}`,
		"/apis/custom.metrics.k8s.io/v1beta2/namespaces/team-a/pods/*/qps?labelSelector=app=web&metricLabelSelector=verb=GET": `{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","items":[` +
			`{"describedObject":{"kind":"Pod","namespace":"team-a","name":"a","apiVersion":"v1"},"metric":{"name":"qps"},"timestamp":"` + ts + `","value":"7"}]}`,
		"/apis/custom.metrics.k8s.io/v1beta2/namespaces/team-a/deployments.apps/web/qps?metricLabelSelector=verb=GET": `{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","items":[` +
			`{"describedObject":{"kind":"Deployment","namespace":"team-a","name":"web","apiVersion":"apps/v1"},"metric":{"name":"qps"},"timestamp":"` + ts + `","value":"9"}]}`,
		"/apis/custom.metrics.k8s.io/v1beta2/namespaces/team-a/metrics/qps?metricLabelSelector=verb=GET": `{"kind":"MetricValueList","apiVersion":"custom.metrics.k8s.io/v1beta2","items":[` +
			`{"describedObject":{"kind":"Namespace","name":"team-a","apiVersion":"v1"},"metric":{"name":"qps"},"timestamp":"` + ts + `","value":"11"}]}`,
		"/apis/external.metrics.k8s.io/v1beta1/namespaces/team-a/queue_length?labelSelector=queue=jobs": `{"kind":"ExternalMetricValueList","apiVersion":"external.metrics.k8s.io/v1beta1","items":[` +
			`{"metricName":"queue_length","timestamp":"` + ts + `","value":"13"}]}`,
	}
	body, ok := bodies[key]
	if !ok {
		http.Error(w, "not served: "+key, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

// TestNewRESTMetricsClient checks that the clients built from a client configuration ask
// the three APIs at their paths (the custom metrics API at the version discovery
// prefers, objects mapped to resources by the RESTMapper, a Namespace root-scoped) and
// that InvalidateVersionsEvery makes the next call ask discovery again.
func TestNewRESTMetricsClient(t *testing.T) {
	api := &metricsAPIServer{requests: map[string]int{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}, {Version: "v1"}})
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	c, err := NewRESTMetricsClient(cfg, mapper, discovery.NewDiscoveryClientForConfigOrDie(cfg))
	if err != nil {
		t.Fatal(err)
	}
	verbGET := labels.SelectorFromSet(labels.Set{"verb": "GET"})

	res, _, err := c.GetResourceMetric(testContext(t), corev1.ResourceCPU, ns, webSelector, "")
	if err != nil || res["a"].Value != 250 || res["a"].Window != 15*time.Second {
		t.Errorf("resource metric %v, %v; want a=250 over 15s", res, err)
	}
	raw, _, err := c.GetRawMetric("qps", ns, webSelector, verbGET)
	if err != nil || raw["a"].Value != 7000 || raw["a"].Window != time.Minute {
		t.Errorf("pods metric %v, %v; want a=7000 over a minute", raw, err)
	}
	obj, _, err := c.GetObjectMetric("qps", ns, &autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}, verbGET)
	if err != nil || obj != 9000 {
		t.Errorf("object metric %d, %v; want 9000", obj, err)
	}
	nsv, _, err := c.GetObjectMetric("qps", ns, &autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "elsewhere"}, verbGET)
	if err != nil || nsv != 11000 {
		t.Errorf("namespace metric %d, %v; want 11000", nsv, err)
	}
	ext, _, err := c.GetExternalMetric("queue_length", ns, labels.SelectorFromSet(labels.Set{"queue": "jobs"}))
	if err != nil || !reflect.DeepEqual(ext, []int64{13000}) {
		t.Errorf("external metric %v, %v; want [13000]", ext, err)
	}
	if n := api.count("/apis"); n != 1 {
		t.Fatalf("discovery asked %d times for three custom metric reads, want once (cached)", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.InvalidateVersionsEvery(ctx, 10*time.Millisecond); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for api.count("/apis") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("discovery not asked again after the preferred version was invalidated")
		}
		if _, _, err := c.GetRawMetric("qps", ns, webSelector, verbGET); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

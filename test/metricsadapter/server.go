package metricsadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
)

const (
	// AnnotationPrefix prefixes the annotation that holds an object's custom metric: the
	// value of metric M is the annotation AnnotationPrefix+M.
	AnnotationPrefix = "metrics.test.kshard.io/"
	// ExternalLabel marks (with the value "true") a ConfigMap whose keys are external
	// metrics of its namespace.
	ExternalLabel = "metrics.test.kshard.io/external"

	customGroup   = "custom.metrics.k8s.io"
	externalGroup = "external.metrics.k8s.io"
	// window is the windowSeconds of every value: upstream HPA's default when an adapter
	// gives none.
	window = int64(60)
)

// Annotation returns the annotation key that holds custom metric name's value.
func Annotation(name string) string { return AnnotationPrefix + name }

// Mapper is the part of a RESTMapper the server uses; a meta.ResettableRESTMapper is
// reset on a miss so that resources (CRDs) created after the adapter started are found.
type Mapper interface {
	ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error)
	KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error)
	RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error)
}

// Server answers the custom and external metrics APIs from the cluster's objects.
type Server struct {
	// Dynamic reads the objects custom metrics describe.
	Dynamic dynamic.Interface
	// Client reads the ConfigMaps external metrics come from.
	Client kubernetes.Interface
	// Mapper maps the resource of a request ("pods", "deployments.apps") to a version
	// and kind.
	Mapper Mapper
	// Now is the clock of the values' timestamps (time.Now when nil).
	Now func() time.Time
}

// Handler returns the server's HTTP handler: discovery, OpenAPI stubs, health and the
// metrics paths.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	}
	// The aggregator downloads every aggregated server's OpenAPI; ours documents nothing.
	mux.HandleFunc("/openapi/v2", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"swagger": "2.0",
			"info":    map[string]string{"title": "kshard test metrics adapter", "version": "v0"},
			"paths":   map[string]any{},
		})
	})
	mux.HandleFunc("/openapi/v3", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"paths": map[string]any{}})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{
			TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups:   []metav1.APIGroup{customAPIGroup(), externalAPIGroup()},
		})
	})
	mux.HandleFunc("/apis/", s.serveAPIs)
	return mux
}

func groupVersion(group, version string) metav1.GroupVersionForDiscovery {
	return metav1.GroupVersionForDiscovery{GroupVersion: group + "/" + version, Version: version}
}

func customAPIGroup() metav1.APIGroup {
	v2, v1 := groupVersion(customGroup, "v1beta2"), groupVersion(customGroup, "v1beta1")
	return metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             customGroup,
		Versions:         []metav1.GroupVersionForDiscovery{v2, v1},
		PreferredVersion: v2,
	}
}

func externalAPIGroup() metav1.APIGroup {
	v1 := groupVersion(externalGroup, "v1beta1")
	return metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             externalGroup,
		Versions:         []metav1.GroupVersionForDiscovery{v1},
		PreferredVersion: v1,
	}
}

// serveAPIs routes /apis/<group>[/<version>[/...]].
func (s *Server) serveAPIs(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: customGroup}, r.Method))
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/apis/"), "/"), "/")
	group := parts[0]
	var api metav1.APIGroup
	switch group {
	case customGroup:
		api = customAPIGroup()
	case externalGroup:
		api = externalAPIGroup()
	default:
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group}, ""))
		return
	}
	if len(parts) == 1 {
		writeJSON(w, http.StatusOK, &api)
		return
	}
	version := parts[1]
	known := false
	for _, v := range api.Versions {
		known = known || v.Version == version
	}
	if !known {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group}, version))
		return
	}
	if len(parts) == 2 {
		// No resources: the metrics are reached by path, and an empty list leaves the
		// namespace controller, the garbage collector and ResourceQuota nothing to act on.
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: group + "/" + version,
			APIResources: []metav1.APIResource{},
		})
		return
	}
	query := r.URL.Query()
	req := request{
		version:        version,
		labelSelector:  query.Get("labelSelector"),
		metricSelector: query.Get("metricLabelSelector"),
	}
	rest := parts[2:]
	var (
		body any
		err  error
	)
	ctx := r.Context()
	if group == externalGroup {
		// namespaces/{ns}/{metric}
		if len(rest) != 3 || rest[0] != "namespaces" {
			writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group}, strings.Join(rest, "/")))
			return
		}
		body, err = s.external(ctx, rest[1], rest[2], req.labelSelector)
	} else {
		switch {
		case len(rest) == 4 && rest[0] == "namespaces" && rest[2] == "metrics":
			// namespaces/{ns}/metrics/{metric}: a metric of the Namespace itself.
			req.resource, req.name, req.metric = "namespaces", rest[1], rest[3]
		case len(rest) == 5 && rest[0] == "namespaces":
			// namespaces/{ns}/{resource}/{name|*}/{metric}
			req.namespace, req.resource, req.name, req.metric = rest[1], rest[2], rest[3], rest[4]
		case len(rest) == 3:
			// {resource}/{name|*}/{metric}: a cluster-scoped resource.
			req.resource, req.name, req.metric = rest[0], rest[1], rest[2]
		default:
			writeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group}, strings.Join(rest, "/")))
			return
		}
		body, err = s.custom(ctx, req)
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Metric request failed", "path", r.URL.Path, "query", r.URL.RawQuery, "err", err)
		writeStatus(w, err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// request is a custom metrics read.
type request struct {
	version                       string
	namespace, resource, name     string
	metric                        string
	labelSelector, metricSelector string
}

// value is one object's value of a custom metric.
type value struct {
	ref   corev1.ObjectReference
	value resource.Quantity
}

func (s *Server) now() metav1.Time {
	if s.Now != nil {
		return metav1.NewTime(s.Now())
	}
	return metav1.Now()
}

// mapping resolves a request's "resource[.group]" to a preferred version and kind,
// resetting the mapper once on a miss.
func (s *Server) mapping(qualified string) (schema.GroupVersionResource, schema.GroupVersionKind, error) {
	gr := schema.ParseGroupResource(qualified)
	lookup := func() (schema.GroupVersionResource, schema.GroupVersionKind, error) {
		gvr, err := s.Mapper.ResourceFor(gr.WithVersion(""))
		if err != nil {
			return gvr, schema.GroupVersionKind{}, err
		}
		gvk, err := s.Mapper.KindFor(gvr)
		return gvr, gvk, err
	}
	gvr, gvk, err := lookup()
	if err != nil {
		if r, ok := s.Mapper.(meta.ResettableRESTMapper); ok {
			r.Reset()
			gvr, gvk, err = lookup()
		}
	}
	if err != nil {
		return gvr, gvk, apierrors.NewNotFound(gr, "")
	}
	return gvr, gvk, nil
}

// custom reads the annotation values of one object or of the objects a selector picks.
func (s *Server) custom(ctx context.Context, req request) (any, error) {
	metricSel, err := labels.Parse(req.metricSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("metricLabelSelector: %v", err))
	}
	gvr, gvk, err := s.mapping(req.resource)
	if err != nil {
		return nil, err
	}
	ri := s.Dynamic.Resource(gvr)
	var client dynamic.ResourceInterface = ri
	if req.namespace != "" {
		client = ri.Namespace(req.namespace)
	}
	var objects []unstructured.Unstructured
	if req.name == "*" {
		if _, err := labels.Parse(req.labelSelector); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("labelSelector: %v", err))
		}
		list, err := client.List(ctx, metav1.ListOptions{LabelSelector: req.labelSelector})
		if err != nil {
			return nil, err
		}
		objects = list.Items
	} else {
		obj, err := client.Get(ctx, req.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		objects = []unstructured.Unstructured{*obj}
	}
	var values []value
	// Custom metrics carry no labels: a metric selector that needs one matches nothing.
	if metricSel.Matches(labels.Set{}) {
		for _, obj := range objects {
			raw, ok := obj.GetAnnotations()[Annotation(req.metric)]
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(raw)
			if err != nil {
				return nil, apierrors.NewInternalError(fmt.Errorf("%s %s/%s: annotation %s=%q is not a quantity: %w",
					gvk.Kind, obj.GetNamespace(), obj.GetName(), Annotation(req.metric), raw, err))
			}
			values = append(values, value{
				ref: corev1.ObjectReference{
					APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
					Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(),
				},
				value: q,
			})
		}
	}
	if req.name != "*" && len(values) == 0 {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: customGroup, Resource: req.metric},
			fmt.Sprintf("%s %s/%s", gvk.Kind, req.namespace, req.name))
	}
	sort.Slice(values, func(i, j int) bool { return values[i].ref.Name < values[j].ref.Name })
	return s.customList(req, values), nil
}

func (s *Server) customList(req request, values []value) any {
	now := s.now()
	var sel *metav1.LabelSelector
	if req.metricSelector != "" {
		if ls, err := metav1.ParseToLabelSelector(req.metricSelector); err == nil {
			sel = ls
		}
	}
	if req.version == "v1beta1" {
		list := &cmv1beta1.MetricValueList{
			TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: customGroup + "/v1beta1"},
			Items:    []cmv1beta1.MetricValue{},
		}
		for _, v := range values {
			w := window
			list.Items = append(list.Items, cmv1beta1.MetricValue{
				DescribedObject: v.ref, MetricName: req.metric, Timestamp: now,
				WindowSeconds: &w, Value: v.value, Selector: sel,
			})
		}
		return list
	}
	list := &cmv1beta2.MetricValueList{
		TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: customGroup + "/v1beta2"},
		Items:    []cmv1beta2.MetricValue{},
	}
	for _, v := range values {
		w := window
		list.Items = append(list.Items, cmv1beta2.MetricValue{
			DescribedObject: v.ref, Metric: cmv1beta2.MetricIdentifier{Name: req.metric, Selector: sel},
			Timestamp: now, WindowSeconds: &w, Value: v.value,
		})
	}
	return list
}

// external reads metric's series from the marked ConfigMaps of namespace whose labels
// match selector.
func (s *Server) external(ctx context.Context, namespace, metric, selector string) (any, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("labelSelector: %v", err))
	}
	cms, err := s.Client.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{ExternalLabel: "true"}).String(),
	})
	if err != nil {
		return nil, err
	}
	now := s.now()
	list := &emv1beta1.ExternalMetricValueList{
		TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: externalGroup + "/v1beta1"},
		Items:    []emv1beta1.ExternalMetricValue{},
	}
	sort.Slice(cms.Items, func(i, j int) bool { return cms.Items[i].Name < cms.Items[j].Name })
	for _, cm := range cms.Items {
		raw, ok := cm.Data[metric]
		if !ok {
			continue
		}
		l := labels.Set{}
		for k, v := range cm.Labels {
			if k != ExternalLabel {
				l[k] = v
			}
		}
		if !sel.Matches(l) {
			continue
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(raw))
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("ConfigMap %s/%s: key %s=%q is not a quantity: %w",
				namespace, cm.Name, metric, raw, err))
		}
		w := window
		list.Items = append(list.Items, emv1beta1.ExternalMetricValue{
			MetricName: metric, MetricLabels: l, Timestamp: now, WindowSeconds: &w, Value: q,
		})
	}
	return list, nil
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// writeStatus answers err as the API server would: a metav1.Status with its code.
func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	code := int(st.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, &st)
}

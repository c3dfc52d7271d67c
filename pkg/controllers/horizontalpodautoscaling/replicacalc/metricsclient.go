package replicacalc

import (
	"context"
	"errors"
	"fmt"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	custommetricsv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	resourcemetricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	resourceclient "k8s.io/metrics/pkg/client/clientset/versioned/typed/metrics/v1beta1"
	customclient "k8s.io/metrics/pkg/client/custom_metrics"
	externalclient "k8s.io/metrics/pkg/client/external_metrics"
)

// defaultCustomMetricWindow is the window a custom metric without windowSeconds is taken
// to cover (upstream's metricServerDefaultMetricWindow): the CPU readiness check of
// groupPods compares a sample's timestamp with the pod's readiness plus its window.
const defaultCustomMetricWindow = time.Minute

// PodMetric is one pod's sample of a metric, as a milli-value (a resource's usage in
// milli-units: CPU in millicores, memory in milli-bytes), with the time it was taken and
// the window it covers.
type PodMetric struct {
	Timestamp time.Time
	Window    time.Duration
	Value     int64
}

// PodMetricsInfo is a metric's samples by pod name.
type PodMetricsInfo map[string]PodMetric

// MetricsClient reads the metrics an HPA scales on. It is an interface so that the
// calculator's tests can serve metrics without an API server.
type MetricsClient interface {
	// GetResourceMetric returns the usage of resource by the pods selector matches in
	// namespace (of the named container only when container is not empty, else the sum
	// of the pod's containers) and the timestamp of the first sample. A pod the metrics
	// API returns without the resource (or without the container) is left out, not an
	// error: the calculator counts it as missing.
	GetResourceMetric(ctx context.Context, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (PodMetricsInfo, time.Time, error)
	// GetRawMetric returns the custom metric metricName of the pods selector matches in
	// namespace, narrowed by metricSelector, and the timestamp of the first sample.
	GetRawMetric(metricName string, namespace string, selector labels.Selector, metricSelector labels.Selector) (PodMetricsInfo, time.Time, error)
	// GetObjectMetric returns the custom metric metricName of the object objectRef names
	// in namespace (of namespace itself for a core/v1 Namespace reference: a reference
	// cannot leave the HPA's namespace) and its timestamp.
	GetObjectMetric(metricName string, namespace string, objectRef *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int64, time.Time, error)
	// GetExternalMetric returns every value of the external metric metricName that
	// selector matches in namespace, and the timestamp of the first.
	GetExternalMetric(metricName string, namespace string, selector labels.Selector) ([]int64, time.Time, error)
}

// NewMetricsClient returns a MetricsClient over the three metrics API clients (k8s.io/
// metrics' typed resource metrics client, its custom metrics client and its external
// metrics client, or their fakes).
func NewMetricsClient(resource resourceclient.PodMetricsesGetter, custom customclient.CustomMetricsClient, external externalclient.ExternalMetricsClient) MetricsClient {
	return &metricsClient{resource: resource, custom: custom, external: external}
}

// RESTMetricsClient is the MetricsClient kube-controller-manager's HPA controller builds:
// the three metrics API clients from one client configuration, the custom metrics client
// following the version of custom.metrics.k8s.io that discovery prefers.
type RESTMetricsClient struct {
	MetricsClient
	versions customclient.AvailableAPIsGetter
}

// NewRESTMetricsClient builds the metrics clients from cfg (the controller's own client
// configuration: each client gets a token bucket of its own from its QPS and burst, as
// upstream's do), mapper (kinds of object metrics to resources) and disc (finds the
// custom metrics API's preferred version; uncached, as upstream's). Run
// InvalidateVersionsEvery beside the controller so that a custom metrics API installed or
// upgraded later is found.
func NewRESTMetricsClient(cfg *rest.Config, mapper meta.RESTMapper, disc discovery.DiscoveryInterface) (*RESTMetricsClient, error) {
	resource, err := resourceclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("resource metrics client: %w", err)
	}
	external, err := externalclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("external metrics client: %w", err)
	}
	versions := customclient.NewAvailableAPIsGetter(disc)
	custom := customclient.NewForConfig(rest.CopyConfig(cfg), mapper, versions)
	return &RESTMetricsClient{MetricsClient: NewMetricsClient(resource, custom, external), versions: versions}, nil
}

// InvalidateVersionsEvery forgets the custom metrics API's preferred version every period
// until ctx ends, as kube-controller-manager does every --horizontal-pod-autoscaler-sync-period.
func (c *RESTMetricsClient) InvalidateVersionsEvery(ctx context.Context, period time.Duration) {
	customclient.PeriodicallyInvalidate(c.versions, period, ctx.Done())
}

// metricsClient implements MetricsClient over the three metrics API clients.
type metricsClient struct {
	resource resourceclient.PodMetricsesGetter
	custom   customclient.CustomMetricsClient
	external externalclient.ExternalMetricsClient
}

func (c *metricsClient) GetResourceMetric(ctx context.Context, resource corev1.ResourceName, namespace string, selector labels.Selector, container string) (PodMetricsInfo, time.Time, error) {
	list, err := c.resource.PodMetricses(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("unable to fetch metrics from resource metrics API: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, errors.New("no metrics returned from resource metrics API")
	}
	logger := klog.FromContext(ctx)
	var res PodMetricsInfo
	if container != "" {
		res = containerUsage(logger, list.Items, resource, container)
	} else {
		res = podUsage(logger, list.Items, resource)
	}
	return res, list.Items[0].Timestamp.Time, nil
}

// containerUsage is each pod's usage of resource by its container named container; a pod
// without that container (logged) or whose container lacks the resource is left out.
func containerUsage(logger klog.Logger, items []resourcemetricsv1beta1.PodMetrics, resource corev1.ResourceName, container string) PodMetricsInfo {
	res := make(PodMetricsInfo, len(items))
	for _, m := range items {
		found := false
		for _, c := range m.Containers {
			if c.Name != container {
				continue
			}
			found = true
			if v, ok := c.Usage[resource]; ok {
				res[m.Name] = PodMetric{Timestamp: m.Timestamp.Time, Window: m.Window.Duration, Value: v.MilliValue()}
			}
			break
		}
		if !found {
			logger.V(2).Info("Missing container metric", "container", container, "pod", m.Name)
		}
	}
	return res
}

// podUsage is each pod's usage of resource summed over its containers; a pod with no
// container, or with a container that lacks the resource (logged), is left out.
func podUsage(logger klog.Logger, items []resourcemetricsv1beta1.PodMetrics, resource corev1.ResourceName) PodMetricsInfo {
	res := make(PodMetricsInfo, len(items))
	for _, m := range items {
		if len(m.Containers) == 0 {
			continue
		}
		sum, complete := int64(0), true
		for _, c := range m.Containers {
			v, ok := c.Usage[resource]
			if !ok {
				complete = false
				logger.V(2).Info("Missing resource metric", "resourceMetric", resource, "pod", m.Name)
				break
			}
			sum += v.MilliValue()
		}
		if complete {
			res[m.Name] = PodMetric{Timestamp: m.Timestamp.Time, Window: m.Window.Duration, Value: sum}
		}
	}
	return res
}

func (c *metricsClient) GetRawMetric(metricName string, namespace string, selector labels.Selector, metricSelector labels.Selector) (PodMetricsInfo, time.Time, error) {
	list, err := c.custom.NamespacedMetrics(namespace).GetForObjects(schema.GroupKind{Kind: "Pod"}, selector, metricName, metricSelector)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("unable to fetch metrics from custom metrics API: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, errors.New("no metrics returned from custom metrics API")
	}
	res := make(PodMetricsInfo, len(list.Items))
	for _, m := range list.Items {
		res[m.DescribedObject.Name] = PodMetric{Timestamp: m.Timestamp.Time, Window: customWindow(m), Value: m.Value.MilliValue()}
	}
	return res, list.Items[0].Timestamp.Time, nil
}

// customWindow is the window a custom metric sample covers: its windowSeconds, or a
// minute when the adapter gave none.
func customWindow(m custommetricsv1beta2.MetricValue) time.Duration {
	if m.WindowSeconds != nil {
		return time.Duration(*m.WindowSeconds) * time.Second
	}
	return defaultCustomMetricWindow
}

func (c *metricsClient) GetObjectMetric(metricName string, namespace string, objectRef *autoscalingv2.CrossVersionObjectReference, metricSelector labels.Selector) (int64, time.Time, error) {
	gk := schema.FromAPIVersionAndKind(objectRef.APIVersion, objectRef.Kind).GroupKind()
	var (
		v   *custommetricsv1beta2.MetricValue
		err error
	)
	if gk.Kind == "Namespace" && gk.Group == "" {
		// The HPA's own namespace, whatever name the reference gives.
		v, err = c.custom.RootScopedMetrics().GetForObject(gk, namespace, metricName, metricSelector)
	} else {
		v, err = c.custom.NamespacedMetrics(namespace).GetForObject(gk, objectRef.Name, metricName, metricSelector)
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("unable to fetch metrics from custom metrics API: %w", err)
	}
	return v.Value.MilliValue(), v.Timestamp.Time, nil
}

func (c *metricsClient) GetExternalMetric(metricName, namespace string, selector labels.Selector) ([]int64, time.Time, error) {
	list, err := c.external.NamespacedMetrics(namespace).List(metricName, selector)
	if err != nil {
		return []int64{}, time.Time{}, fmt.Errorf("unable to fetch metrics from external metrics API: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, time.Time{}, errors.New("no metrics returned from external metrics API")
	}
	res := make([]int64, 0, len(list.Items))
	for _, m := range list.Items {
		res = append(res, m.Value.MilliValue())
	}
	return res, list.Items[0].Timestamp.Time, nil
}

package framework

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The resource metrics pipeline of the local control planes (hack/cluster.sh): kwok
// emulates each node's kubelet /metrics/resource from pods' annotations, metrics-server
// scrapes the nodes labelled KwokMetricsLabel and serves metrics.k8s.io.
const (
	// KwokUsageCPUAnnotation sets the CPU each container of a pod uses ("250m"); kwok
	// reports 1m without it. A change is seen by metrics-server's next scrape.
	KwokUsageCPUAnnotation = "kwok.x-k8s.io/usage-cpu"
	// KwokUsageMemoryAnnotation sets the memory each container of a pod uses ("64Mi");
	// kwok reports 1Mi without it.
	KwokUsageMemoryAnnotation = "kwok.x-k8s.io/usage-memory"
	// KwokMetricsLabel (value "true") marks the nodes metrics-server scrapes: only their
	// pods have resource metrics.
	KwokMetricsLabel = "kshard.io/kwok-metrics"
	// ResourceMetricsPathAnnotation is the path metrics-server asks a node's kubelet (here
	// kwok, one server for every node) for its resource metrics.
	ResourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"
)

// KwokMetricsNode returns a fake node that kwok manages and metrics-server scrapes, as
// hack/cluster.sh's own nodes are, for tests that need nodes of their own with resource
// metrics. kwok serves its /metrics/resource at a path that carries the node's name. It
// is not labelled type=kwok, so pods of tests that select the cluster's nodes by that
// label stay off it.
// Nodes without pods have no metrics: metrics-server drops a node whose usage is zero.
func KwokMetricsNode(name string, labels map[string]string) *corev1.Node {
	l := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		KwokMetricsLabel:         "true",
	}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: l,
		Annotations: map[string]string{
			kwokNodeAnnotation:             "fake",
			"node.alpha.kubernetes.io/ttl": "0",
			ResourceMetricsPathAnnotation:  "/metrics/nodes/" + name + "/metrics/resource",
		},
	}}
}

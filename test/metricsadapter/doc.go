// Package metricsadapter is a test tool: a small aggregated API server that serves
// custom.metrics.k8s.io (v1beta2 and v1beta1) and external.metrics.k8s.io (v1beta1) to the
// HPA of the local control planes, so that the HPA's tests read custom and external metrics
// through the same clients (k8s.io/metrics) and the same aggregation path as in a cluster,
// with no fake client anywhere.
//
// It keeps no state: every value is read from the cluster at request time, so a test sets
// a metric with an ordinary write, both clusters of a differential run (each with its own
// adapter) serve the same values, and the adapter can be restarted at any time.
//
//   - A custom metric M of an object (a pod, or any object an Object metric describes, of
//     any resource the API server serves) is the object's annotation
//     "metrics.test.kshard.io/M", a quantity ("250m", "3"). An object without it has no
//     value for M: a single-object read answers 404, a read by label selector leaves the
//     object out.
//   - An external metric M in namespace N is, per ConfigMap of N labelled
//     "metrics.test.kshard.io/external=true" that has the key M, one series whose value is
//     that key's quantity and whose labels are the ConfigMap's other labels; the request's
//     label selector is matched against those labels.
//   - Custom metrics have no labels of their own: a metric label selector that does not
//     match the empty label set matches nothing.
//
// Timestamps are the time of the request and the window is 60 s.
//
// It authenticates nobody: the aggregator's requests are served, and so is anyone else's
// who reaches its loopback port. That is fine for a test tool bound to 127.0.0.1 and is
// why it must never run in a cluster. Command test/cmd/metrics-adapter runs it;
// hack/cluster.sh starts it and registers it with APIServices.
package metricsadapter

// Package scale is how kshard's controllers reach the scale subresource of a kind they
// have no cache of (a custom resource with a scale subresource, any workload kind): a
// discovery-backed RESTMapper that forgets what it learnt every 30 seconds (as
// kube-controller-manager resets its shared RESTMapper, so kinds served later are found),
// the scale client over the controller's own fenced, rate-limited client, and discovery
// to tell a resource without a scale subresource from an object that is not there. The
// disruption controller reads scales through it, the horizontal pod autoscaler reads and
// updates them.
package scale

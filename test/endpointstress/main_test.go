// Package endpointstress is the stress test of the EndpointSlice controller under
// sharding (issue 30): shards with pod identities and the server-side fence run the
// endpointslice controller while the test churns the pods of its Services (readiness
// flips written as pods/status, pod deletes and creates, relabels moving a pod from one
// Service to another, a Service's selector narrowed and widened) and the shard set is
// scaled out from 3 to 5, gracefully in to 2, one shard is SIGKILLed and restarted.
//
// Checked continuously (package invariant, at every slice event the test's own watch
// delivers): no Service ever loses a ready endpoint it had, i.e. a pod stably ready for a
// Service stays ready in the union of its slices until the test records an intent that can
// remove it. Checked at the end: every Service's slices equal its pods (from the API, not
// the test's model) and no pod is in two slices of one Service; that no shard fails an
// EndpointSlice sync after the drain (its endpoint_slice_controller_syncs{result="error"}
// stays flat while every Service is synced once more: checkSyncErrors); and, from
// kube-apiserver's audit log of EndpointSlice writes (hack/cluster.sh with
// KSHARD_APISERVER_AUDIT=1) and the shards' logs, that every write the API server accepted came from a shard's pod identity
// that was working the namespace's partition when the request was received, and that two
// shards wrote one slice only across a handoff.
//
// The pods are bare, bound by spec.nodeName to an unschedulable kwok node of the test's
// own. kwok makes a new pod Running and Ready (its pod-ready stage takes only Pending
// pods), and keeps the node Ready, so that the node lifecycle controller does not mark the
// pods not ready; after that nothing but the test writes their status.
//
// It is skipped unless KSHARD_ENDPOINT_STRESS=1; `make endpoint-stress` runs it (about
// 10 minutes). Knobs: KSHARD_ENDPOINT_STRESS_NAMESPACES (default 24), _SERVICES (6 per
// namespace), _PODS (12 per Service at start), _DURATION (6m of churn), _SEED. With
// KSHARD_UPSTREAM_CONTROLLERS=1, on a cluster whose kube-controller-manager runs every
// controller, it checks upstream's controller with the same churn and no shards (the
// calibration: what upstream also shows is reported, not failed).
package endpointstress

import (
	"testing"

	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

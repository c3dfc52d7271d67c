package loadmeter

import (
	"math"
	"net/http"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Transport returns a wrapper (for rest.Config.Wrap) that counts every request of a
// controller client as load of the partition its URL names: the namespace's partition
// (ofNamespace) of a namespaced request, of an event too, and of a Namespace's own
// status and finalize subresources; the cluster partition (ofNamespace(ClusterKey)) of
// a cluster-scoped one; none (the shard's alone) of a path that names no resource or
// needs no owner (gate.RequestNamespace). Reads count as writes do: both spend the
// client's budget.
//
// weight (> 0) is what each request counts: 1/ClientQPSScale of the controller, so that
// a client given 20 times the default budget counts 1/20 per request. The wrapper sits
// below client-go's rate limiter (which runs before the transport), so it counts the
// requests that took a token, retries included; placed inside the fence's wrapper, it
// does not count the writes the fence refused, which never leave.
func Transport(m *Meter, ofNamespace func(namespace string) partition.ID, weight float64) func(http.RoundTripper) http.RoundTripper {
	if m == nil || ofNamespace == nil {
		panic("loadmeter: Transport needs a Meter and a namespace mapping")
	}
	if !(weight > 0) || math.IsInf(weight, 0) {
		panic("loadmeter: a request's weight must be positive and finite")
	}
	units := uint64(math.Max(1, math.Round(weight*unit)))
	return func(next http.RoundTripper) http.RoundTripper {
		return &transport{m: m, ofNamespace: ofNamespace, units: units, next: next}
	}
}

type transport struct {
	m           *Meter
	ofNamespace func(string) partition.ID
	units       uint64
	next        http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ns, owned, ok := gate.RequestNamespace(req.URL.Path)
	if owned && ok {
		t.m.addRequest(t.ofNamespace(ns), t.units)
	} else {
		t.m.otherRequests.Add(t.units)
	}
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper returns the transport this one wraps, for client-go's utilities
// that look through wrappers.
func (t *transport) WrappedRoundTripper() http.RoundTripper { return t.next }

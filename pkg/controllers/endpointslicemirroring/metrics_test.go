//lint:file-ignore SA1019 kube-controller-manager's mirroring controller reads core/v1 Endpoints, deprecated in favour of the EndpointSlices it writes.

package endpointslicemirroring

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// TestMetricsExported: built with the shard's component-base bridge, the controller
// exports upstream's series under upstream's names and help (component-base's [ALPHA]
// prefix included), and a sync counts what it wrote; a second controller in the process
// registers them again without error.
func TestMetricsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	bridge := promutil.NewKubeMetrics(reg)
	ep := newEndpoints("svc", subset([]corev1.EndpointAddress{addr("10.0.0.1"), addr("10.0.0.2")}, nil, port("http", 80)))
	build := func() *fixture {
		f := &fixture{Fixture: newFixture(t, Options{}).Fixture}
		c := f.ControllerContext()
		c.RegisterKubeMetrics = bridge.Register
		ctrl, err := newController(c, Options{MaxEndpointsPerSubset: defaultMaxPerSubst})
		if err != nil {
			t.Fatal(err)
		}
		f.ctrl, f.SyncFunc = ctrl, ctrl.sync
		return f
	}
	f := build()
	build() // a second controller: registering again is no error
	creates := counter(t, reg, metricsSubsystem+"_changes", "create")
	if err := f.Client.Tracker().Add(newService("svc", nil)); err != nil {
		t.Fatal(err)
	}
	f.Cache(newService("svc", nil), ep)
	f.MustSync("ns/svc")
	if got := counter(t, reg, metricsSubsystem+"_changes", "create") - creates; got != 1 {
		t.Errorf("changes{operation=create} grew by %v, want 1", got)
	}
	f.ctrl.metricsCache.set(types.NamespacedName{Namespace: "ns", Name: "svc"}, map[portKey]efficiency{"k": {endpoints: 2, slices: 1}})
	want := `
# HELP endpoint_slice_mirroring_controller_endpoints_desired [ALPHA] Number of endpoints desired
# TYPE endpoint_slice_mirroring_controller_endpoints_desired gauge
endpoint_slice_mirroring_controller_endpoints_desired 2
# HELP endpoint_slice_mirroring_controller_num_endpoint_slices [ALPHA] Number of EndpointSlices
# TYPE endpoint_slice_mirroring_controller_num_endpoint_slices gauge
endpoint_slice_mirroring_controller_num_endpoint_slices 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"endpoint_slice_mirroring_controller_endpoints_desired", "endpoint_slice_mirroring_controller_num_endpoint_slices"); err != nil {
		t.Error(err)
	}
	names := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"changes", "endpoints_added_per_sync", "endpoints_updated_per_sync", "endpoints_removed_per_sync",
		"addresses_skipped_per_sync", "endpoints_sync_duration", "endpoints_desired", "num_endpoint_slices", "desired_endpoint_slices"} {
		if !names[metricsSubsystem+"_"+n] {
			t.Errorf("series %s_%s not exported (have %v)", metricsSubsystem, n, names)
		}
	}
}

// TestMetricsCache: the gauges sum the Endpoints the shard mirrors, desired slices by the
// per-subset limit, and drop an Endpoints that is forgotten.
func TestMetricsCache(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	tests := []struct {
		name                     string
		steps                    func(c *metricsCache)
		endpoints, desired, have int
	}{
		{name: "one Endpoints", steps: func(c *metricsCache) {
			c.set(a, map[portKey]efficiency{"k1": {endpoints: 25, slices: 2}, "k2": {endpoints: 5, slices: 1}})
		}, endpoints: 30, desired: 4, have: 3},
		{name: "two, one replaced", steps: func(c *metricsCache) {
			c.set(a, map[portKey]efficiency{"k1": {endpoints: 25, slices: 2}})
			c.set(b, map[portKey]efficiency{"k1": {endpoints: 1, slices: 1}})
			c.set(a, map[portKey]efficiency{"k1": {endpoints: 10, slices: 1}})
		}, endpoints: 11, desired: 2, have: 2},
		{name: "one forgotten", steps: func(c *metricsCache) {
			c.set(a, map[portKey]efficiency{"k1": {endpoints: 25, slices: 2}})
			c.set(b, map[portKey]efficiency{"k1": {endpoints: 1, slices: 1}})
			c.forget(a)
			c.forget(a)
		}, endpoints: 1, desired: 1, have: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newMetricsCache(10)
			tt.steps(c)
			desired, have := c.totals()
			if c.numEndpoints != tt.endpoints || desired != tt.desired || have != tt.have {
				t.Errorf("endpoints %d, desired slices %d, slices %d; want %d, %d, %d", c.numEndpoints, desired, have, tt.endpoints, tt.desired, tt.have)
			}
		})
	}
}

// counter returns the value of the counter name{operation=op} that reg gathers (0 when
// it has no such series).
func counter(t *testing.T, reg *prometheus.Registry, name, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

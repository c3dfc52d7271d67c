package endpointslicemirroring

import (
	"math"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics"
)

// metricsSubsystem is kube-controller-manager's subsystem of the mirroring controller's
// series. Upstream defines them in k8s.io/kubernetes (not in the published
// k8s.io/endpointslice module), so they are defined here under the same names, help,
// buckets and stability, and exported through the shard's component-base registry
// (Context.RegisterKubeMetrics): dashboards written for kube-controller-manager read them
// unchanged, each shard's series counting its own namespaces.
const metricsSubsystem = "endpoint_slice_mirroring_controller"

var (
	endpointsAddedPerSync = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: metricsSubsystem, Name: "endpoints_added_per_sync",
		Help:           "Number of endpoints added on each Endpoints sync",
		StabilityLevel: metrics.ALPHA, Buckets: metrics.ExponentialBuckets(2, 2, 15),
	}, []string{})
	endpointsUpdatedPerSync = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: metricsSubsystem, Name: "endpoints_updated_per_sync",
		Help:           "Number of endpoints updated on each Endpoints sync",
		StabilityLevel: metrics.ALPHA, Buckets: metrics.ExponentialBuckets(2, 2, 15),
	}, []string{})
	endpointsRemovedPerSync = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: metricsSubsystem, Name: "endpoints_removed_per_sync",
		Help:           "Number of endpoints removed on each Endpoints sync",
		StabilityLevel: metrics.ALPHA, Buckets: metrics.ExponentialBuckets(2, 2, 15),
	}, []string{})
	addressesSkippedPerSync = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: metricsSubsystem, Name: "addresses_skipped_per_sync",
		Help:           "Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset",
		StabilityLevel: metrics.ALPHA, Buckets: metrics.ExponentialBuckets(2, 2, 15),
	}, []string{})
	endpointsSyncDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem: metricsSubsystem, Name: "endpoints_sync_duration",
		Help:           "Duration of syncEndpoints() in seconds",
		StabilityLevel: metrics.ALPHA, Buckets: metrics.ExponentialBuckets(0.001, 2, 15),
	}, []string{})
	endpointsDesired = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: metricsSubsystem, Name: "endpoints_desired",
		Help: "Number of endpoints desired", StabilityLevel: metrics.ALPHA,
	}, []string{})
	numEndpointSlices = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: metricsSubsystem, Name: "num_endpoint_slices",
		Help: "Number of EndpointSlices", StabilityLevel: metrics.ALPHA,
	}, []string{})
	desiredEndpointSlices = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: metricsSubsystem, Name: "desired_endpoint_slices",
		Help: "Number of EndpointSlices that would exist with perfect endpoint allocation", StabilityLevel: metrics.ALPHA,
	}, []string{})
	sliceChanges = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem: metricsSubsystem, Name: "changes",
		Help: "Number of EndpointSlice changes", StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})
)

// kubeMetrics are the series above, for Context.RegisterKubeMetrics. Until registered,
// component-base metrics record nothing (unit tests).
func kubeMetrics() []metrics.Registerable {
	return []metrics.Registerable{endpointsAddedPerSync, endpointsUpdatedPerSync, endpointsRemovedPerSync,
		addressesSkippedPerSync, endpointsSyncDuration, endpointsDesired, numEndpointSlices,
		desiredEndpointSlices, sliceChanges}
}

// efficiency is, for one port key of one Endpoints, how many endpoints it mirrors and in
// how many slices.
type efficiency struct {
	endpoints, slices int
}

// metricsCache keeps the per-Endpoints figures the three gauges sum (upstream's
// metrics.Cache): endpoints desired, slices that exist, and slices that would with perfect
// packing. A shard's gauges cover the Endpoints of its namespaces: one forgotten when it
// leaves the shard's cache, so the shards' gauges sum to the cluster's.
type metricsCache struct {
	maxPerSlice int32

	mu           sync.Mutex
	numEndpoints int
	byEndpoints  map[types.NamespacedName]map[portKey]efficiency
}

func newMetricsCache(maxPerSlice int32) *metricsCache {
	return &metricsCache{maxPerSlice: maxPerSlice, byEndpoints: map[types.NamespacedName]map[portKey]efficiency{}}
}

// set replaces the figures of one Endpoints and updates the gauges.
func (c *metricsCache) set(nn types.NamespacedName, perKey map[portKey]efficiency) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.numEndpoints += sumEndpoints(perKey) - sumEndpoints(c.byEndpoints[nn])
	c.byEndpoints[nn] = perKey
	c.updateGauges()
}

// forget drops the figures of one Endpoints and updates the gauges.
func (c *metricsCache) forget(nn types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	perKey, ok := c.byEndpoints[nn]
	if !ok {
		return
	}
	c.numEndpoints -= sumEndpoints(perKey)
	delete(c.byEndpoints, nn)
	c.updateGauges()
}

// totals returns the desired and the existing slice count; c.mu held.
func (c *metricsCache) totals() (desired, actual int) {
	for _, perKey := range c.byEndpoints {
		for _, e := range perKey {
			actual += e.slices
			desired += int(math.Ceil(float64(e.endpoints) / float64(c.maxPerSlice)))
		}
	}
	return desired, actual
}

// updateGauges writes the gauges; c.mu held.
func (c *metricsCache) updateGauges() {
	desired, actual := c.totals()
	numEndpointSlices.WithLabelValues().Set(float64(actual))
	desiredEndpointSlices.WithLabelValues().Set(float64(desired))
	endpointsDesired.WithLabelValues().Set(float64(c.numEndpoints))
}

func sumEndpoints(perKey map[portKey]efficiency) int {
	n := 0
	for _, e := range perKey {
		n += e.endpoints
	}
	return n
}

package promutil

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	basemetrics "k8s.io/component-base/metrics"
)

// KubeMetrics exports k8s.io/component-base metrics, the kind upstream's published
// controller modules declare as package globals (k8s.io/endpointslice/metrics), through a
// Prometheus registerer of kshard's (so they carry the shard's label like every other
// series) instead of component-base's global legacyregistry, which nothing in kshard
// serves.
type KubeMetrics struct {
	reg prometheus.Registerer
}

// NewKubeMetrics returns a bridge registering into reg.
func NewKubeMetrics(reg prometheus.Registerer) *KubeMetrics {
	return &KubeMetrics{reg: reg}
}

// Register creates each metric (component-base metrics are inert until created) and
// registers it. A metric registered before is not an error: the globals are shared by
// every user of the package in the process, and a controller built twice registers them
// twice. A metric component-base hides (deprecated and hidden) is skipped. A nil bridge
// registers nothing, for callers without a registry.
func (k *KubeMetrics) Register(cs ...basemetrics.Registerable) error {
	if k == nil {
		return nil
	}
	for _, c := range cs {
		if !c.Create(nil) {
			continue
		}
		if err := k.reg.Register(c); err != nil {
			if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
				continue
			}
			return fmt.Errorf("registering metric %s: %w", c.FQName(), err)
		}
	}
	return nil
}

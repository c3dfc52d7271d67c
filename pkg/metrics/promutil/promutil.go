package promutil

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers every collector with reg, stopping at the first error (a duplicate
// series name, usually), which it returns naming the collector's position.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering metrics collector %d of %d: %w", i+1, len(cs), err)
		}
	}
	return nil
}

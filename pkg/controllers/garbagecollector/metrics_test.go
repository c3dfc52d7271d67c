package garbagecollector

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	(&Controller{gcm: m}).DiscoveryFailed()
	if n, err := testutil.GatherAndCount(reg, "garbagecollector_controller_resources_sync_error_total"); err != nil || n != 1 {
		t.Errorf("upstream's series: %d, %v", n, err)
	}
	if got := testutil.ToFloat64(m.ResourcesSyncError); got != 1 {
		t.Errorf("resources_sync_error_total = %v; want 1", got)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering twice succeeded")
	}
}

package endpointslice

import (
	"errors"
	"fmt"
	"testing"

	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"
	esmetrics "k8s.io/endpointslice/metrics"
)

// TestSyncsCountedByResult checks that every sync is counted in
// endpoint_slice_controller_syncs under upstream's result: stale for the tracker's stale
// error (however wrapped), error for any other, success for none. The counter only counts
// once registered, as the shard registers it (Context.RegisterKubeMetrics).
func TestSyncsCountedByResult(t *testing.T) {
	reg := basemetrics.NewKubeRegistry()
	if err := reg.Register(esmetrics.EndpointSliceSyncs); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "success", want: "success"},
		{name: "stale", err: errStaleCache, want: "stale"},
		{name: "stale, wrapped", err: fmt.Errorf("sync: %w", errStaleCache), want: "stale"},
		{name: "error", err: errors.New("conflict"), want: "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]float64{}
			for _, r := range []string{"success", "stale", "error"} {
				before[r] = counter(t, r)
			}
			trackSync(tc.err)
			for _, r := range []string{"success", "stale", "error"} {
				want := before[r]
				if r == tc.want {
					want++
				}
				if got := counter(t, r); got != want {
					t.Errorf("syncs{result=%q} = %v, want %v", r, got, want)
				}
			}
		})
	}
}

func counter(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(esmetrics.EndpointSliceSyncs.WithLabelValues(result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

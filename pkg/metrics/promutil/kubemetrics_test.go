package promutil

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	basemetrics "k8s.io/component-base/metrics"
)

func TestKubeMetricsRegister(t *testing.T) {
	counter := basemetrics.NewCounterVec(&basemetrics.CounterOpts{
		Subsystem: "kshard_test", Name: "things_total", Help: "Things.",
	}, []string{"kind"})
	gauge := basemetrics.NewGauge(&basemetrics.GaugeOpts{
		Subsystem: "kshard_test", Name: "level", Help: "Level.",
	})
	reg := prometheus.NewPedanticRegistry()
	km := NewKubeMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"shard": "s1"}, reg))

	if err := km.Register(counter, gauge); err != nil {
		t.Fatalf("Register: %v", err)
	}
	// A second registration of the same globals (another controller of the package, or the
	// controller built again) is not an error.
	if err := km.Register(counter); err != nil {
		t.Fatalf("Register again: %v", err)
	}
	counter.WithLabelValues("a").Inc()
	gauge.Set(3)

	want := `
# HELP kshard_test_level [ALPHA] Level.
# TYPE kshard_test_level gauge
kshard_test_level{shard="s1"} 3
# HELP kshard_test_things_total [ALPHA] Things.
# TYPE kshard_test_things_total counter
kshard_test_things_total{kind="a",shard="s1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	// Another collector with the same name but a different help is a real conflict.
	clash := basemetrics.NewGauge(&basemetrics.GaugeOpts{Subsystem: "kshard_test", Name: "level", Help: "Other."})
	if err := km.Register(clash); err == nil || !strings.Contains(err.Error(), "kshard_test_level") {
		t.Fatalf("Register of a clashing metric: got %v, want an error naming it", err)
	}

	var none *KubeMetrics
	if err := none.Register(counter); err != nil {
		t.Fatalf("nil bridge: %v", err)
	}
}

package controllers

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReconcileMetrics(t *testing.T) {
	tests := []struct {
		name           string
		record         func(m *ReconcileMetrics)
		wantReconciles float64
		wantErrors     float64
		wantSeries     int // series of the three families for controller "c"
	}{
		{name: "nothing recorded has no series", record: func(*ReconcileMetrics) {}, wantSeries: 0},
		{name: "Init creates every series at zero", record: func(m *ReconcileMetrics) { m.Init("c") }, wantSeries: 3},
		{name: "Init after reconciles keeps the counts", record: func(m *ReconcileMetrics) {
			m.Observe("c", time.Now(), nil)
			m.Observe("c", time.Now(), errors.New("boom"))
			m.Init("c")
		}, wantReconciles: 2, wantErrors: 1, wantSeries: 3},
		{name: "a success leaves the error series absent", record: func(m *ReconcileMetrics) {
			m.Observe("c", time.Now(), nil)
		}, wantReconciles: 1, wantSeries: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := NewReconcileMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			tc.record(m)
			n, err := testutil.GatherAndCount(reg)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantSeries {
				t.Errorf("series = %d, want %d", n, tc.wantSeries)
			}
			if got := testutil.ToFloat64(m.Reconciles.WithLabelValues("c")); got != tc.wantReconciles {
				t.Errorf("reconciles = %v, want %v", got, tc.wantReconciles)
			}
			if got := testutil.ToFloat64(m.Errors.WithLabelValues("c")); got != tc.wantErrors {
				t.Errorf("errors = %v, want %v", got, tc.wantErrors)
			}
		})
	}
	// A controller built without metrics (nil) must not panic.
	var m *ReconcileMetrics
	m.Init("c")
	m.Observe("c", time.Now(), nil)
}

package scaleout

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		q       float64
		buckets map[float64]float64
		want    float64
	}{
		{name: "empty", q: 0.99, buckets: map[float64]float64{1: 0, inf: 0}, want: 0},
		{name: "all in the first bucket", q: 0.99, buckets: map[float64]float64{1: 100, 2: 100, inf: 100}, want: 0.99},
		{name: "interpolated in the second bucket", q: 0.5, buckets: map[float64]float64{1: 0, 3: 100, inf: 100}, want: 2},
		{name: "in +Inf: the highest finite bound", q: 0.99, buckets: map[float64]float64{1: 10, 5: 50, inf: 100}, want: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(tt.q, tt.buckets); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("quantile = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPlotCapacity(t *testing.T) {
	steps := []step{{shards: 1, rate: 1, drained: true, achieved: 1}, {shards: 1, rate: 2, queueWaitP99: 3}, {shards: 2, rate: 2, drained: true, achieved: 2}}
	path := filepath.Join(t.TempDir(), "capacity.svg")
	if err := plotCapacity([]capacityPoint{{1, 1}, {2, 2}}, steps, path); err != nil {
		t.Fatal(err)
	}
	// Each plot is written as SVG and PNG: check every file is there and begins as its
	// format does.
	svg := [][]byte{[]byte("<?xml"), []byte("<svg")}
	png := [][]byte{[]byte("\x89PNG\r\n\x1a\n")}
	for _, f := range []struct {
		name  string
		magic [][]byte
	}{
		{"capacity.svg", svg}, {"capacity.png", png}, {"capacity-latency.svg", svg}, {"capacity-latency.png", png},
	} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), f.name))
		if err != nil {
			t.Error(err)
			continue
		}
		if !slices.ContainsFunc(f.magic, func(m []byte) bool { return bytes.HasPrefix(b, m) }) {
			t.Errorf("%s (%d bytes) begins with %q, want one of %q", f.name, len(b), b[:min(len(b), 16)], f.magic)
		}
	}
}

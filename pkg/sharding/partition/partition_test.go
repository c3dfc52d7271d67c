package partition

import (
	"fmt"
	"math"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		count   int
		wantErr bool
	}{
		{name: "zero", count: 0, wantErr: true},
		{name: "negative", count: -1, wantErr: true},
		{name: "one", count: 1},
		{name: "default", count: DefaultCount},
		{name: "max", count: MaxCount},
		{name: "above max", count: MaxCount + 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewMap(tt.count)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NewMap(%d) error = %v, wantErr %v", tt.count, err, tt.wantErr)
			}
		})
	}
}

func TestFor(t *testing.T) {
	tests := []struct {
		name      string
		count     int
		namespace string
		want      ID
	}{
		// Expected values pin the hash so that an accidental change of the
		// function (which would reshuffle every deployment) fails here.
		{name: "single partition", count: 1, namespace: "anything", want: 0},
		{name: "kube-system", count: 4096, namespace: "kube-system", want: 3071},
		{name: "default", count: 4096, namespace: "default", want: 3222},
		{name: "tenant", count: 4096, namespace: "tenant-00042", want: 3711},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewMap(tt.count)
			if err != nil {
				t.Fatal(err)
			}
			got := m.For(tt.namespace)
			if got != tt.want {
				t.Fatalf("For(%q) = %d, want %d", tt.namespace, got, tt.want)
			}
			if !m.Contains(got) {
				t.Fatalf("For(%q) = %d outside [0,%d)", tt.namespace, got, tt.count)
			}
		})
	}
}

// TestSpread checks that sequential names spread over all partitions, which
// is the property that ruled out FNV-1a ranges.
func TestSpread(t *testing.T) {
	tests := []struct {
		name  string
		count int
		names int
	}{
		{name: "256 partitions", count: 256, names: 100000},
		{name: "4096 partitions", count: 4096, names: 400000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := NewMap(tt.count)
			counts := make([]int, tt.count)
			for i := range tt.names {
				counts[m.For(fmt.Sprintf("tenant-%05d", i))]++
			}
			// A uniform hash gives Poisson counts: allow 5 standard
			// deviations, which a clustering hash (FNV ranges) blows by far.
			mean := float64(tt.names) / float64(tt.count)
			limit := mean + 5*math.Sqrt(mean)
			for p, c := range counts {
				if float64(c) > limit || float64(c) < mean-5*math.Sqrt(mean) {
					t.Fatalf("partition %d has %d names, mean %.1f", p, c, mean)
				}
			}
		})
	}
}

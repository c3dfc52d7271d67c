package balance

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestCosts checks the cost model: λ = max(LambdaMin, Beta·ΣL/ΣN).
func TestCosts(t *testing.T) {
	tests := []struct {
		name string
		load []float32
		ns   []uint32
		want []float32
	}{
		{name: "no load: namespaces at LambdaMin", load: nil, ns: []uint32{2, 0, 1}, want: []float32{0.002, 0, 0.001}},
		{name: "load and namespaces", load: []float32{10, 0, 30}, ns: []uint32{1, 1, 2}, want: []float32{10.5, 0.5, 31}},
		{name: "no namespaces", load: []float32{3, 0}, ns: nil, want: []float32{3, 0}},
		{name: "nothing", want: []float32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Costs(tt.load, tt.ns)
			if len(got) != len(tt.want) {
				t.Fatalf("Costs = %v, want %v", got, tt.want)
			}
			for i := range got {
				if math.Abs(float64(got[i]-tt.want[i])) > 1e-6 {
					t.Fatalf("Costs = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// TestCostliest: the n costliest partitions as Costs prices them, costliest
// first, ties by lower partition, none of cost 0, against a sort of every cost.
func TestCostliest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const P = 300
	load := make([]float32, P)
	ns := make([]uint32, P)
	for p := range P {
		if p%5 != 0 { // a fifth carry neither load nor namespace: cost 0
			load[p] = float32(rng.IntN(6)) // few values: many ties
			ns[p] = uint32(rng.IntN(3))
		}
	}
	cost := Costs(load, ns)
	var all []Ranked
	for p, c := range cost {
		if c > 0 {
			all = append(all, Ranked{Partition: p, Cost: c})
		}
	}
	slices.SortStableFunc(all, func(a, b Ranked) int { // by cost, descending; stable keeps ties by partition
		switch {
		case a.Cost > b.Cost:
			return -1
		case a.Cost < b.Cost:
			return 1
		}
		return 0
	})
	tests := []struct {
		name string
		n    int
		want []Ranked
	}{
		{name: "none asked", n: 0, want: nil},
		{name: "one", n: 1, want: all[:1]},
		{name: "the costliest 50", n: 50, want: all[:50]},
		{name: "more than carry a cost", n: P, want: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Costliest(tt.n, P, sliceReader(load), sliceReader(ns))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Costliest(%d) =\n%v\nwant\n%v", tt.n, got, tt.want)
			}
		})
	}
	if got := Costliest(5, 0, sliceReader(load), sliceReader(ns)); got != nil {
		t.Fatalf("no partitions: %v, want nil", got)
	}
}

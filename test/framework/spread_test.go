package framework

import "testing"

func TestSpread(t *testing.T) {
	tests := []struct {
		name   string
		xs     []float64
		want   Spread
		format string
		text   string
	}{
		{name: "empty", xs: nil, want: Spread{}, format: "%.1f", text: "-"},
		{name: "one value", xs: []float64{2.5}, want: Spread{N: 1, Median: 2.5, Min: 2.5, Max: 2.5}, format: "%.1f", text: "2.5"},
		{name: "equal values: no range", xs: []float64{3, 3, 3}, want: Spread{N: 3, Median: 3, Min: 3, Max: 3}, format: "%.0f", text: "3"},
		{name: "odd count: the middle value", xs: []float64{9, 1, 4}, want: Spread{N: 3, Median: 4, Min: 1, Max: 9}, format: "%.1f", text: "4.0 [1.0–9.0]"},
		{name: "even count: mean of the middle two", xs: []float64{4, 1, 2, 8}, want: Spread{N: 4, Median: 3, Min: 1, Max: 8}, format: "%.2f", text: "3.00 [1.00–8.00]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.xs...)
			got := SpreadOf(tt.xs)
			if got != tt.want {
				t.Errorf("SpreadOf(%v) = %+v, want %+v", tt.xs, got, tt.want)
			}
			if text := got.Format(tt.format); text != tt.text {
				t.Errorf("Format(%q) = %q, want %q", tt.format, text, tt.text)
			}
			for i := range in {
				if tt.xs[i] != in[i] {
					t.Fatalf("SpreadOf changed its input: %v, was %v", tt.xs, in)
				}
			}
		})
	}
}

func TestBusiestShare(t *testing.T) {
	tests := []struct {
		name string
		per  map[string]int
		want float64
	}{
		{name: "none", per: nil, want: 0},
		{name: "one shard", per: map[string]int{"a": 6}, want: 1},
		{name: "uneven", per: map[string]int{"a": 1, "b": 2, "c": 3}, want: 0.5},
		{name: "even", per: map[string]int{"a": 5, "b": 5, "c": 5, "d": 5}, want: 0.25},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := BusiestShare(tc.per); got != tc.want {
				t.Errorf("BusiestShare(%v) = %v, want %v", tc.per, got, tc.want)
			}
		})
	}
}

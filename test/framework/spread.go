package framework

import (
	"fmt"
	"slices"
)

// Spread is the median and range of a sample: how the benchmarks report a figure measured
// over several repetitions.
type Spread struct {
	// N is the sample's size; the other fields are 0 when it is 0.
	N                int
	Median, Min, Max float64
}

// SpreadOf returns the median (the mean of the two middle values for an even count), the
// smallest and the largest of xs, which it leaves unchanged.
func SpreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{N: len(s), Median: m, Min: s[0], Max: s[len(s)-1]}
}

// Format writes the median and the range with format, a verb for one float64 (e.g.
// "%.1f"), as "median [min–max]"; only the median when every value was the same, and "-"
// for an empty sample.
func (s Spread) Format(format string) string {
	switch {
	case s.N == 0:
		return "-"
	case s.Min == s.Max:
		return fmt.Sprintf(format, s.Median)
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", s.Median, s.Min, s.Max)
}

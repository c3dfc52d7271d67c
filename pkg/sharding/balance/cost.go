package balance

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
)

// The cost model's constants (design §2.1). A namespace costs a base of
// Beta times the average namespace's load, and at least LambdaMin: with no
// load anywhere (a cold start, a new leader before reports) the cost is the
// namespace count, which is what spreads namespaces evenly before any load
// is known.
const (
	Beta      = 0.05
	LambdaMin = 0.001
)

// NamespaceSlack is added to the namespace-share cap (MaxNamespaceShare ×
// the domain's average namespaces per member), so that small clusters,
// whose averages are a few namespaces, can still place a partition.
const NamespaceSlack = 8

// Costs returns cost(p) = L(p) + λ·N(p) for every partition, with λ =
// Lambda(ΣL, ΣN): the loads (requests/s) and namespace counts the coordinator
// keeps. Either slice may be nil (all zero); the result has the length of
// the longer. A partition with neither load nor namespace costs 0: the empty
// class.
func Costs(load []float32, namespaces []uint32) []float32 {
	n := max(len(load), len(namespaces))
	l, ns := sliceReader(load), sliceReader(namespaces)
	lambda := lambdaOf(n, l, ns)
	out := make([]float32, n)
	for p := range out {
		out[p] = Cost(l(p), ns(p), lambda)
	}
	return out
}

// Ranked is one partition of Costliest: its index and its cost as Costs
// computes it.
type Ranked struct {
	Partition int
	Cost      float32
}

// Costliest returns the (at most) n of the count partitions of highest cost,
// as Costs computes it from load(p) and namespaces(p), costliest first, ties
// by lower partition. Partitions of cost 0 are left out. It reads each
// partition twice (the sums λ needs, then its cost) and keeps the best n in a
// bounded heap (container/heap: an allocation per entry pushed, n at most),
// so a caller holding the partitions elsewhere (the coordinator, under the
// lock every heartbeat needs) copies none of them.
func Costliest(n, count int, load func(p int) float32, namespaces func(p int) uint32) []Ranked {
	if n <= 0 || count <= 0 {
		return nil
	}
	lambda := lambdaOf(count, load, namespaces)
	h := make(rankedHeap, 0, min(n, count))
	for p := range count {
		r := Ranked{Partition: p, Cost: Cost(load(p), namespaces(p), lambda)}
		switch {
		case r.Cost <= 0:
		case len(h) < n:
			heap.Push(&h, r)
		case worse(h[0], r):
			h[0] = r
			heap.Fix(&h, 0)
		}
	}
	slices.SortFunc(h, func(a, b Ranked) int {
		switch {
		case worse(b, a):
			return -1
		case worse(a, b):
			return 1
		}
		return 0
	})
	return h
}

// worse orders Ranked entries: lower cost, or the same cost and a higher
// partition.
func worse(a, b Ranked) bool {
	return a.Cost < b.Cost || (a.Cost == b.Cost && a.Partition > b.Partition)
}

// rankedHeap is a min-heap by worse: its root is the entry the next better
// one replaces once n are kept.
type rankedHeap []Ranked

func (h rankedHeap) Len() int           { return len(h) }
func (h rankedHeap) Less(i, j int) bool { return worse(h[i], h[j]) }
func (h rankedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rankedHeap) Push(x any)        { *h = append(*h, x.(Ranked)) }
func (h *rankedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// lambdaOf is Lambda over the count partitions that load and namespaces
// read.
func lambdaOf(count int, load func(p int) float32, namespaces func(p int) uint32) float64 {
	var sumL, sumN float64
	for p := range count {
		sumL += float64(load(p))
		sumN += float64(namespaces(p))
	}
	return Lambda(sumL, sumN)
}

// sliceReader reads s[p], or 0 past its end (a nil slice is all zero).
func sliceReader[T float32 | uint32](s []T) func(p int) T {
	return func(p int) T {
		if p < len(s) {
			return s[p]
		}
		return 0
	}
}

// Lambda is λ, the cost of one namespace, for loads summing to sumLoad over
// sumNamespaces namespaces: max(LambdaMin, Beta · sumLoad / sumNamespaces),
// LambdaMin without namespaces. Exported with Cost so that a reader of one
// partition's cost (the coordinator's /assignments, which must not copy every
// partition per request) computes exactly what Costs does.
func Lambda(sumLoad, sumNamespaces float64) float64 {
	if sumNamespaces > 0 {
		return max(LambdaMin, Beta*sumLoad/sumNamespaces)
	}
	return LambdaMin
}

// Cost is one partition's cost, L + λ·N, as Costs computes it.
func Cost(load float32, namespaces uint32, lambda float64) float32 {
	return float32(float64(load) + lambda*float64(namespaces))
}

// Params are a plan's thresholds and budgets (design §2.5, §2.8). Zero
// fields take the defaults (WithDefaults).
type Params struct {
	// Margin is δ: a round starts when the busiest member's cost exceeds
	// F·(1+δ) and stops once it is at most F·(1+δ/2); a new member pulls
	// only if below F·(1−δ/2). In (0, 1).
	Margin float64
	// MinLoad: no spread while the busiest member's cost is at most this
	// (idle clusters do not shuffle).
	MinLoad float64
	// MinGain: a spread move must lower the busiest member's cost by at
	// least MinGain × F.
	MinGain float64
	// HotFactor scales the hot threshold: a partition is hot when its cost
	// exceeds (1 − δ) × HotFactor × F (HotThreshold). At least 1.
	HotFactor float64
	// MaxMoves bounds a Balance plan's budgeted moves (pins, hot, load).
	MaxMoves int
	// MaxCostFraction bounds the cost a Balance plan moves, as a fraction
	// of each domain's total.
	MaxCostFraction float64
	// MaxObjects bounds the objects a Balance plan's moves warm, counting
	// twice each moved partition's (warm-up and Refresh both list it).
	MaxObjects uint64
	// MaxNamespaceShare caps the namespaces a receiver may hold at this ×
	// its domain's average per member, + NamespaceSlack (pins and a
	// partition alone exempt). math.Inf(1) for no cap. At least 1.
	MaxNamespaceShare float64
	// SharedGroups are the groups whose members also take unpinned
	// partitions; every other group is dedicated.
	SharedGroups []string
	// SaturationFactor scales the cost of a saturated member's partitions
	// (Member.Saturated): their demand is above what they sent by an amount
	// the reports cannot tell. Anything above 1 + δ puts a saturated member
	// near the fair share above a round's trigger, so the spread goes on
	// until it is no longer saturated; the default 1.5 also makes hot a
	// partition that measures 0.75 F on a saturated member of 1.3 F among
	// four, although the factor raises F too (about 1.33 would be the edge).
	// From 1 (off) to MaxSaturationFactor.
	SaturationFactor float64
}

// The defaults of Params.
const (
	DefaultMargin            = 0.10
	DefaultMinLoad           = 1
	DefaultMinGain           = 0.02
	DefaultHotFactor         = 1
	DefaultMaxMoves          = 64
	DefaultMaxCostFraction   = 0.10
	DefaultMaxObjects        = 50000
	DefaultMaxNamespaceShare = 2.0
	DefaultSaturationFactor  = 1.5
)

// MaxSaturationFactor bounds Params.SaturationFactor: far above any demand a
// saturated member hides, and far below what would overflow a cost.
const MaxSaturationFactor = 10

// WithDefaults returns p with zero fields set to their defaults.
func (p Params) WithDefaults() Params {
	if p.Margin == 0 {
		p.Margin = DefaultMargin
	}
	if p.MinLoad == 0 {
		p.MinLoad = DefaultMinLoad
	}
	if p.MinGain == 0 {
		p.MinGain = DefaultMinGain
	}
	if p.HotFactor == 0 {
		p.HotFactor = DefaultHotFactor
	}
	if p.MaxMoves == 0 {
		p.MaxMoves = DefaultMaxMoves
	}
	if p.MaxCostFraction == 0 {
		p.MaxCostFraction = DefaultMaxCostFraction
	}
	if p.MaxObjects == 0 {
		p.MaxObjects = DefaultMaxObjects
	}
	if p.MaxNamespaceShare == 0 {
		p.MaxNamespaceShare = DefaultMaxNamespaceShare
	}
	if p.SaturationFactor == 0 {
		p.SaturationFactor = DefaultSaturationFactor
	}
	return p
}

// Validate reports unusable parameters, naming the field. It does not
// apply defaults.
func (p Params) Validate() error {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case bad(p.Margin) || p.Margin <= 0 || p.Margin >= 1:
		return fmt.Errorf("balance: margin %v must be in (0, 1)", p.Margin)
	case bad(p.MinLoad) || p.MinLoad < 0:
		return fmt.Errorf("balance: min load %v must be finite and ≥ 0", p.MinLoad)
	case bad(p.MinGain) || p.MinGain < 0:
		return fmt.Errorf("balance: min gain %v must be finite and ≥ 0", p.MinGain)
	case bad(p.HotFactor) || p.HotFactor < 1:
		return fmt.Errorf("balance: hot factor %v must be finite and ≥ 1", p.HotFactor)
	case p.MaxMoves < 1:
		return fmt.Errorf("balance: max moves %d must be ≥ 1", p.MaxMoves)
	case bad(p.MaxCostFraction) || p.MaxCostFraction <= 0:
		return fmt.Errorf("balance: max cost fraction %v must be finite and > 0", p.MaxCostFraction)
	case p.MaxObjects < 1:
		return fmt.Errorf("balance: max objects %d must be ≥ 1", p.MaxObjects)
	case math.IsNaN(p.MaxNamespaceShare) || p.MaxNamespaceShare < 1:
		return fmt.Errorf("balance: max namespace share %v must be ≥ 1", p.MaxNamespaceShare)
	case bad(p.SaturationFactor) || p.SaturationFactor < 1 || p.SaturationFactor > MaxSaturationFactor:
		return fmt.Errorf("balance: saturation factor %v must be from 1 to %d", p.SaturationFactor, MaxSaturationFactor)
	}
	return nil
}

package balance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkPlan measures one plan at the production partition count for 100
// and 1,000 members and three cost shapes, in the three situations the
// coordinator plans in: a first start (every member new, nothing owned), a
// join (Membership, one new member, from a converged target) and a load
// round (Balance, from a converged target whose member holding the most
// partitions then carries 3× its share). It reports ms per plan; the goal
// is ≤ 50 ms at 1,000 × 4,096 (design §6).
func BenchmarkPlan(b *testing.B) {
	const p = 4096
	for _, n := range []int{100, 1000} {
		r := newRing(b, p, 0)
		for _, shape := range []string{shapeUniform, shapeZipf, shapeHot} {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			cost, objs, ns := costs(rng, shape, p)
			base := Input{Ring: r, Members: plain(n), Cost: cost, Objects: objs, Namespaces: ns}
			conv := plan(b, base).Target
			start := base
			start.Members = plain(n)
			for i := range start.Members {
				start.Members[i].New = true
			}
			join := base
			join.Members = append(plain(n), Member{ID: "joiner", New: true})
			join.Current = conv
			round := base
			round.Kind = Balance
			round.Current = conv
			round.Cost = slices.Clone(cost)
			busy := mostPartitions(conv, cost)
			for i, o := range conv {
				if o == busy {
					round.Cost[i] *= 3
				}
			}
			for _, c := range []struct {
				name string
				in   Input
			}{{"start", start}, {"join", join}, {"round", round}} {
				b.Run(fmt.Sprintf("P=%d/N=%d/%s/%s", p, n, shape, c.name), func(b *testing.B) {
					b.ReportAllocs()
					iters := 0
					for b.Loop() {
						if _, err := Plan(c.in); err != nil {
							b.Fatal(err)
						}
						iters++
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(iters)/1e6, "ms/plan")
				})
			}
		}
	}
}

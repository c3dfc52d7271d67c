package balance

import (
	"cmp"
	"slices"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// pins is step 5 (budgeted, first): a cost-bearing partition held by a
// member that may not hold it (outside its pinned group, or, unpinned, on a
// dedicated group's member after its pin was removed) moves to the
// least-loaded member that may, within the namespace cap if any is. Pins
// ignore cooling: the operator asked. Empty partitions need no step: the
// empty class is placed within its pin group already.
func (pl *planner) pins() {
	for p := range int32(pl.np) {
		o := pl.owner[p]
		if pl.cost[p] == 0 || o < 0 || pl.eligible(int(o), p) {
			continue
		}
		members := pl.eligibleMembers(p)
		to := -1
		if pl.pgrp[p] < 0 { // back to the default domain: the cap applies
			to = pl.lowest(p, members, func(m int) bool { return pl.capOK(m, p) })
		}
		if to < 0 {
			to = pl.lowest(p, members, nil)
		}
		if to < 0 || !pl.afford(p) {
			continue
		}
		pl.spend(p)
		pl.assign(p, to, ReasonPin)
	}
}

// hot is step 6 in domain d: a cost-bearing partition with cost above
// HotThreshold is hot, and its owner becomes exclusive. A member holding
// several hot partitions keeps the one with the most objects (the dearest
// to warm) and each other one moves to a member of its own while one that
// is not exclusive is left: hot partitions share a member only when there
// are more of them than members. (Not "while one is left for the rest":
// above (1 − δ)·F there can be as many hot partitions as members, N tenants
// of about 1/N of the work each, and stacking two of them would put nearly
// 2·F on one member for good; when the last member takes a hot partition,
// the rest stay where they are, for want of a non-exclusive receiver.) Then every other partition holding a
// namespace moves off each exclusive member, fewest objects first, to the
// least-loaded non-exclusive member. Empty partitions stay: no work. The
// hot partition itself never moves for being hot. A cooling extra hot
// partition stays; a cooling partition with namespaces still moves off an
// exclusive member (the cooldown stops load moves from undoing each other,
// and nothing moves onto an exclusive member, so this cannot: a partition
// moved for load onto a shard that then turns hot would otherwise share it
// with the hot partition for the rest of its cooldown). Suspect and
// saturated receivers are skipped (takesLoad). It ends by setting the fair
// share of the rest for the spread.
func (pl *planner) hot(d int32) {
	dm := &pl.doms[d]
	if pl.exclusive == nil {
		pl.exclusive = make([]bool, len(pl.mem))
	}
	hotOf := map[int32][]int32{}
	for p := range int32(pl.np) {
		if o := pl.owner[p]; o >= 0 && pl.pdom[p] == d && pl.mdom[o] == d && pl.isHot(p) {
			hotOf[o] = append(hotOf[o], p)
			pl.exclusive[o] = true
		}
	}
	nExcl := len(hotOf)
	receiver := func(p int32, capped bool) int {
		return pl.lowest(p, dm.members, func(m int) bool {
			return !pl.exclusive[m] && pl.takesLoad(m) && pl.eligible(m, p) && (!capped || pl.capOK(m, p))
		})
	}
	holders := make([]int32, 0, len(hotOf))
	for m := range hotOf {
		holders = append(holders, m)
	}
	slices.Sort(holders)
	for _, m := range holders {
		hs := hotOf[m]
		if len(hs) < 2 {
			continue
		}
		slices.SortFunc(hs, func(a, b int32) int {
			if c := cmp.Compare(pl.objs[b], pl.objs[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, p := range hs[1:] {
			if nExcl >= len(dm.members) || pl.isCooling(p) {
				continue // more hot partitions than members: the extra ones share
			}
			r := receiver(p, false)
			if r < 0 || !pl.afford(p) {
				continue
			}
			pl.spend(p)
			pl.assign(p, r, ReasonHot)
			pl.exclusive[r] = true
			nExcl++
		}
	}
	for _, e := range dm.members {
		if !pl.exclusive[e] {
			continue
		}
		var off []int32
		for _, p := range pl.held[e] {
			if pl.nsp[p] > 0 && !pl.isHot(p) {
				off = append(off, p)
			}
		}
		slices.SortFunc(off, func(a, b int32) int {
			if c := cmp.Compare(pl.objs[a], pl.objs[b]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, p := range off {
			r := receiver(p, true)
			if r < 0 || !pl.afford(p) {
				continue
			}
			pl.spend(p)
			pl.assign(p, r, ReasonHot)
		}
	}
	rest, restCost := 0, dm.total
	for _, m := range dm.members {
		if pl.exclusive[m] {
			restCost -= pl.load[m]
		} else {
			rest++
		}
	}
	if rest > 0 && restCost > 0 {
		dm.spreadFair = restCost / float64(rest)
	}
}

// spread is step 7 in domain d, over its non-exclusive members: when the
// busiest member b is above F'·(1+δ) and above MinLoad, move partitions off
// the busiest member, each to the least-loaded member r that takes load
// (takesLoad) and may hold it, until the busiest is at most F'·(1+δ/2), the
// budget is spent, or no move is possible. A candidate is not cooling, lowers Σ cost²
// (r + c < b), keeps r within F'·(1+δ/2) and its namespace cap, and lowers
// b by at least MinGain × F' (a smaller one only when b has no such
// candidate: several small moves may still be what brings it down). Among the candidates for the least-loaded
// receivers, the one whose c is closest to (b − r)/2 wins; ties go to fewer
// objects, then to r earliest in p's preference order, then to ID. A
// busiest member with no candidate is left and the next busiest tried.
func (pl *planner) spread(d int32) {
	dm := &pl.doms[d]
	F := dm.spreadFair
	if F <= 0 {
		return
	}
	var set []int32
	for _, m := range dm.members {
		if !pl.exclusive[m] {
			set = append(set, m)
		}
	}
	if len(set) < 2 {
		return
	}
	busiest := func(skip []bool) int {
		b := -1
		for _, m := range set {
			if !skip[m] && (b < 0 || pl.load[m] > pl.load[b]) {
				b = int(m)
			}
		}
		return b
	}
	stuck := make([]bool, len(pl.mem))
	if b := busiest(stuck); pl.load[b] <= F*(1+pl.prm.Margin) || pl.load[b] <= pl.prm.MinLoad {
		return
	}
	stop := F * (1 + pl.prm.Margin/2)
	var recv []int32
	for {
		b := busiest(stuck)
		if b < 0 || pl.load[b] <= stop || pl.moves >= pl.prm.MaxMoves {
			if b >= 0 && pl.load[b] > stop {
				pl.exhausted = true
			}
			return
		}
		recv = recv[:0]
		for _, m := range set {
			if int(m) != b && pl.takesLoad(int(m)) {
				recv = append(recv, m)
			}
		}
		slices.SortFunc(recv, func(x, y int32) int {
			if c := cmp.Compare(pl.load[x], pl.load[y]); c != 0 {
				return c
			}
			return cmp.Compare(x, y)
		})
		// Prefer moves that lower b by at least MinGain × F'; when b holds none that
		// fits, smaller ones, which together may still bring it down (many small
		// partitions: the simulation's finding, where a per-move floor left the busiest
		// at 1.5 × F' for good). The dead band, not the floor, keeps a steady load still.
		p, r := pl.spreadMove(b, recv, stop, pl.prm.MinGain*F)
		if p < 0 {
			p, r = pl.spreadMove(b, recv, stop, 0)
		}
		if p < 0 {
			stuck[b] = true
			continue
		}
		pl.spend(p)
		pl.assign(p, r, ReasonLoad)
	}
}

// spreadMove picks spread's move off b (see spread): the best candidate for
// the least-loaded receivers that have one, receivers of equal load
// considered together. It returns -1 when there is none.
func (pl *planner) spreadMove(b int, recv []int32, stop, floor float64) (int32, int) {
	bl := pl.load[b]
	for i := 0; i < len(recv); {
		j := i
		for j < len(recv) && pl.load[recv[j]] == pl.load[recv[i]] {
			j++
		}
		rl := pl.load[recv[i]]
		target := (bl - rl) / 2
		bestP, bestR := int32(-1), -1
		var bestGap float64
		var bestDist uint64
		for _, p := range pl.held[b] {
			c := pl.cost[p]
			if pl.isCooling(p) || rl+c >= bl || rl+c > stop || c <= 0 || c < floor {
				continue
			}
			gap := c - target
			if gap < 0 {
				gap = -gap
			}
			if bestP >= 0 && (gap > bestGap || (gap == bestGap && pl.objs[p] > pl.objs[bestP])) {
				continue
			}
			// The receiver for p: earliest in p's preference order among
			// this load level's members that may take it.
			r, dist := -1, uint64(0)
			for _, m := range recv[i:j] {
				if !pl.eligible(int(m), p) || !pl.capOK(int(m), p) {
					continue
				}
				if dm := pl.b.Distance(int(m), partition.ID(p)); r < 0 || dm < dist {
					r, dist = int(m), dm
				}
			}
			if r < 0 {
				continue
			}
			if bestP >= 0 && gap == bestGap && pl.objs[p] == pl.objs[bestP] &&
				(dist > bestDist || (dist == bestDist && p > bestP)) {
				continue
			}
			if !pl.afford(p) {
				continue
			}
			bestP, bestR, bestGap, bestDist = p, r, gap, dist
		}
		if bestP >= 0 {
			return bestP, bestR
		}
		i = j
	}
	return -1, -1
}

// takesLoad says whether member m may receive a load or hot move: not when
// its reports are not trusted (Suspect), nor when it is saturated (what it
// would get is work it cannot do).
func (pl *planner) takesLoad(m int) bool { return !pl.mem[m].Suspect && !pl.mem[m].Saturated }

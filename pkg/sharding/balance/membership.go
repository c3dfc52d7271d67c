package balance

import (
	"cmp"
	"slices"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// membership runs steps 1–4 (every plan): keep, place orphans, fill new
// members, then the empty class.
func (pl *planner) membership() {
	// 1. Keep: a cost-bearing partition stays with its current owner while
	// that owner is a member, whatever its pin or domain (step 5 moves it,
	// budgeted). No member is shed to a quota.
	var orphans []int32
	for p := range pl.np {
		if pl.cost[p] == 0 {
			continue
		}
		if m := pl.cur[p]; m >= 0 {
			pl.assign(int32(p), int(m), ReasonNone)
		} else {
			orphans = append(orphans, int32(p))
		}
	}
	if len(pl.mem) == 0 {
		return
	}
	pl.placeOrphans(orphans)
	for d := range pl.doms {
		pl.fill(int32(d))
	}
	pl.empties()
}

// placeOrphans is step 2: orphans in decreasing cost (ties by ID), each to
// the first member in its preference order that may hold it whose cost + c
// stays within F + c/2 and whose namespace cap allows it; else to the
// least-loaded such member; else (every one capped) to the least-loaded
// member that may hold it.
func (pl *planner) placeOrphans(orphans []int32) {
	slices.SortFunc(orphans, pl.byCostDesc)
	for _, p := range orphans {
		c := pl.cost[p]
		d := pl.pdom[p]
		bound := pl.doms[d].fair + c/2
		set := pl.pgrp[p] + 1
		best := -1
		// Loads only grow while orphans are placed, so minLow stays a
		// lower bound of the set's least load: when even it leaves no
		// room, nobody has any and the walk (up to every virtual node)
		// is skipped.
		if pl.minLow[set]+c <= bound {
			for m := range pl.b.Prefer(partition.ID(p)) {
				if pl.eligible(m, p) && pl.load[m]+c <= bound && pl.capOK(m, p) {
					best = m
					break
				}
			}
		}
		if best < 0 {
			members := pl.eligibleMembers(p)
			least := pl.lowest(p, members, nil)
			pl.minLow[set] = max(pl.minLow[set], pl.load[least])
			if best = pl.lowest(p, members, func(m int) bool { return pl.capOK(m, p) }); best < 0 {
				best = least
			}
		}
		pl.assign(p, best, ReasonMembership)
		pl.orphan[p] = true
		pl.doms[d].orphans++
	}
}

// fill is step 3 in domain d: members below the fair share F pull
// partitions from members above it. A new member pulls any partition if it
// starts below F·(1−δ/2); any member below F pulls the orphans step 2
// placed (which evens out what preference order left uneven, e.g. one
// member short while the others hold one more). The receiver is always
// the least loaded; donors are taken from the busiest, each giving its
// least-preferred partition first (largest ring distance; fewer objects,
// then ID, break ties). A partition moves only if the receiver stays within
// F + c/2 and ends below the donor (r + c < d: the move lowers Σ cost²).
func (pl *planner) fill(d int32) {
	dm := &pl.doms[d]
	F := dm.fair
	if F <= 0 {
		return
	}
	var active []int32
	for _, m := range dm.members {
		if (pl.mem[m].New && pl.load[m] < F*(1-pl.prm.Margin/2)) || (dm.orphans > 0 && pl.load[m] < F) {
			active = append(active, m)
		}
	}
	var donors []int32
	for len(active) > 0 {
		i := 0
		for j, m := range active {
			if pl.load[m] < pl.load[active[i]] || (pl.load[m] == pl.load[active[i]] && m < active[i]) {
				i = j
			}
		}
		r := int(active[i])
		donors = donors[:0]
		for _, m := range dm.members {
			if int(m) != r && pl.load[m] > F {
				donors = append(donors, m)
			}
		}
		slices.SortFunc(donors, func(a, b int32) int {
			if c := cmp.Compare(pl.load[b], pl.load[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		if !pl.pull(r, F, donors) {
			active = slices.Delete(active, i, i+1)
		}
	}
}

// pull moves one partition to r from the first donor that has one it may
// give (see fill), and reports whether it did.
func (pl *planner) pull(r int, F float64, donors []int32) bool {
	isNew := pl.mem[r].New
	for _, b := range donors {
		best := int32(-1)
		var bestDist uint64
		for _, p := range pl.held[b] {
			c := pl.cost[p]
			if (!isNew && !pl.orphan[p]) || !pl.eligible(r, p) || pl.load[r]+c > F+c/2 || pl.load[r]+c >= pl.load[b] || !pl.capOK(r, p) {
				continue
			}
			dist := pl.b.Distance(int(b), partition.ID(p))
			if best < 0 || dist > bestDist ||
				(dist == bestDist && (pl.objs[p] < pl.objs[best] || (pl.objs[p] == pl.objs[best] && p < best))) {
				best, bestDist = p, dist
			}
		}
		if best >= 0 {
			pl.assign(best, r, ReasonMembership)
			return true
		}
	}
	return false
}

// empties is step 4: the empty class (cost 0) is placed by the count
// quotas of ring.AssignFrom, restricted to the class, separately for each
// set of members that may hold a partition (unpinned: the default domain;
// pinned: the group). With no cost anywhere, no pin and no group this is
// exactly ring.AssignFrom.
func (pl *planner) empties() {
	classes := make([][]bool, len(pl.groups)+1) // by pin group + 1
	any := false
	for p := range pl.np {
		if pl.cost[p] != 0 {
			continue
		}
		k := pl.pgrp[p] + 1
		if classes[k] == nil {
			classes[k] = make([]bool, pl.np)
		}
		classes[k][p] = true
		any = true
	}
	if !any {
		return
	}
	for _, parts := range classes {
		if parts == nil {
			continue
		}
		var first int32 = -1
		for p, in := range parts {
			if in {
				first = int32(p)
				break
			}
		}
		var members []bool // nil: every member
		if len(pl.eligibleMembers(first)) != len(pl.mem) {
			members = make([]bool, len(pl.mem))
			for m := range pl.mem {
				members[m] = pl.eligible(m, first)
			}
		}
		res := pl.b.AssignFrom(pl.cur, members, parts)
		for p, in := range parts {
			if !in {
				continue
			}
			m := int(res[p])
			if m < 0 { // every member that may hold it lost its virtual nodes to hash collisions
				m = pl.lowest(int32(p), pl.eligibleMembers(int32(p)), nil)
			}
			pl.assign(int32(p), m, ReasonMembership)
		}
	}
}

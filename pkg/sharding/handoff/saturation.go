package handoff

import (
	"slices"
	"time"
)

// SaturationMedianRatio: a member is saturated only if it also waits at least this ×
// the median wait of the other members of its shard group. When every shard waits alike
// (a cluster near its capacity as a whole) moving load cannot help, and marking the
// busiest of them saturated would only move partitions from one to the next: the
// skewed benchmark's three shards left to the others waited 1.1–2.6 s/s, its saturated
// one 9.2 against 0.5–0.9 elsewhere.
const SaturationMedianRatio = 2

// SaturationMedianExitRatio: a saturated member stays saturated while it waits at least
// this × its group's median (and half of BalanceConfig.SaturationWait): below
// SaturationMedianRatio, so that a wait near the bar does not flip it at every report,
// and above 1, so that a member judged against the others' older, lower waits (it
// reported first after the load rose everywhere) is let go once theirs catch up.
const SaturationMedianExitRatio = 1.5

// waitIndex keeps, per group, the sorted limiter waits of the members that count toward
// the saturation median (those that reported since their Welcome and are not leaving),
// so that judging a report costs three binary searches and a short copy instead of a
// walk of every member and a sort (BenchmarkHeartbeatLoadReport: one report at 1,000
// shards). Its zero value, and any index after a change of who counts (invalidate), is
// rebuilt from the members at the next report; a counted member's new wait is updated
// in place.
type waitIndex struct {
	sorted map[string][]uint32 // group → the counted members' waits, ascending; nil: rebuild
	of     map[string]uint32   // counted member → its wait as held in sorted
}

// countsForMedian says whether m's wait is part of its group's median.
func countsForMedian(m *member) bool { return m.loadSinceWelcome && !m.leaving }

// invalidate drops the index, to be rebuilt: a member joined or went, was welcomed again
// (no report since), reported for the first time since its Welcome, or is leaving.
func (x *waitIndex) invalidate() { x.sorted, x.of = nil, nil }

// update brings the index up to date after m's report set m.limiterWait: rebuilt from
// members when dropped, else m's wait replaced in place.
func (x *waitIndex) update(members map[string]*member, m *member) {
	if x.sorted != nil && countsForMedian(m) {
		x.set(m)
	}
	if x.sorted == nil {
		x.rebuild(members)
	}
}

// rebuild recomputes the index from members.
func (x *waitIndex) rebuild(members map[string]*member) {
	x.sorted, x.of = map[string][]uint32{}, map[string]uint32{}
	for id, m := range members {
		if countsForMedian(m) {
			x.sorted[m.group] = append(x.sorted[m.group], m.limiterWait)
			x.of[id] = m.limiterWait
		}
	}
	for _, w := range x.sorted {
		slices.Sort(w)
	}
}

// set records m's current wait, m counting toward the median.
func (x *waitIndex) set(m *member) {
	w := x.sorted[m.group]
	old, ok := x.of[m.id]
	i, found := slices.BinarySearch(w, old)
	if !ok || !found {
		// Unreachable while every change of who counts invalidates the index (the
		// coordinator fuzz checks the index after each step): rebuilt, not trusted.
		x.invalidate()
		return
	}
	w = slices.Delete(w, i, i+1)
	j, _ := slices.BinarySearch(w, m.limiterWait)
	x.sorted[m.group] = slices.Insert(w, j, m.limiterWait)
	x.of[m.id] = m.limiterWait
}

// othersMedian is the median wait of m's group without m's own (one occurrence of it,
// when m counts), 0 when no other member counts.
func (x *waitIndex) othersMedian(m *member) float64 {
	w := x.sorted[m.group]
	skip := len(w) // no element skipped
	if own, ok := x.of[m.id]; ok {
		skip, _ = slices.BinarySearch(w, own)
	}
	n := len(w)
	if skip < len(w) {
		n--
	}
	at := func(i int) float64 {
		if i >= skip {
			i++
		}
		return float64(w[i])
	}
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return at(n / 2)
	default:
		return (at(n/2-1) + at(n/2)) / 2
	}
}

// updateSaturation judges m, after it reported its wait in a report taken (loadReport):
// it becomes saturated at a wait of at least BalanceConfig.SaturationWait and
// SaturationMedianRatio × the median of the other members of its group that reported
// since their Welcome and are not leaving (a member that never reported is not a
// zero), and stays saturated while its wait is at least half of SaturationWait and
// SaturationMedianExitRatio × that median, so that a wait hovering at the bar does not
// flip it at every report. The median comes from waitIndex.
func (c *Coordinator) updateSaturation(m *member, now time.Time) {
	c.bal.waits.update(c.members, m)
	median := c.bal.waits.othersMedian(m)
	w, abs, was := float64(m.limiterWait), 1000*c.cfg.Balance.SaturationWait, m.saturated
	if was {
		m.saturated = w >= abs/2 && w >= SaturationMedianExitRatio*median
	} else {
		m.saturated = w >= abs && w >= SaturationMedianRatio*median
	}
	if m.saturated != was && c.cfg.Balance.Placement == PlacementLoad {
		c.emit(Event{Kind: EventSaturation, At: now, Shard: m.id, Saturated: m.saturated, Wait: m.limiterWait, Median: uint32(median)})
	}
}

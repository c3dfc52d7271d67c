package handoff

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveOthersMedian is the saturation median by its definition: the median wait of the
// other members of m's group that reported since their Welcome and are not leaving.
func naiveOthersMedian(members map[string]*member, m *member) float64 {
	var w []uint32
	for _, o := range members {
		if o != m && o.group == m.group && o.loadSinceWelcome && !o.leaving {
			w = append(w, o.limiterWait)
		}
	}
	slices.Sort(w)
	switch n := len(w); {
	case n == 0:
		return 0
	case n%2 == 1:
		return float64(w[n/2])
	default:
		return (float64(w[n/2-1]) + float64(w[n/2])) / 2
	}
}

// TestWaitIndexMedian: whatever the sequence of reports, welcomes, leaves, joins and
// departures, the index's median of the others equals the definition's, for every member
// (repeated waits and members that do not count included).
func TestWaitIndexMedian(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
		groups  int
		waits   uint32 // waits drawn from [0, waits): small means many equal values
	}{
		{name: "one member", members: 1, groups: 1, waits: 5000},
		{name: "two members", members: 2, groups: 1, waits: 5000},
		{name: "equal waits", members: 9, groups: 1, waits: 3},
		{name: "groups", members: 40, groups: 3, waits: 4000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.members)))
			members := map[string]*member{}
			var x waitIndex
			join := func(i int) {
				id := fmt.Sprintf("s%02d", i)
				members[id] = &member{id: id, group: fmt.Sprintf("g%d", i%tc.groups)}
				x.invalidate()
			}
			for i := range tc.members {
				join(i)
			}
			for step := range 3000 {
				ids := make([]string, 0, len(members))
				for id := range members {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				if len(ids) == 0 {
					join(rng.IntN(tc.members))
					continue
				}
				m := members[ids[rng.IntN(len(ids))]]
				switch op := rng.IntN(20); {
				case op == 0: // a Welcome: no report since
					if m.loadSinceWelcome {
						m.loadSinceWelcome = false
						x.invalidate()
					}
				case op == 1:
					if !m.leaving {
						m.leaving = true
						x.invalidate()
					}
				case op == 2:
					delete(members, m.id)
					x.invalidate()
					join(rng.IntN(tc.members))
					continue
				default: // a report, as heartbeat and loadReport take it
					if !m.loadSinceWelcome {
						m.loadSinceWelcome = true
						x.invalidate()
					}
					m.limiterWait = rng.Uint32N(tc.waits)
					x.update(members, m)
				}
				if x.sorted == nil {
					continue // judged only after a report, which rebuilds first
				}
				for _, id := range ids {
					if got, want := x.othersMedian(members[id]), naiveOthersMedian(members, members[id]); got != want {
						t.Fatalf("step %d: median of %s's others %v, want %v", step, id, got, want)
					}
				}
			}
		})
	}
}

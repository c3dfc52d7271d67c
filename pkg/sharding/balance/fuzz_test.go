package balance

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// FuzzPlan: for any input it accepts, Plan does not panic, assigns every
// partition to a member that may hold it (or keeps it where it was), gives
// reasons exactly for the changes, depends neither on member order nor on
// anything but its input, makes at most MaxMoves budgeted moves, and is a
// fixed point for a Membership plan of its own target.
func FuzzPlan(f *testing.F) {
	f.Add(uint8(16), uint8(5), uint8(10), true, []byte{0, 1, 2, 3, 4, 5, 6, 7}, []byte{9, 0, 0, 200, 3})
	f.Add(uint8(3), uint8(7), uint8(1), false, []byte{9, 9, 9}, []byte{})
	f.Add(uint8(48), uint8(12), uint8(20), true, []byte{}, []byte{255, 255, 1, 0, 0, 0, 7})
	f.Add(uint8(64), uint8(0), uint8(3), true, []byte{1}, []byte{1})
	f.Fuzz(func(t *testing.T, p8, n8, rf8 uint8, balance bool, owners, loads []byte) {
		p, n, rf := int(p8)%64+1, int(n8)%13, int(rf8)%30+1
		r := newRing(t, p, rf)
		at := func(bs []byte, i int) int {
			if len(bs) == 0 {
				return 0
			}
			return int(bs[i%len(bs)])
		}
		members := plain(n)
		for i := range members {
			k := at(owners, 3*i+1)
			members[i].New = k&1 != 0
			members[i].Suspect = k&2 != 0
			members[i].Saturated = k&16 != 0
			switch (k >> 2) % 4 {
			case 1:
				members[i].Group = "dedicated"
			case 2:
				members[i].Group = "shared"
			}
		}
		in := Input{
			Ring: r, Members: members, Current: make([]string, p),
			Cost: make([]float32, p), Objects: make([]uint32, p), Namespaces: make([]uint32, p),
			Pin: make([]string, p), Cooling: make([]bool, p),
			Params: Params{SharedGroups: []string{"shared"}, MaxMoves: 1 + at(loads, 0)%8},
		}
		if balance {
			in.Kind = Balance
		}
		for i := range p {
			if k := at(owners, i) % (n + 3); k < n+2 {
				in.Current[i] = fmt.Sprintf("shard-%d", k) // k ≥ n: not a member
			}
			l := at(loads, i+1)
			if l%3 != 0 {
				in.Cost[i] = float32(l) / 8
				in.Namespaces[i] = uint32(l % 5)
				in.Objects[i] = uint32(l * 3)
			}
			switch l % 17 {
			case 1:
				in.Pin[i] = "dedicated"
			case 2:
				in.Pin[i] = "shared"
			case 3:
				in.Pin[i] = "nowhere"
			}
			in.Cooling[i] = l%7 == 0
		}
		out, err := Plan(in)
		if err != nil {
			t.Fatal(err)
		}
		checkOutput(t, in, out)
		budgeted := 0
		for _, why := range out.Reason {
			if why == ReasonPin || why == ReasonHot || why == ReasonLoad {
				budgeted++
			}
		}
		if budgeted > in.Params.MaxMoves {
			t.Fatalf("%d budgeted moves, max %d", budgeted, in.Params.MaxMoves)
		}
		if in.Kind == Membership && budgeted > 0 {
			t.Fatalf("a membership plan made %d budgeted moves", budgeted)
		}
		rev := in
		rev.Members = slices.Clone(members)
		slices.Reverse(rev.Members)
		if again, err := Plan(rev); err != nil || !slices.Equal(again.Target, out.Target) || !slices.Equal(again.Reason, out.Reason) {
			t.Fatalf("the plan depends on member order (err %v)", err)
		}
		fixed := in
		fixed.Kind = Membership
		fixed.Current = out.Target
		fixed.Members = slices.Clone(members)
		for i := range fixed.Members {
			fixed.Members[i].New = false
		}
		if n > 0 {
			if again, err := Plan(fixed); err != nil || !slices.Equal(again.Target, out.Target) {
				t.Fatalf("not a fixed point: %d partitions move (err %v)", len(moved(out.Target, again.Target)), err)
			}
		}
		for _, st := range out.Domains {
			if math.IsNaN(st.Fair) || math.IsNaN(st.Imbalance) || st.Members == 0 {
				t.Fatalf("bad domain stat %+v", st)
			}
			if len(st.HotPartitions) != st.Hot || len(st.ExclusiveMembers) != st.Exclusive ||
				!slices.IsSorted(st.HotPartitions) || !slices.IsSorted(st.ExclusiveMembers) {
				t.Fatalf("domain %q: hot partitions %v (of %d), exclusive members %v (of %d), want as many, sorted",
					st.Group, st.HotPartitions, st.Hot, st.ExclusiveMembers, st.Exclusive)
			}
			for _, m := range st.ExclusiveMembers {
				if !slices.ContainsFunc(st.HotPartitions, func(p partition.ID) bool { return out.Target[p] == m }) {
					t.Fatalf("domain %q: exclusive member %s holds none of the hot partitions %v", st.Group, m, st.HotPartitions)
				}
			}
		}
	})
}

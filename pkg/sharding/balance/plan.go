package balance

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// Kind says which steps a plan runs.
type Kind uint8

const (
	// Membership runs steps 1–4 (keep, orphans, fill new members, the empty
	// class), unbudgeted: what a membership change or a first start needs.
	// It never moves a partition for load, so a join moves only the new
	// member's fair share.
	Membership Kind = iota
	// Balance runs steps 1–7: Membership's, then pins, hot isolation and
	// spread, within the round's budget.
	Balance
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Membership:
		return "membership"
	case Balance:
		return "balance"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Reason says why a partition's target differs from its current owner: the
// coordinator counts and logs moves by it.
type Reason uint8

const (
	// ReasonNone: the target is the current owner.
	ReasonNone Reason = iota
	// ReasonMembership: placed because its owner left or it had none, or
	// pulled by a new member, or (empty class) moved by the count quotas.
	ReasonMembership
	// ReasonPin: moved into its pinned group, or out of a dedicated group
	// after its pin was removed.
	ReasonPin
	// ReasonHot: moved off a member that holds a hot partition, or a second
	// hot partition moved to a member of its own.
	ReasonHot
	// ReasonLoad: moved by the spread from the busiest member.
	ReasonLoad
)

// String returns the reason as the balancer_moves_total label spells it.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return ""
	case ReasonMembership:
		return "membership"
	case ReasonPin:
		return "pin"
	case ReasonHot:
		return "hot"
	case ReasonLoad:
		return "load"
	}
	return fmt.Sprintf("Reason(%d)", r)
}

// Member is one live shard as the balancer sees it.
type Member struct {
	// ID is the shard's ID, as in the ring.
	ID string
	// Group is the shard group it runs in ("" for none). A group not in
	// Params.SharedGroups is dedicated: only partitions pinned to it go
	// there.
	Group string
	// New: the member was not in the last applied member set (or, on a new
	// leader's first target, holds nothing). Only new members pull
	// partitions that have an owner (step 3).
	New bool
	// Suspect: its reports are not trusted (design §1.5); no load or hot
	// move goes to it. Membership placement still may, for availability.
	Suspect bool
	// Saturated: its controllers' clients wait in their rate limiters (the
	// coordinator's BalanceConfig.SaturationWait, and twice the median
	// member's wait: handoff.SaturationMedianRatio), so what its partitions
	// sent is below what they asked for: a queue that backs up folds events
	// and the client budget caps the rest. A plan counts its partitions
	// Params.SaturationFactor × their cost, and no load or hot move goes to
	// it.
	Saturated bool
}

// Input is everything a plan depends on. Per-partition slices have one
// entry per partition (the ring's PartitionCount) or are nil, which means
// zero (no cost, no objects, no namespaces, no pin, nothing cooling,
// nobody owning). Plan does not modify them.
type Input struct {
	// Ring gives the partition count and each partition's preference
	// order. Plan builds its virtual nodes once for Members.
	Ring *ring.Ring
	// Members are the live members. Their order does not matter; IDs must
	// be distinct and non-empty.
	Members []Member
	// Current is, per partition, its owner or the destination of the move
	// in flight ("" for nobody). An owner that is not a member counts as
	// nobody.
	Current []string
	// Cost is each partition's cost (Costs); 0 puts it in the empty class.
	// Must be finite and ≥ 0.
	Cost []float32
	// Objects is each partition's cached objects: what a move warms.
	Objects []uint32
	// Namespaces is each partition's namespace count, from the
	// coordinator's own informer: what the namespace-share cap counts.
	Namespaces []uint32
	// Pin is each partition's pinned group, "" for none.
	Pin []string
	// Cooling marks partitions acquired less than the cooldown ago: never
	// moved for load or hot isolation.
	Cooling []bool
	// Kind selects the steps.
	Kind Kind
	// Params are the thresholds and budgets; zero fields take the defaults.
	Params Params
}

// Output is a plan.
type Output struct {
	// Target is the owner of every partition ("" only when there are no
	// members).
	Target []string
	// Reason is, per partition, why Target differs from Current
	// (ReasonNone where it does not).
	Reason []Reason
	// Domains describes each placement domain after the plan: the default
	// domain first, then each dedicated group with members, by name.
	Domains []DomainStat
	// BudgetExhausted: a Balance plan left a move undone for its budget, so
	// the next round has more to do.
	BudgetExhausted bool
}

// DomainStat describes one placement domain of a plan's target: the
// figures the coordinator exports (load_fair, load_imbalance,
// hot_partitions, pins).
type DomainStat struct {
	// Group is "" for the default domain, else the dedicated group.
	Group string
	// Members is the number of members in the domain.
	Members int
	// Cost is the total cost of the domain's partitions.
	Cost float64
	// Fair is F = Cost / Members.
	Fair float64
	// Hot is the number of hot partitions (cost above (1 − δ) × HotFactor ×
	// Fair; see HotThreshold).
	Hot int
	// Exclusive is the number of members holding a hot partition.
	Exclusive int
	// SpreadFair is the fair share of the other members: (Cost − what the
	// exclusive members hold) / (Members − Exclusive).
	SpreadFair float64
	// Imbalance is the busiest non-exclusive member's cost / SpreadFair (0
	// when SpreadFair is 0).
	Imbalance float64
	// UnsatisfiedPins counts partitions pinned to a group with no member:
	// they are placed in the default domain instead (availability over
	// pinning).
	UnsatisfiedPins int
	// HotPartitions are the hot partitions (Hot of them), ascending, and
	// ExclusiveMembers the members holding one in the target (Exclusive of
	// them), sorted: the coordinator shows which partition is hot and which
	// shard exclusive (GET /assignments) from the plan's own decision instead
	// of applying the hot rule a second time, which would drift from it.
	HotPartitions    []partition.ID
	ExclusiveMembers []string
}

// Errors Plan returns for input it cannot plan from.
var (
	ErrNoRing          = errors.New("balance: no ring")
	ErrLength          = errors.New("balance: a per-partition input does not have one entry per partition")
	ErrCost            = errors.New("balance: a cost is negative, NaN or infinite")
	ErrDuplicateMember = errors.New("balance: duplicate member ID")
)

// Plan computes the target owner of every partition. It is pure: no clock,
// no I/O, no randomness, and the same result whatever the order of
// in.Members. See the package documentation for the rules.
func Plan(in Input) (Output, error) {
	pl, err := newPlanner(in)
	if err != nil {
		return Output{}, err
	}
	return pl.run(), nil
}

// run computes the plan.
func (pl *planner) run() Output {
	pl.membership()
	if pl.kind == Balance {
		pl.pins()
	}
	// For every kind: the figures of a Membership plan (hot partitions, exclusive
	// members) apply the same hysteresis as a Balance plan's.
	pl.markAlone()
	if pl.kind == Balance {
		for d := range pl.doms {
			pl.hot(int32(d))
		}
		for d := range pl.doms {
			pl.spread(int32(d))
		}
	}
	return pl.output()
}

// planner is one plan's working state. Members are addressed by their index
// in the built ring (sorted IDs), partitions by ID.
type planner struct {
	prm   Params
	kind  Kind
	b     *ring.Built
	np    int
	mem   []Member // by member index
	cur   []int32  // current owner, -1 for nobody
	owner []int32  // the target being built, -1 while unplaced

	cost    []float64 // per partition
	objs    []uint64  // per partition
	nsp     []int64   // per partition
	cooling []bool    // per partition, nil for none

	load []float64 // per member: cost of what it holds in owner
	nsm  []int64   // per member: namespaces of what it holds in owner
	held [][]int32 // per member: the cost-bearing partitions it holds in owner

	groups []string // distinct member groups, sorted, "" excluded
	group  []int32  // per member: index in groups, -1 for none
	mdom   []int32  // per member: its domain
	pgrp   []int32  // per partition: the group it is pinned to (with members), -1 for none
	pdom   []int32  // per partition: its domain
	doms   []domain

	reason    []Reason
	orphan    []bool    // per partition: placed by step 2 in this plan
	exclusive []bool    // per member: holds a hot partition (Balance)
	alone     []bool    // per partition: its owner holds no other partition with namespaces once membership and pins are placed (Balance; see isHot)
	minLow    []float64 // per eligible set (pin group + 1, 0 for none): a lower bound of its members' least cost

	moves     int
	objMoved  uint64
	exhausted bool

	// trace, when set (tests), sees every assignment before it is made.
	trace func(p int32, from, to int, why Reason)
}

// domain is one placement domain: the default one, or a dedicated group.
type domain struct {
	group       string
	members     []int32
	total       float64 // Σ cost of its partitions
	nsTotal     int64
	fair        float64 // total / members
	cap         float64 // namespace-share cap of a receiver
	unsatisfied int
	orphans     int     // cost-bearing orphans placed by step 2
	spreadFair  float64 // fair share of the non-exclusive members (after hot)
	costMoved   float64 // by budgeted moves this plan
}

func newPlanner(in Input) (*planner, error) {
	if in.Ring == nil {
		return nil, ErrNoRing
	}
	prm := in.Params.WithDefaults()
	if err := prm.Validate(); err != nil {
		return nil, err
	}
	np := in.Ring.Config().PartitionCount
	for _, s := range []struct {
		name string
		n    int
	}{{"Current", len(in.Current)}, {"Cost", len(in.Cost)}, {"Objects", len(in.Objects)}, {"Namespaces", len(in.Namespaces)}, {"Pin", len(in.Pin)}, {"Cooling", len(in.Cooling)}} {
		if s.n != 0 && s.n != np {
			return nil, fmt.Errorf("%w: %s has %d, want %d", ErrLength, s.name, s.n, np)
		}
	}
	ids := make([]string, len(in.Members))
	for i, m := range in.Members {
		ids[i] = m.ID
	}
	b, err := in.Ring.Build(ids)
	if err != nil {
		return nil, err
	}
	if len(b.Members()) != len(ids) {
		return nil, ErrDuplicateMember
	}
	n := len(ids)
	pl := &planner{
		prm: prm, kind: in.Kind, b: b, np: np,
		mem:     make([]Member, n),
		cur:     b.Owners(in.Current),
		owner:   make([]int32, np),
		cost:    make([]float64, np),
		objs:    make([]uint64, np),
		nsp:     make([]int64, np),
		cooling: in.Cooling,
		load:    make([]float64, n),
		nsm:     make([]int64, n),
		held:    make([][]int32, n),
		group:   make([]int32, n),
		mdom:    make([]int32, n),
		pgrp:    make([]int32, np),
		pdom:    make([]int32, np),
		reason:  make([]Reason, np),
		orphan:  make([]bool, np),
	}
	for _, m := range in.Members {
		pl.mem[b.Index(m.ID)] = m
	}
	for p := range np {
		pl.owner[p] = -1
		if in.Cost != nil {
			c := float64(in.Cost[p])
			if math.IsNaN(c) || math.IsInf(c, 0) || c < 0 {
				return nil, fmt.Errorf("%w: partition %d: %v", ErrCost, p, in.Cost[p])
			}
			pl.cost[p] = c
		}
		if in.Objects != nil {
			pl.objs[p] = uint64(in.Objects[p])
		}
		if in.Namespaces != nil {
			pl.nsp[p] = int64(in.Namespaces[p])
		}
		if o := pl.cur[p]; o >= 0 && pl.mem[o].Saturated {
			pl.cost[p] *= prm.SaturationFactor
		}
	}
	pl.domains(in.Pin)
	return pl, nil
}

// domains sorts members and partitions into placement domains: the default
// domain (members without a group or in a shared group; unpinned
// partitions, and partitions pinned to a shared group or to a group with no
// member) and one per dedicated group with members (its members; the
// partitions pinned to it). With no member in the default domain every
// member is in it, and every group is treated as shared: unpinned
// partitions must go somewhere.
func (pl *planner) domains(pin []string) {
	for _, m := range pl.mem {
		if m.Group != "" {
			pl.groups = append(pl.groups, m.Group)
		}
	}
	pl.groups = slices.Compact(slices.Sorted(slices.Values(pl.groups)))
	dedicated := make([]bool, len(pl.groups))
	defaultMembers := 0
	for i, m := range pl.mem {
		pl.group[i] = -1
		if m.Group == "" {
			defaultMembers++
			continue
		}
		g, _ := slices.BinarySearch(pl.groups, m.Group)
		pl.group[i] = int32(g)
		if slices.Contains(pl.prm.SharedGroups, m.Group) {
			defaultMembers++
		} else {
			dedicated[g] = true
		}
	}
	if defaultMembers == 0 {
		clear(dedicated)
	}
	pl.doms = []domain{{}}
	gdom := make([]int32, len(pl.groups)) // group → its domain
	for g, ded := range dedicated {
		if ded {
			gdom[g] = int32(len(pl.doms))
			pl.doms = append(pl.doms, domain{group: pl.groups[g]})
		}
	}
	for i := range pl.mem {
		if g := pl.group[i]; g >= 0 {
			pl.mdom[i] = gdom[g]
		}
		d := &pl.doms[pl.mdom[i]]
		d.members = append(d.members, int32(i))
	}
	for p := range pl.np {
		pl.pgrp[p] = -1
		if pin != nil && pin[p] != "" {
			if g, ok := slices.BinarySearch(pl.groups, pin[p]); ok {
				pl.pgrp[p] = int32(g)
				pl.pdom[p] = gdom[g]
			} else {
				pl.doms[0].unsatisfied++
			}
		}
		d := &pl.doms[pl.pdom[p]]
		d.total += pl.cost[p]
		d.nsTotal += pl.nsp[p]
	}
	for i := range pl.doms {
		d := &pl.doms[i]
		d.cap = math.Inf(1)
		if k := len(d.members); k > 0 {
			d.fair = d.total / float64(k)
			if !math.IsInf(pl.prm.MaxNamespaceShare, 1) {
				d.cap = pl.prm.MaxNamespaceShare*float64(d.nsTotal)/float64(k) + NamespaceSlack
			}
		}
	}
	pl.minLow = make([]float64, len(pl.groups)+1)
	for i := range pl.minLow {
		pl.minLow[i] = math.Inf(-1)
	}
}

// eligible says whether member m may hold partition p: a member of its
// pinned group, else a member of its domain.
func (pl *planner) eligible(m int, p int32) bool {
	if g := pl.pgrp[p]; g >= 0 {
		return pl.group[m] == g
	}
	return pl.mdom[m] == pl.pdom[p]
}

// eligibleMembers returns the members that may hold p.
func (pl *planner) eligibleMembers(p int32) []int32 {
	if pl.pgrp[p] < 0 {
		return pl.doms[pl.pdom[p]].members
	}
	var out []int32
	for _, m := range pl.doms[pl.pdom[p]].members {
		if pl.eligible(int(m), p) {
			out = append(out, m)
		}
	}
	return out
}

// capOK says whether m may receive p under the namespace-share cap of m's
// domain: a partition without namespaces, or a member holding none (a hot
// partition alone), is exempt.
func (pl *planner) capOK(m int, p int32) bool {
	if pl.nsp[p] == 0 || pl.nsm[m] == 0 {
		return true
	}
	return float64(pl.nsm[m]+pl.nsp[p]) <= pl.doms[pl.mdom[m]].cap
}

// assign makes m the target of p.
func (pl *planner) assign(p int32, m int, why Reason) {
	if pl.trace != nil {
		pl.trace(p, int(pl.owner[p]), m, why)
	}
	if o := pl.owner[p]; o >= 0 {
		pl.load[o] -= pl.cost[p]
		pl.nsm[o] -= pl.nsp[p]
		if pl.cost[p] > 0 {
			h := pl.held[o]
			i := slices.Index(h, p)
			h[i] = h[len(h)-1]
			pl.held[o] = h[:len(h)-1]
		}
	}
	pl.owner[p] = int32(m)
	pl.load[m] += pl.cost[p]
	pl.nsm[m] += pl.nsp[p]
	if pl.cost[p] > 0 {
		pl.held[m] = append(pl.held[m], p)
	}
	pl.reason[p] = why
	if int32(m) == pl.cur[p] {
		pl.reason[p] = ReasonNone
	}
}

// lowest returns the member of members with the least cost among those ok
// accepts (all when ok is nil), ties to the one earliest in p's preference
// order, then by index; -1 if none.
func (pl *planner) lowest(p int32, members []int32, ok func(m int) bool) int {
	best := -1
	var bestDist uint64
	for _, m32 := range members {
		m := int(m32)
		if ok != nil && !ok(m) {
			continue
		}
		switch {
		case best < 0 || pl.load[m] < pl.load[best]:
			best, bestDist = m, math.MaxUint64
		case pl.load[m] == pl.load[best]:
			if bestDist == math.MaxUint64 {
				bestDist = pl.b.Distance(best, partition.ID(p))
			}
			if d := pl.b.Distance(m, partition.ID(p)); d < bestDist {
				best, bestDist = m, d
			}
		}
	}
	return best
}

// isCooling says whether p was acquired less than the cooldown ago.
func (pl *planner) isCooling(p int32) bool { return pl.cooling != nil && pl.cooling[p] }

// afford says whether the round's budget allows moving p, and marks the
// budget exhausted when it does not. The round's first move is always
// allowed (within MaxMoves), so that a partition above the object or cost
// budget on its own is not stuck forever.
func (pl *planner) afford(p int32) bool {
	if pl.moves >= pl.prm.MaxMoves {
		pl.exhausted = true
		return false
	}
	if pl.moves == 0 {
		return true
	}
	d := &pl.doms[pl.pdom[p]]
	if pl.objMoved+2*pl.objs[p] > pl.prm.MaxObjects || d.costMoved+pl.cost[p] > pl.prm.MaxCostFraction*d.total {
		pl.exhausted = true
		return false
	}
	return true
}

// spend records a budgeted move of p.
func (pl *planner) spend(p int32) {
	pl.moves++
	pl.objMoved += 2 * pl.objs[p]
	pl.doms[pl.pdom[p]].costMoved += pl.cost[p]
}

// output builds the Output from the target.
func (pl *planner) output() Output {
	names := pl.b.Members()
	out := Output{Target: make([]string, pl.np), Reason: pl.reason, BudgetExhausted: pl.exhausted}
	for p, m := range pl.owner {
		if m >= 0 {
			out.Target[p] = names[m]
		}
	}
	hotOn := make([]bool, len(pl.mem))
	hot := make([]int, len(pl.doms))
	hotParts := make([][]partition.ID, len(pl.doms))
	for p := range pl.np {
		d := pl.pdom[p]
		if pl.isHot(int32(p)) {
			hot[d]++
			hotParts[d] = append(hotParts[d], partition.ID(p))
			if o := pl.owner[p]; o >= 0 && pl.mdom[o] == d {
				hotOn[o] = true
			}
		}
	}
	for i := range pl.doms {
		d := &pl.doms[i]
		if len(d.members) == 0 {
			continue // the default domain, with every member in a dedicated group: impossible (see domains)
		}
		st := DomainStat{Group: d.group, Members: len(d.members), Cost: d.total, Fair: d.fair, Hot: hot[i], UnsatisfiedPins: d.unsatisfied,
			HotPartitions: hotParts[i]}
		rest, restCost, busiest := 0, d.total, 0.0
		for _, m := range d.members { // by index: sorted by ID
			if hotOn[m] {
				st.Exclusive++
				st.ExclusiveMembers = append(st.ExclusiveMembers, names[m])
				restCost -= pl.load[m]
				continue
			}
			rest++
			busiest = max(busiest, pl.load[m])
		}
		if rest > 0 && restCost > 0 {
			st.SpreadFair = restCost / float64(rest)
			st.Imbalance = busiest / st.SpreadFair
		}
		out.Domains = append(out.Domains, st)
	}
	return out
}

// isHot says whether p carries the fair share within the margin: more than
// (1 − δ) × HotFactor × its domain's fair share F, or, isolated already (alone
// on its owner once membership and pins are placed), more than (1 − 2δ) × that.
//
// The entry threshold sits δ below F because the spread counts a member within
// F·(1+δ) as balanced: isolating a partition above (1 − δ)·F leaves the N − 1
// others a fair share F' of at most F·(1 + δ/(N−1)), which the spread then
// evens out around, while a shard sharing it has at most 2δ·F of room for
// anything else. And a
// namespace carrying exactly 1/N of N shards' work measures on either side of F
// (BenchmarkCapacitySkewed: 0.945–0.997 F), so a threshold at F isolates it in
// one round and spreads onto it in the next. The hysteresis below it keeps an
// isolated partition whose load hovers near the entry threshold from being
// isolated and spread onto again round after round.
func (pl *planner) isHot(p int32) bool {
	d := &pl.doms[pl.pdom[p]]
	if pl.cost[p] <= 0 || d.fair <= 0 {
		return false
	}
	return pl.cost[p] > HotThreshold(pl.prm, d.fair, pl.alone != nil && pl.alone[p])
}

// HotThreshold is the cost above which a partition is hot in a domain whose
// fair share is fair: (1 − δ) × HotFactor × fair, or (1 − 2δ) × that for a
// partition already alone on its owner (isHot says why). Exported so that the
// simulation's oracle applies the planner's rule rather than a copy of it.
func HotThreshold(p Params, fair float64, alone bool) float64 {
	p = p.WithDefaults()
	f := 1 - p.Margin
	if alone {
		f = 1 - 2*p.Margin
	}
	return f * p.HotFactor * fair
}

// markAlone records, for isHot, which partitions with namespaces are alone on
// their owner (it holds no other partition with namespaces) once membership and
// pins are placed, before hot isolation.
func (pl *planner) markAlone() {
	pl.alone = make([]bool, pl.np)
	for m := range pl.mem {
		var only int32 = -1
		n := 0
		for _, p := range pl.held[m] {
			if pl.nsp[p] > 0 {
				only = p
				n++
			}
		}
		if n == 1 {
			pl.alone[only] = true
		}
	}
}

// byCostDesc orders partitions by decreasing cost, ties by ID.
func (pl *planner) byCostDesc(a, b int32) int {
	if c := cmp.Compare(pl.cost[b], pl.cost[a]); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

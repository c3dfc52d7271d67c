package handoff

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Placement says how the coordinator computes targets (docs/design-placement.md §2.8).
type Placement string

const (
	// PlacementCount is ring.AssignFrom: equal partition counts, sticky. The default for
	// now, and the escape hatch once load placement is the default.
	PlacementCount Placement = "count"
	// PlacementLoad is balance.Plan: Membership plans on membership changes (cost spread
	// by namespaces and load, no member shed to a quota), plus Balance rounds when
	// BalanceConfig.Enabled.
	PlacementLoad Placement = "load"
)

// Defaults of BalanceConfig (docs/design-placement.md §2.5–2.8).
const (
	// DefaultBalanceInterval is the period of load rounds: long against the shards'
	// report interval (10s) and the load half-life (5m), so a round sees settled loads.
	DefaultBalanceInterval = time.Minute
	// DefaultBalanceWarmup is how long a new leader runs Membership plans only: every
	// shard has reported by then, and a failover moves nothing at once.
	DefaultBalanceWarmup = 2 * time.Minute
	// DefaultBalanceCooldown: a partition moved for load less than this ago is not moved
	// for load again, so that it cannot ping-pong between rounds (see cooling: a
	// partition given for membership or a pin does not cool).
	DefaultBalanceCooldown = 30 * time.Minute
	// DefaultMaxPartitionLoad (requests/s) is above what every controller client of a
	// shard can send at the default QPS, bursts included: a higher entry is absurd.
	DefaultMaxPartitionLoad = 1000
	// DefaultMaxShardLoad (requests/s): a report summing above it is absurd.
	DefaultMaxShardLoad = 2000
	// DefaultSaturationWait (seconds per second): a shard whose controller clients wait
	// this long in their rate limiters, on average two requests always waiting, is
	// saturated if it also waits SaturationMedianRatio × its group's median. The skewed
	// benchmark's unsaturated shards waited 0.2–0.9 s/s and its saturated one 9.2; the
	// capacity benchmark's busiest shards held the SLO at 2.8–4.8 s/s at capacity (run 6,
	// docs/performance.md): there, every shard waits alike and the median keeps them
	// unsaturated, since moving load cannot help a cluster busy as a whole.
	DefaultSaturationWait = 2.0
)

// BalanceConfig is Config.Balance: how targets are computed and how load rounds run.
type BalanceConfig struct {
	// Placement selects count or load placement; "" is PlacementCount.
	Placement Placement
	// Enabled runs load rounds (balance.Balance plans) on top of the membership plans;
	// only with PlacementLoad.
	Enabled bool
	// Interval is the period of load rounds; at least 2 × Load.ReportInterval, so that
	// every member has reported between two rounds.
	Interval time.Duration
	// Warmup is how long after leading the first round waits.
	Warmup time.Duration
	// Cooldown: a partition moved for load less than this ago (or, held before this
	// leader started, acquired less than this ago by its owner's report) is cooling: not
	// moved for load.
	Cooldown time.Duration
	// MaxPartitionLoad (requests/s): a report entry above it is absurd: dropped and
	// counted, the partition's previous load kept.
	MaxPartitionLoad float64
	// MaxShardLoad (requests/s): a report whose entries sum above it is absurd: dropped
	// whole and counted, the previous loads kept.
	MaxShardLoad float64
	// SaturationWait (seconds per second): a member whose last load report's rate-limiter
	// wait (LoadReport.LimiterWaitPermille) is at least this, and at least
	// SaturationMedianRatio × the median of its group's other members, is saturated
	// (balance.Member.Saturated) until its wait falls below half of this or
	// SaturationMedianExitRatio × that median: plans count its partitions
	// Params.SaturationFactor × their cost and move no load onto it.
	SaturationWait float64
	// Params are the plans' thresholds and budgets; zero fields take balance's defaults.
	Params balance.Params
}

// WithDefaults returns b with zero fields set to their defaults.
func (b BalanceConfig) WithDefaults() BalanceConfig {
	if b.Placement == "" {
		b.Placement = PlacementCount
	}
	if b.Interval == 0 {
		b.Interval = DefaultBalanceInterval
	}
	if b.Warmup == 0 {
		b.Warmup = DefaultBalanceWarmup
	}
	if b.Cooldown == 0 {
		b.Cooldown = DefaultBalanceCooldown
	}
	if b.MaxPartitionLoad == 0 {
		b.MaxPartitionLoad = DefaultMaxPartitionLoad
	}
	if b.MaxShardLoad == 0 {
		b.MaxShardLoad = DefaultMaxShardLoad
	}
	if b.SaturationWait == 0 {
		b.SaturationWait = DefaultSaturationWait
	}
	return b
}

// Validate reports an unusable balance configuration, naming the field; load is
// Config.Load, which rounds depend on. It does not apply defaults.
func (b BalanceConfig) Validate(load LoadSettings) error {
	var errs []error
	switch b.Placement {
	case PlacementCount, PlacementLoad:
	default:
		errs = append(errs, fmt.Errorf("placement %q must be %q or %q", b.Placement, PlacementCount, PlacementLoad))
	}
	if b.Interval <= 0 {
		errs = append(errs, fmt.Errorf("balance interval %v must be positive", b.Interval))
	}
	if b.Placement == PlacementLoad && b.Enabled {
		if load.ReportInterval <= 0 {
			errs = append(errs, errors.New("balance rounds need load reports (a positive load report interval)"))
		} else if b.Interval < 2*load.ReportInterval {
			errs = append(errs, fmt.Errorf("balance interval %v must be at least 2 × the load report interval %v", b.Interval, load.ReportInterval))
		}
	}
	if b.Warmup < 0 {
		errs = append(errs, fmt.Errorf("balance warmup %v must be ≥ 0", b.Warmup))
	}
	if b.Cooldown < 0 {
		errs = append(errs, fmt.Errorf("balance cooldown %v must be ≥ 0", b.Cooldown))
	}
	if v := b.MaxPartitionLoad; math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		errs = append(errs, fmt.Errorf("balance max partition load %v must be finite and positive", v))
	}
	if v := b.MaxShardLoad; math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		errs = append(errs, fmt.Errorf("balance max shard load %v must be finite and positive", v))
	}
	if v := b.SaturationWait; math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		errs = append(errs, fmt.Errorf("balance saturation wait %v must be finite and positive", v))
	}
	if err := b.Params.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RingResult is a computed target: what RingRequest.Compute returns and RingComputed
// applies.
type RingResult struct {
	// Target is the owner of every partition.
	Target []string
	// Reason is, per partition, why Target differs from the request's Current
	// (balance.ReasonNone where it does not); nil from a count placement, whose moves
	// are all membership moves.
	Reason []balance.Reason
	// Domains describes each placement domain (load placement only).
	Domains []balance.DomainStat
	// BudgetExhausted: a Balance plan left a move undone for its budget.
	BudgetExhausted bool
}

// Round outcomes (BalanceStats.Rounds keys), in the order of the outcome constants.
var roundOutcomeNames = [...]string{"balanced", "moved", "budget_exhausted", "incomplete_reports", "moving", "warmup"}

// roundOutcome indexes roundOutcomeNames.
type roundOutcome uint8

const (
	roundBalanced roundOutcome = iota
	roundMoved
	roundBudgetExhausted
	roundIncompleteReports
	roundMoving
	roundWarmup
	numRoundOutcomes
)

// Rejected-report reasons (BalanceStats.ReportsRejected keys).
const (
	rejectAbsurd = iota
	rejectNotHeld
	rejectEarly
	numReportRejects
)

var reportRejectNames = [numReportRejects]string{"absurd", "not_held", "early"}

// numMoveReasons covers balance.Reason's values (ReasonNone to ReasonLoad).
const numMoveReasons = int(balance.ReasonLoad) + 1

// BalanceStats are the balancer's counters and gauges (Stats.Balance), for the
// coordinator's metrics.
type BalanceStats struct {
	// Rounds counts load rounds by outcome: balanced, moved, budget_exhausted (a plan
	// applied), incomplete_reports, moving, warmup (a round due but skipped).
	Rounds map[string]uint64
	// Moves counts moves by reason (membership, pin, hot, load) when they start.
	Moves map[string]uint64
	// Domains describes the placement domains of the last applied load plan.
	Domains []balance.DomainStat
	// ReportsRejected counts rejected load reports and entries by reason: absurd (an
	// entry, or a whole report, above the bounds), not_held (an entry for a partition
	// the shard does not hold), early (a whole report sooner than half the cadence after
	// the shard's previous one).
	ReportsRejected map[string]uint64
	// Suspects is the number of members whose reports are not trusted now (they get no
	// load or hot moves; SuspectFraction).
	Suspects int
	// Saturated is the number of members saturated now (SaturationWait).
	Saturated int
}

// balanceState is the coordinator's load table and round schedule. The per-partition
// slices are nil until the first load report, or acquisition under load placement: a
// coordinator that sees none (count placement without reports) carries nothing.
type balanceState struct {
	load       []float32   // L(p), requests/s, of the last accepted entry (see effective)
	objects    []uint32    // O(p)
	loadSeq    []uint64    // the report that sent p's last entry (kept, or dropped as absurd)
	reports    uint64      // load reports taken (not dropped whole), numbering them
	reportCool []time.Time // cooling until, from the reported age (capped at leader start + Cooldown); only for partitions this leader did not give
	ackedAt    []time.Time // when this leader saw p acquired after a move for load (reason load or hot); zero otherwise
	// grantedFor is why this leader gave p to its current owner (the reason of the move
	// or grant), ReasonNone when it did not: the owner held p before this leader started,
	// and only its reported age says how long ago p moved.
	grantedFor []balance.Reason
	probes     map[int]loadProbe // by partition: a load move's check of its receiver's reports
	namespaces []uint32          // N(p) from SetNamespaces; nil: none
	pins       []string          // from SetPins; nil: none

	reason  []balance.Reason // of the applied target; nil: every move is a membership move
	domains []balance.DomainStat

	nextRound time.Time

	rounds   [numRoundOutcomes]uint64
	moves    [numMoveReasons]uint64
	rejected [numReportRejects]uint64

	waits waitIndex // the saturation rule's per-group waits
}

// The suspect rule (docs/design-placement.md §1.5): a member that received a partition
// for load (reason hot or load) and, SuspectProbeHalfLives load half-lives after the move,
// reports it below SuspectFraction of what its donor reported is suspect for SuspectFor:
// no load or hot move goes to it. It bounds a shard that reports 0 to look idle and pull
// partitions (its write scope); an honest tenant going idle freezes its shard for an hour,
// which costs nothing.
const (
	SuspectProbeHalfLives = 3
	SuspectFraction       = 0.25
	SuspectFor            = time.Hour
)

// loadProbe is the pending suspect check of a partition moved for load.
type loadProbe struct {
	to    string
	inc   uint64
	donor float32 // the load the donor last reported
	due   time.Time
}

// probeMove arms the suspect check of p, whose move mv just completed to its destination
// (and drops any older one: p has a new owner).
func (c *Coordinator) probeMove(p int, mv *move, now time.Time) {
	if c.bal.probes == nil {
		if c.bal.load == nil {
			return
		}
		c.bal.probes = map[int]loadProbe{}
	}
	delete(c.bal.probes, p)
	if donor := c.bal.load[p]; (mv.reason == balance.ReasonHot || mv.reason == balance.ReasonLoad) && donor > 0 && c.cfg.Load.HalfLife > 0 {
		c.bal.probes[p] = loadProbe{to: mv.to, inc: mv.toInc, donor: donor, due: now.Add(SuspectProbeHalfLives * c.cfg.Load.HalfLife)}
	}
}

// checkProbes runs the suspect checks of m that are due against its report r (a
// partition left out reports 0). Probes are few: the load moves of the last 3 half-lives.
func (c *Coordinator) checkProbes(m *member, r *LoadReport, now time.Time) {
	for p, pb := range c.bal.probes {
		if pb.to != m.id || now.Before(pb.due) {
			continue
		}
		delete(c.bal.probes, p)
		if pb.inc != m.session.Incarnation {
			continue
		}
		load := float32(0)
		for _, e := range r.Partitions {
			if int(e.Partition) == p {
				load = float32(e.LoadMilli) / 1000
			}
		}
		if load < SuspectFraction*pb.donor {
			m.suspectUntil = now.Add(SuspectFor)
		}
	}
}

// saturated says whether m is saturated (updateSaturation); never under placement by
// count, which has no costs to scale.
func (c *Coordinator) saturated(m *member) bool {
	return m != nil && m.saturated && c.cfg.Balance.Placement == PlacementLoad
}

// suspect says whether m's reports are not trusted now.
func (c *Coordinator) suspect(m *member, now time.Time) bool {
	return m != nil && now.Before(m.suspectUntil)
}

// loadPlacement says whether targets are computed by balance.Plan.
func (c *Coordinator) loadPlacement() bool { return c.cfg.Balance.Placement == PlacementLoad }

// tables allocates the per-partition load table on first use.
func (c *Coordinator) tables() {
	if c.bal.load != nil {
		return
	}
	n := len(c.parts)
	c.bal.load = make([]float32, n)
	c.bal.objects = make([]uint32, n)
	c.bal.loadSeq = make([]uint64, n)
	c.bal.reportCool = make([]time.Time, n)
	c.bal.ackedAt = make([]time.Time, n)
	c.bal.grantedFor = make([]balance.Reason, n)
}

// given records that this leader gave p to its current owner for reason (ReasonNone is
// taken as membership). Whether p cools once acquired follows from it (see cooling).
func (c *Coordinator) given(p int, reason balance.Reason) {
	if c.bal.load == nil && !c.loadPlacement() {
		return
	}
	c.tables()
	if reason == balance.ReasonNone {
		reason = balance.ReasonMembership
	}
	c.bal.grantedFor[p] = reason
}

// acquiredAt records that p's owner confirmed it at now: a partition this leader moved
// for load (load or hot) cools from now; one it gave for membership or a pin starts no
// cooldown (a cold start or a rollout of the shards gives every partition, and the
// cooldown is there to stop load moves from undoing each other, not to freeze the first
// rounds) but keeps the one of its last load move (a load move, its shard leaving, then a
// load move again would undo each other within it); one it did not give cools by its
// owner's reported age. A leader after the first term (a failover, a restart of the
// coordinators) does not know which partitions an earlier leader moved for load lately,
// and a membership move resets the age their owners report: in its first cooldown, what
// it gives for membership cools too. Only the first leader of an install skips that.
func (c *Coordinator) acquiredAt(p int, now time.Time) {
	if c.bal.load == nil && !c.loadPlacement() {
		return
	}
	c.tables()
	switch c.bal.grantedFor[p] {
	case balance.ReasonNone:
		return
	case balance.ReasonLoad, balance.ReasonHot:
		c.bal.ackedAt[p] = now
	default:
		if c.term > 1 && now.Before(c.startedAt.Add(c.cfg.Balance.Cooldown)) {
			c.bal.ackedAt[p] = now
		}
	}
	c.bal.reportCool[p] = time.Time{}
}

// SetNamespaces gives the number of namespaces in each partition (from the edge's own
// Namespace informer, never from shards: it is what the namespace-share cap counts, so
// a shard cannot forge it). counts must have one entry per partition, else it is
// ignored; it is copied. It takes effect at the next plan.
func (c *Coordinator) SetNamespaces(now time.Time, counts []uint32) {
	c.observe(now)
	if len(counts) != len(c.parts) {
		return
	}
	c.bal.namespaces = slices.Clone(counts)
}

// SetPins gives the group each partition is pinned to ("" for none), or nil for no
// pins. A non-nil pins must have one entry per partition, else it is ignored; it is
// copied. It takes effect at the next plan (a pinned orphan at once, a pinned partition
// held elsewhere at the next load round).
func (c *Coordinator) SetPins(now time.Time, pins []string) {
	c.observe(now)
	if pins != nil && len(pins) != len(c.parts) {
		return
	}
	if !slices.ContainsFunc(pins, func(s string) bool { return s != "" }) {
		c.bal.pins = nil
		return
	}
	c.bal.pins = slices.Clone(pins)
}

// PartitionLoad returns what the coordinator knows of p's load: its last accepted load
// (requests/s), its objects, and whether it is cooling (acquired less than
// Config.Balance.Cooldown ago). Zero for a partition out of range or never reported.
func (c *Coordinator) PartitionLoad(p partition.ID) (load float64, objects uint32, cooling bool) {
	if int(p) >= len(c.parts) || c.bal.load == nil {
		return 0, 0, false
	}
	l, o := c.effective(int(p))
	return float64(l), o, c.cooling(int(p), c.now)
}

// PartitionHot says whether p is hot as of the last load plan: the plan's own decision
// (balance.DomainStat.HotPartitions, what kshard_coordinator_hot_partitions counts), not
// the hot rule applied again to the loads of now. False without a load plan (count
// placement, or a leader before its first target).
func (c *Coordinator) PartitionHot(p partition.ID) bool {
	for _, d := range c.bal.domains {
		if _, ok := slices.BinarySearch(d.HotPartitions, p); ok {
			return true
		}
	}
	return false
}

// exclusive says whether member id holds a hot partition as of the last load plan
// (balance.DomainStat.ExclusiveMembers).
func (c *Coordinator) exclusive(id string) bool {
	for _, d := range c.bal.domains {
		if _, ok := slices.BinarySearch(d.ExclusiveMembers, id); ok {
			return true
		}
	}
	return false
}

// PartitionCost is one partition of CostliestPartitions.
type PartitionCost struct {
	Partition partition.ID
	// Owner is its owner now ("" for nobody).
	Owner string
	// Cost is its cost as the balancer takes it (balance.Costs: its load plus a base per
	// namespace); Load and Objects are what PartitionLoad returns, Namespaces the count
	// SetNamespaces gave.
	Cost       float64
	Load       float64
	Objects    uint32
	Namespaces uint32
	// Hot: as of the last load plan (PartitionHot).
	Hot bool
	// LastMove is why this leader gave the partition to Owner (membership, pin, hot,
	// load); balance.ReasonNone when it did not (Owner held it before this leader
	// started, by its hello) or nobody owns it.
	LastMove balance.Reason
}

// CostliestPartitions returns the (at most) n partitions of highest cost, costliest
// first, ties by partition ID. Partitions of cost 0 (neither load nor namespace: the
// empty class) are left out. nil without loads or namespace counts.
//
// The edge calls it under the lock every heartbeat needs, for each GET
// /assignments?loads=true: balance.Costliest ranks the partitions where they are, so it
// allocates in proportion to n, never a copy of every partition. Costs are as measured:
// a saturated owner's factor (balance.Params.SaturationFactor), which plans apply, is
// not in them.
func (c *Coordinator) CostliestPartitions(n int) []PartitionCost {
	if n <= 0 || (c.bal.load == nil && c.bal.namespaces == nil) {
		return nil
	}
	ns := func(p int) uint32 {
		if c.bal.namespaces == nil {
			return 0
		}
		return c.bal.namespaces[p]
	}
	load := func(p int) (float32, uint32) {
		if c.bal.load == nil {
			return 0, 0
		}
		return c.effective(p)
	}
	top := balance.Costliest(n, len(c.parts), func(p int) float32 { l, _ := load(p); return l }, ns)
	out := make([]PartitionCost, len(top))
	for i, e := range top {
		l, o := load(e.Partition)
		pc := PartitionCost{Partition: partition.ID(e.Partition), Owner: c.parts[e.Partition].owner, Cost: float64(e.Cost), Load: float64(l),
			Objects: o, Namespaces: ns(e.Partition), Hot: c.PartitionHot(partition.ID(e.Partition))}
		if pc.Owner != "" && c.bal.grantedFor != nil {
			pc.LastMove = c.bal.grantedFor[e.Partition]
		}
		out[i] = pc
	}
	return out
}

// effective returns p's load and objects as the balancer takes them: the last entry for
// p, unless p's owner has reported since without it (a held partition left out of a
// report carries no load). Computed when read, so that a report costs its entries, not
// a walk of every partition: at 1,000 shards reporting every 10s and 65,536 partitions
// such a walk per report would read the partition table 100 times a second.
func (c *Coordinator) effective(p int) (float32, uint32) {
	pr := &c.parts[p]
	if m := c.members[pr.owner]; m != nil && m.session.Incarnation == pr.ownerInc && m.loadTableSeq > c.bal.loadSeq[p] {
		return 0, 0
	}
	return c.bal.load[p], c.bal.objects[p]
}

// loads returns every partition's effective load and objects (copies), nil without a
// load table.
func (c *Coordinator) loads() ([]float32, []uint32) {
	if c.bal.load == nil {
		return nil, nil
	}
	load, objects := make([]float32, len(c.parts)), make([]uint32, len(c.parts))
	for p := range c.parts {
		load[p], objects[p] = c.effective(p)
	}
	return load, objects
}

// cooling says whether p moved for load less than the cooldown ago, by this leader's own
// observation (see acquiredAt), or, for a partition its owner held before this leader
// started, was acquired less than the cooldown ago by the age its owner reported, which
// is capped at leader start + Cooldown so that a shard lying about ages cannot keep a
// partition cooling for ever.
func (c *Coordinator) cooling(p int, now time.Time) bool {
	if c.bal.load == nil {
		return false
	}
	if at := c.bal.ackedAt[p]; !at.IsZero() && now.Before(at.Add(c.cfg.Balance.Cooldown)) {
		return true
	}
	return now.Before(c.bal.reportCool[p])
}

// moveReason is why p's move toward its target starts: the applied plan's reason, or
// membership when the plan gave none (count placement).
func (c *Coordinator) moveReason(p int) balance.Reason {
	if c.bal.reason != nil && c.bal.reason[p] != balance.ReasonNone {
		return c.bal.reason[p]
	}
	return balance.ReasonMembership
}

// balanceStats builds Stats.Balance.
func (c *Coordinator) balanceStats() BalanceStats {
	s := BalanceStats{
		Rounds:          map[string]uint64{},
		Moves:           map[string]uint64{},
		ReportsRejected: map[string]uint64{},
		Domains:         slices.Clone(c.bal.domains),
	}
	for i, n := range c.bal.rounds {
		if n > 0 {
			s.Rounds[roundOutcomeNames[i]] = n
		}
	}
	for i, n := range c.bal.moves {
		if n > 0 {
			s.Moves[balance.Reason(i).String()] = n
		}
	}
	for i, n := range c.bal.rejected {
		if n > 0 {
			s.ReportsRejected[reportRejectNames[i]] = n
		}
	}
	for _, id := range c.ids {
		if c.suspect(c.members[id], c.now) {
			s.Suspects++
		}
		if c.saturated(c.members[id]) {
			s.Saturated++
		}
	}
	return s
}

// planInput builds balance.Plan's input (besides Ring, Current and Kind, which the
// request carries) for members and current, under the lock: O(P) copies. A member is
// New when it was not in the applied member set or, on a first target (a new leader),
// when it holds nothing, so that a new leader's first target is Plan's fixed point and
// moves nothing.
func (c *Coordinator) planInput(members, current []string, round bool, now time.Time) *balance.Input {
	in := &balance.Input{Params: c.cfg.Balance.Params, Members: make([]balance.Member, len(members))}
	var holds map[string]bool
	if c.target == nil {
		holds = map[string]bool{}
		for _, o := range current {
			if o != "" {
				holds[o] = true
			}
		}
	}
	for i, id := range members {
		isNew := false
		if holds != nil {
			isNew = !holds[id]
		} else {
			_, found := slices.BinarySearch(c.applied, id)
			isNew = !found
		}
		in.Members[i] = balance.Member{ID: id, Group: c.groupOf(id), New: isNew, Suspect: c.suspect(c.members[id], now), Saturated: c.saturated(c.members[id])}
	}
	load, objects := c.loads()
	if load != nil || c.bal.namespaces != nil {
		in.Cost = balance.Costs(load, c.bal.namespaces)
	}
	in.Objects = objects
	if c.bal.namespaces != nil {
		in.Namespaces = slices.Clone(c.bal.namespaces)
	}
	if c.bal.pins != nil {
		in.Pin = slices.Clone(c.bal.pins)
	}
	if round && c.bal.load != nil {
		in.Cooling = make([]bool, len(c.parts))
		for p := range in.Cooling {
			in.Cooling[p] = c.cooling(p, now)
		}
	}
	return in
}

// applyPlan records what an applied target brings besides the target: the reasons its
// moves start with, the domains, and a load round's outcome. err is the computation's
// (the target is then the old one or empty, with no reasons).
func (c *Coordinator) applyPlan(req *RingRequest, res RingResult, err error) {
	c.bal.reason = nil
	if err != nil {
		return
	}
	if len(res.Reason) == len(c.parts) {
		c.bal.reason = slices.Clone(res.Reason)
	}
	if req.plan == nil {
		return
	}
	c.bal.domains = slices.Clone(res.Domains)
	if req.Kind != balance.Balance {
		return
	}
	outcome := roundBalanced
	switch {
	case res.BudgetExhausted:
		outcome = roundBudgetExhausted
	case slices.ContainsFunc(c.bal.reason, func(r balance.Reason) bool { return r != balance.ReasonNone }):
		outcome = roundMoved
	case c.bal.reason == nil && !slices.Equal(res.Target, req.Current):
		outcome = roundMoved
	}
	c.bal.rounds[outcome]++
}

// balanceRound asks for a load round (a Balance plan of the applied members) when one
// is due: with load placement and rounds enabled, once per Interval, when a target
// exists, membership is settled and no target is being computed. A due round is
// skipped, and counted by why, while the leader warms up (Warmup after it started),
// while moves are in flight, or while a member has not reported its load within 3 ×
// Load.ReportInterval.
func (c *Coordinator) balanceRound(now time.Time) {
	b := &c.cfg.Balance
	if b.Placement != PlacementLoad || !b.Enabled || c.target == nil || c.dirty || c.ringReq != nil || now.Before(c.bal.nextRound) {
		return
	}
	c.bal.nextRound = now.Add(b.Interval)
	switch {
	case now.Before(c.startedAt.Add(b.Warmup)):
		c.bal.rounds[roundWarmup]++
		return
	case c.movesInFlight > 0 || !c.Converged():
		// Not only moves in flight: a move the target asks for that has not started
		// (MaxConcurrentMoves, a partition waiting for its stale owners) would be planned
		// over, from owners it is about to change. step runs the round before plan.
		c.bal.rounds[roundMoving]++
		return
	case !c.reportsComplete(now):
		c.bal.rounds[roundIncompleteReports]++
		return
	}
	c.ringGen++
	c.ringReq = &RingRequest{Gen: c.ringGen, Members: slices.Clone(c.applied), Current: c.currentOwners(), Kind: balance.Balance, ring: c.ring}
	c.ringReq.plan = c.planInput(c.ringReq.Members, c.ringReq.Current, true, now)
	c.ringTaken = false
	c.stats.RingRequests++
	c.computeInline(now)
}

// reportsComplete says whether every applied member sent a load report within 3 ×
// Load.ReportInterval: a round on missing loads would take a silent member for idle.
func (c *Coordinator) reportsComplete(now time.Time) bool {
	window := 3 * c.cfg.Load.ReportInterval
	if window <= 0 {
		return false
	}
	for _, id := range c.applied {
		m := c.members[id]
		if m == nil || m.loadAt.IsZero() || now.Sub(m.loadAt) > window {
			return false
		}
	}
	return true
}

// earlyReport says whether a load report of m at now comes sooner than half the cadence
// the Welcome set (LoadSettings.Cadence) after m's previous one in this session: an
// honest shard sends one every cadence (the first after each Welcome at once), jitter far
// below half of it.
func (c *Coordinator) earlyReport(m *member, now time.Time) bool {
	cadence := c.cfg.Load.Cadence(c.cfg.HeartbeatInterval)
	return m.loadSinceWelcome && cadence > 0 && now.Sub(m.loadAt) < cadence/2
}

// loadReport takes a member's load report (docs/design-placement.md §1.5, as fixed by
// the S4 contract). It never refuses anything: the heartbeat that carries it is
// acknowledged whatever it claims. A report whose entries sum above MaxShardLoad is
// absurd and dropped whole; an entry above MaxPartitionLoad is absurd and dropped; an
// entry for a partition the member does not hold (owner at this incarnation, acked or
// acquiring, moving away or not) is ignored, an honest race with a release. Each is
// counted. Otherwise the report replaces the loads and objects of the member's held
// partitions; a held partition missing from it carries no load.
func (c *Coordinator) loadReport(m *member, r *LoadReport, now time.Time) {
	c.tables()
	b := &c.cfg.Balance
	sum := 0.0
	for _, e := range r.Partitions {
		sum += float64(e.LoadMilli) / 1000
	}
	if sum > b.MaxShardLoad {
		c.bal.rejected[rejectAbsurd]++
		return
	}
	m.limiterWait = r.LimiterWaitPermille
	c.updateSaturation(m, now)
	inc := m.session.Incarnation
	c.bal.reports++
	m.loadTableSeq = c.bal.reports // held partitions left out carry no load from now (effective)
	for _, e := range r.Partitions {
		p := int(e.Partition)
		if p >= len(c.parts) || c.parts[p].owner != m.id || c.parts[p].ownerInc != inc {
			c.bal.rejected[rejectNotHeld]++
			continue
		}
		c.bal.loadSeq[p] = c.bal.reports
		l := float64(e.LoadMilli) / 1000
		if l > b.MaxPartitionLoad {
			c.bal.rejected[rejectAbsurd]++
			continue // the previous load is kept
		}
		c.bal.load[p] = float32(l)
		c.bal.objects[p] = e.Objects
		if c.bal.grantedFor[p] != balance.ReasonNone {
			continue // this leader knows why p moved (acquiredAt)
		}
		// Cooling from the reported age, never past leader start + Cooldown: a shard
		// reporting every age as 0 freezes its partitions for one cooldown at most.
		until := now.Add(-time.Duration(e.AgeSeconds) * time.Second).Add(b.Cooldown)
		if limit := c.startedAt.Add(b.Cooldown); until.After(limit) {
			until = limit
		}
		c.bal.reportCool[p] = until
	}
	c.checkProbes(m, r, now)
}

// memberLoads returns each owner's cost as the balancer sees it (balance.Costs of the
// load table and the namespace counts), nil when there is neither.
func (c *Coordinator) memberLoads() map[string]float64 {
	if c.bal.load == nil && c.bal.namespaces == nil {
		return nil
	}
	load, _ := c.loads()
	cost := balance.Costs(load, c.bal.namespaces)
	out := map[string]float64{}
	for p := range c.parts {
		if o := c.parts[p].owner; o != "" && p < len(cost) {
			out[o] += float64(cost[p])
		}
	}
	return out
}

package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Durations of the scenarios with loads.
const (
	// skewSteadyFor is how long SkewSteady runs; its last quietFor must see at most one
	// load move (none without noise).
	skewSteadyFor = 20 * time.Minute
	quietFor      = 10 * time.Minute
	// liarFor is how long the Liar scenario runs.
	liarFor = 5 * time.Minute
	// stableFor: a scenario's action (a load shift, a leader change, a join or a leave)
	// comes once the balancer has been balanced and moved nothing for this long.
	stableFor = 2 * balanceInterval
	// balanceCheckEvery is how often the balance checks sample the cluster.
	balanceCheckEvery = 2 * time.Second
	// suspectAfter bounds when a shard that reports 0 for a partition moved to it
	// for load is suspect after the move started: the handoff, the three half-lives
	// of handoff.SuspectProbeHalfLives, its next report and a round already in
	// flight.
	suspectAfter = 2*time.Second + 3*loadHalfLife + loadReportInterval + balanceInterval + maxRingDelay
	// settleFor is how long the load averages take to follow a change of the true
	// load closely enough to plan by (1.6 % left after 6 half-lives).
	settleFor = 6 * loadHalfLife
)

// moveRec is one move the leader started, with its reason.
type moveRec struct {
	at       time.Duration
	p        partition.ID
	from, to string
	reason   balance.Reason
}

// balanceState is what the checks of the runs with loads keep.
type balanceState struct {
	// balancing: the cluster converged once; from now on the balancer may move
	// partitions, so a partition may be unworked for a warm handoff's gap at most.
	balancing bool
	// lastLoadMove holds when each partition's last load move (reason hot or load)
	// started.
	lastLoadMove map[partition.ID]time.Duration
	moves        []moveRec
	// balancedSince: since when the cluster has been balanced (-1: not balanced);
	// balancedAt: when it first was in this phase (-1: not yet).
	balancedSince, balancedAt time.Duration
	phaseStart                time.Duration
	// phaseBound: balanced within this after phaseStart.
	phaseBound time.Duration
	// actionDone: the scenario's action (shift, leader change, join, leave) happened.
	actionDone bool
	// phi: Σ cost(m)² of the target after each applied Balance round, with when.
	phi []phiRec
	// leaderStart: when the current leader was elected (true time).
	leaderStart time.Duration
	// shiftNeighbours: at the load shift, the partitions with namespaces the new hot
	// partition's owner held besides it (what isolating it must move).
	shiftNeighbours int
	// actionMoves: len(moves) when the scenario's action began.
	actionMoves int
	// lastWhy is the last verdict of balanced, traced when it changes.
	lastWhy string
	// rounds counts the Balance plans the current leader applied.
	rounds int
	// lastGranular: balanced's last verdict was "balanced" only because no move the
	// rules allow could lower the busiest member.
	lastGranular bool
	// gapBefore is the longest gap before the scenario's action (LeaderChange wants
	// none after it).
	gapBefore time.Duration
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type phiRec struct {
	at  time.Duration
	phi float64
}

// setupLoads configures the coordinator for placement by load and draws the loads.
func (w *world) setupLoads(initial int) {
	w.load = w.newLoadModel(initial)
	w.cfg.Load = handoff.LoadSettings{ReportInterval: loadReportInterval, HalfLife: loadHalfLife, ReconcileWeight: reconcileWeight}
	w.cfg.Balance = handoff.BalanceConfig{
		Placement:        handoff.PlacementLoad,
		Enabled:          true,
		Interval:         balanceInterval,
		Warmup:           balanceWarmup,
		Cooldown:         balanceCooldown,
		MaxPartitionLoad: maxPartitionLoad,
		MaxShardLoad:     maxShardLoad,
	}
	w.bal = balanceState{lastLoadMove: map[partition.ID]time.Duration{}, balancedSince: -1, balancedAt: -1}
	w.res.MovesByReason = map[string]uint64{}
}

// leaderLoads plays the edge's namespace informer: synced before the leader leads, so
// the leader has every partition's namespace count from its start.
func (w *world) leaderLoads(n *coordNode) {
	if w.load == nil {
		return
	}
	n.c.SetNamespaces(n.clk.at(w.now), slices.Clone(w.load.namespaces))
	w.bal.leaderStart = w.now
	w.bal.rounds = 0
}

// recordMove counts a move the leader started, by reason, and checks that no
// partition moves for load or a pin twice within the cooldown (a hot move, off a
// shard that turned hot, may follow another move within it: balance's hot step).
func (w *world) recordMove(ev handoff.Event) error {
	if w.load == nil {
		return nil
	}
	w.res.MovesByReason[ev.Reason.String()]++
	w.bal.moves = append(w.bal.moves, moveRec{at: w.now, p: ev.Partition, from: ev.From, to: ev.Shard, reason: ev.Reason})
	switch ev.Reason {
	case balance.ReasonHot, balance.ReasonLoad, balance.ReasonPin:
		w.res.LoadMoves++
	default:
		return nil
	}
	// The cooldown runs from the acquisition the shard reports (its age, in whole
	// seconds of its clock, whose rate is off by up to drift), so allow for both.
	if last, ok := w.bal.lastLoadMove[ev.Partition]; ok && ev.Reason != balance.ReasonHot && w.now-last < time.Duration(float64(balanceCooldown)*(1-2*drift)) {
		return w.violation("partition %d moved for load twice within the cooldown: at %.3fs and now (%s → %s, %s)",
			ev.Partition, last.Seconds(), ev.From, ev.Shard, ev.Reason)
	}
	w.bal.lastLoadMove[ev.Partition] = w.now
	return nil
}

// ringApplied runs after the leader took a computed target: for a Balance round it
// records Σ cost(m)² of the target, the potential every load move lowers.
func (w *world) ringApplied(n *coordNode, kind balance.Kind) {
	if w.load == nil || kind != balance.Balance {
		return
	}
	w.bal.rounds++
	costs := w.load.costs(w.now)
	per := map[string]float64{}
	for _, a := range n.c.Assignments() {
		owner := a.Target
		if owner == "" {
			owner = a.Owner
		}
		per[owner] += costs[a.Partition]
	}
	phi := 0.0
	for _, c := range per {
		phi += c * c
	}
	w.bal.phi = append(w.bal.phi, phiRec{at: w.now, phi: phi})
}

// view is the cluster as the balance checks see it: per member its partitions and
// cost, who is exclusive (holds a hot partition), and the spread figures.
type view struct {
	members    []string
	owned      map[string][]int
	cost       map[string]float64 // by the costs given
	ns         map[string]uint32
	total      float64
	fair       float64
	exclusive  map[string]bool
	hot        []int
	spreadFair float64
	busiest    string
	least      string
}

// newView computes the view of the current owners with costs.
func (w *world) newView(n *coordNode, costs []float64) view {
	v := view{owned: map[string][]int{}, cost: map[string]float64{}, ns: map[string]uint32{}, exclusive: map[string]bool{}}
	for _, m := range n.c.Members() {
		if !m.Leaving {
			v.members = append(v.members, m.ID)
		}
	}
	for _, a := range n.c.Assignments() {
		v.owned[a.Owner] = append(v.owned[a.Owner], int(a.Partition))
		v.cost[a.Owner] += costs[a.Partition]
		v.ns[a.Owner] += w.load.namespaces[a.Partition]
		v.total += costs[a.Partition]
	}
	if len(v.members) == 0 {
		return v
	}
	v.fair = v.total / float64(len(v.members))
	excl := 0.0
	for _, m := range v.members {
		// The planner's rule (balance.HotThreshold), with its hysteresis: a partition
		// alone among its owner's partitions with namespaces stays hot to a lower cost.
		withNS := 0
		for _, p := range v.owned[m] {
			if w.load.namespaces[p] > 0 {
				withNS++
			}
		}
		for _, p := range v.owned[m] {
			alone := withNS == 1 && w.load.namespaces[p] > 0
			if costs[p] > balance.HotThreshold(balance.Params{}, v.fair, alone) {
				v.hot = append(v.hot, p)
				if !v.exclusive[m] {
					v.exclusive[m] = true
					excl += v.cost[m]
				}
			}
		}
	}
	if rest := len(v.members) - len(v.exclusive); rest > 0 {
		v.spreadFair = (v.total - excl) / float64(rest)
	}
	for _, m := range v.members {
		if v.exclusive[m] {
			continue
		}
		if v.busiest == "" || v.cost[m] > v.cost[v.busiest] {
			v.busiest = m
		}
		if v.least == "" || v.cost[m] < v.cost[v.least] {
			v.least = m
		}
	}
	return v
}

// imbalance is the busiest non-exclusive member's cost over their fair share.
func (v view) imbalance() float64 {
	if v.busiest == "" || v.spreadFair <= 0 {
		return 1
	}
	return v.cost[v.busiest] / v.spreadFair
}

// seenCosts returns the costs the leader places by: the loads it accepted and the
// namespace counts it was given.
func (w *world) seenCosts(n *coordNode) ([]float64, []bool) {
	loads := make([]float32, w.p)
	cooling := make([]bool, w.p)
	for p := range w.p {
		l, _, c := n.c.PartitionLoad(partition.ID(p))
		loads[p], cooling[p] = float32(l), c
	}
	c32 := balance.Costs(loads, w.load.namespaces)
	out := make([]float64, w.p)
	for p, c := range c32 {
		out[p] = float64(c)
	}
	return out, cooling
}

// balanced checks the leader's placement in its own view: every member holding a hot
// partition holds no other partition with a namespace (unless there are more hot
// partitions than members), and the busiest other member is within F'·(1+δ) of their
// fair share, or no move the balancer's rules allow could lower it because its
// partitions are too coarse to fit a receiver. A legal move waiting for a partition to
// cool, or partitions each below the min gain that together would balance it, leave it
// unbalanced. It returns "" when balanced, else why not.
func (w *world) balanced(n *coordNode) string {
	w.bal.lastGranular = false
	if !w.placed(n) {
		return "not converged"
	}
	if w.bal.rounds == 0 {
		// Before its first round the leader knows no load: it placed by namespaces.
		return "no load round yet"
	}
	costs, cooling := w.seenCosts(n)
	v := w.newView(n, costs)
	if len(v.hot) < len(v.members) {
		for m := range v.exclusive {
			for _, p := range v.owned[m] {
				if w.load.namespaces[p] > 0 && !slices.Contains(v.hot, p) {
					return fmt.Sprintf("%s holds a hot partition and partition %d with %d namespaces", m, p, w.load.namespaces[p])
				}
			}
		}
	}
	delta := balance.DefaultMargin
	if v.busiest == "" || v.imbalance() <= 1+delta || v.cost[v.busiest] <= balance.DefaultMinLoad {
		return ""
	}
	// Above the trigger: is there a move the rules allow (§2.5 step 7)?
	b, r := v.cost[v.busiest], v.cost[v.least]
	fp := v.spreadFair
	capNs := balance.DefaultMaxNamespaceShare*float64(w.nsTotal())/float64(len(v.members)) + balance.NamespaceSlack
	minGainBlocked := 0.0
	for _, p := range v.owned[v.busiest] {
		c := costs[p]
		if c > 0 && c < balance.DefaultMinGain*fp && r+c <= fp*(1+delta/2) && !cooling[p] {
			minGainBlocked += c
		}
		if c <= 0 || c < balance.DefaultMinGain*fp || r+c > fp*(1+delta/2) || r+c >= b {
			continue
		}
		if float64(v.ns[v.least]+w.load.namespaces[p]) > capNs && v.ns[v.least] > 0 {
			continue
		}
		if cooling[p] {
			// Not balanced yet: the balancer waits for the cooldown.
			return fmt.Sprintf("busiest %s at %.3f × F' waits for partition %d to cool", v.busiest, v.imbalance(), p)
		}
		return fmt.Sprintf("busiest %s at %.3f × F' (cost %.2f, F' %.2f) could give partition %d (cost %.2f) to %s (cost %.2f)",
			v.busiest, v.imbalance(), b, fp, p, c, v.least, r)
	}
	if minGainBlocked >= b-fp*(1+delta/2) {
		return fmt.Sprintf("MINGAIN busiest %s at %.3f × F' (cost %.2f, F' %.2f): its partitions below the min gain (%.2f) carry %.2f, enough to balance",
			v.busiest, v.imbalance(), b, fp, balance.DefaultMinGain*fp, minGainBlocked)
	}
	w.bal.lastGranular = true
	return ""
}

// placed is isConverged but for a target being computed (a load round asks for one
// every balanceInterval): every partition is owned, confirmed, at its target and
// worked by its owner, and the members are the live shards.
func (w *world) placed(n *coordNode) bool {
	if n.c.Converged() {
		return w.isConverged()
	}
	for _, a := range n.c.Assignments() {
		if a.State != handoff.StateOwned || a.Owner != a.Target || a.MoveTo != "" {
			return false
		}
	}
	return w.ownersWork(n)
}

func (w *world) nsTotal() uint32 {
	var t uint32
	for _, n := range w.load.namespaces {
		t += n
	}
	return t
}

// balanceTick samples the balance state every balanceCheckEvery while balancing.
func (w *world) balanceTick() error {
	n := w.leader
	if n == nil || w.electing || w.stopAt > 0 && w.now >= w.stopAt {
		return nil
	}
	w.after(balanceCheckEvery, &event{kind: evBalanceCheck})
	why := w.balanced(n)
	if why != w.bal.lastWhy {
		if w.opts.Trace != nil {
			seen, _ := w.seenCosts(n)
			sv, tv := w.newView(n, seen), w.newView(n, w.load.costs(w.now))
			st := n.c.Stats().Balance
			w.tracef("BALANCE %s (seen: total %.2f, imbalance %.3f, %d hot; true: total %.2f, imbalance %.3f, %d hot; rounds %v, reports rejected %v)",
				cmpOr(why, "balanced"), sv.total, sv.imbalance(), len(sv.hot), tv.total, tv.imbalance(), len(tv.hot), st.Rounds, st.ReportsRejected)
		}
		w.bal.lastWhy = why
	}
	if why != "" {
		w.bal.balancedSince = -1
		if w.bal.phaseBound > 0 && w.bal.balancedAt < 0 && w.now > w.bal.phaseStart+w.bal.phaseBound {
			return w.violation("%s: not balanced %v after %s (bound %v): %s", w.opts.Scenario, w.now-w.bal.phaseStart, w.phaseName(), w.bal.phaseBound, why)
		}
		return nil
	}
	if w.bal.balancedSince < 0 {
		w.bal.balancedSince = w.now
	}
	if w.bal.balancedAt < 0 && (w.opts.Scenario != LoadShift || !w.bal.actionDone || w.now >= w.load.shiftAt+settleFor) {
		// (Right after the shift the leader's view still shows the old loads, which
		// were balanced: the bound is checked against the settled view.)
		w.bal.balancedAt = w.now
		if !w.bal.actionDone {
			w.res.TimeToBalanced = w.now - w.bal.phaseStart
		}
	}
	still := stableFor
	if w.opts.Scenario == LoadShift {
		// The shift comes once nothing cools any more: the bound after it is then
		// detection plus the rounds, as design §4 has it.
		still = balanceCooldown
	}
	if !w.bal.actionDone && w.now-w.bal.balancedSince >= still && w.now-w.lastMoveAt() >= still {
		return w.loadAction()
	}
	if w.opts.Scenario == LoadShift && w.bal.actionDone && w.stopAt == 0 && w.now >= w.load.shiftAt+settleFor &&
		w.now-w.bal.balancedSince >= stableFor && w.now-w.lastMoveAt() >= stableFor {
		// Balanced since balancedSince, and still: that is when the balancer
		// followed the shift.
		w.res.TimeToBalanced = w.bal.balancedSince - w.load.shiftAt
		if w.res.TimeToBalanced > w.bal.phaseBound {
			return w.violation("load-shift: balanced %v after the shift (bound %v: the averages' settling time and the rounds)", w.res.TimeToBalanced, w.bal.phaseBound)
		}
		w.stopAt = w.now + confirmFor
	}
	return nil
}

func (w *world) phaseName() string {
	if w.bal.actionDone {
		return "the scenario's action"
	}
	return "convergence"
}

func (w *world) lastMoveAt() time.Duration {
	if len(w.bal.moves) == 0 {
		return 0
	}
	return w.bal.moves[len(w.bal.moves)-1].at
}

// startBalancing begins the balancing phase once the cluster converged: the balancer
// must balance within a bound (the cooldown of the first acquisitions, the warm-up and
// the rounds its budget needs).
func (w *world) startBalancing() {
	w.bal.balancing = true
	w.bal.phaseStart = w.now
	w.bal.phaseBound = balanceCooldown + balanceWarmup + w.roundsBound()
	if w.opts.Scenario == Liar || w.opts.Scenario == Saturation {
		// The liar's reports, or a saturated shard's, keep the leader's view off the
		// truth: no bound on balance, the checks at the end bound what they can do.
		w.bal.phaseBound = 0
	}
	w.after(balanceCheckEvery, &event{kind: evBalanceCheck})
	switch w.opts.Scenario {
	case SkewSteady, Saturation:
		w.stopAt = skewSteadyFor
	case Liar:
		w.stopAt = w.now + liarFor
	case Chaos:
		w.stopAt = 0
	}
}

// roundsBound bounds the rounds a balancer needs to move the cost it must (at most
// the whole of it, at MaxCostFraction a round, or MaxMoves partitions a round),
// plus a handoff each and a round lost to a report gap.
func (w *world) roundsBound() time.Duration {
	rounds := int(math.Ceil(1/balance.DefaultMaxCostFraction)) + (w.p+balance.DefaultMaxMoves-1)/balance.DefaultMaxMoves + 2
	return time.Duration(rounds)*balanceInterval + 2*time.Second
}

// loadAction performs the scenario's action once balanced and still.
func (w *world) loadAction() error {
	switch w.opts.Scenario {
	case SkewSteady, Liar, Saturation:
		w.bal.actionDone = true
		return nil
	case Chaos:
		// SkewChaos: balanced after the faults; confirm for a while.
		w.bal.actionDone = true
		w.stopAt = w.now + confirmFor
		return nil
	case LoadShift:
		w.bal.actionDone = true
		w.load.shiftAt = w.now
		as := w.leader.c.Assignments()
		owner := as[w.load.shiftTo].Owner
		for _, a := range as {
			if a.Owner == owner && int(a.Partition) != w.load.shiftTo && w.load.namespaces[a.Partition] > 0 {
				w.bal.shiftNeighbours++
			}
		}
		w.tracef("LOAD the hot load moves from partition %d to %d", w.load.hot, w.load.shiftTo)
		w.bal.phaseStart = w.now
		w.bal.balancedAt, w.bal.balancedSince = -1, -1
		w.bal.phaseBound = settleFor + w.roundsBound()
		w.movesBefore = uint64(len(w.bal.moves))
		return nil
	}
	// LeaderChange, GracefulLeave, ScaleUp with loads: the usual action.
	w.bal.gapBefore, w.res.MaxGap = w.res.MaxGap, 0
	w.bal.phaseStart, w.bal.phaseBound = w.now, balanceCooldown+balanceWarmup+w.roundsBound()
	w.bal.actionDone = true
	w.bal.balancedAt, w.bal.balancedSince = -1, -1
	return w.scenarioStep(nil)
}

// finishLoads checks what a run with loads must show at its end.
func (w *world) finishLoads() error {
	n := w.leader
	if n == nil {
		return w.violation("no leader at the end")
	}
	costs := w.load.costs(w.now)
	v := w.newView(n, costs)
	w.res.FinalImbalance = v.imbalance()
	if gap := max(w.res.MaxGap, w.bal.gapBefore); gap > w.warmGap() {
		return w.violation("%s: a partition went unworked for %v (bound %v: balancer moves are warm)", w.opts.Scenario, gap, w.warmGap())
	}
	switch w.opts.Scenario {
	case SkewSteady, LoadShift, Chaos, LeaderChange:
		// Balanced in the leader's view; in truth too, but for the shards' clock
		// rates (a shard whose clock runs fast measures rates low) and the noise.
		if limit := (1 + balance.DefaultMargin) * (1 + drift) / (1 - drift) * (1 + loadNoise/4); w.balanced(n) == "" && !w.bal.lastGranular && v.imbalance() > limit {
			return w.violation("%s: the busiest member carries %.3f × its fair share in truth (bound %.3f) while the leader sees it balanced",
				w.opts.Scenario, v.imbalance(), limit)
		}
	}
	switch w.opts.Scenario {
	case SkewSteady:
		if why := w.balanced(n); why != "" {
			return w.violation("skew-steady: not balanced at the end: %s", why)
		}
		if err := w.checkQuiet("skew-steady"); err != nil {
			return err
		}
		if err := w.checkMeasured(n); err != nil {
			return err
		}
		return w.checkPhi(0)
	case LoadShift:
		if !w.bal.actionDone || w.bal.balancedAt < 0 {
			return w.violation("load-shift: the run ended before the balancer followed the shift")
		}
		if err := w.checkPhi(w.load.shiftAt + settleFor); err != nil {
			return err
		}
		return w.checkShiftMoves()
	case Liar:
		return w.checkLiar(v)
	case Saturation:
		return w.checkSaturation(n, v)
	case LeaderChange:
		st := n.c.Stats()
		if st.Grants != 0 || (w.opts.NoNoise && st.MovesStarted != 0) {
			return w.violation("leader change with loads: the new leader moved %d and granted %d partitions (by reason %v)", st.MovesStarted, st.Grants, w.res.MovesByReason)
		}
		// With noise, a cluster left above the trigger only because its partitions
		// are too coarse (balanced's granular case) may see a partition's cost cross
		// the min gain and move, under any leader: the new one may do so after its
		// warm-up, for load, never for membership.
		for _, m := range w.bal.moves[w.bal.actionMoves:] {
			if m.reason == balance.ReasonMembership || m.at < w.bal.leaderStart+balanceWarmup {
				return w.violation("leader change with loads: the new leader moved partition %d (%s → %s, %s) at %.3fs, leading since %.3fs",
					m.p, m.from, m.to, m.reason, m.at.Seconds(), w.bal.leaderStart.Seconds())
			}
		}
	}
	return nil
}

// checkQuiet: the last quietFor saw at most quietLimit load and hot moves; scenario
// names the check in the violation.
func (w *world) checkQuiet(scenario string) error {
	quiet := 0
	for _, m := range w.bal.moves {
		if m.at >= w.now-quietFor && (m.reason == balance.ReasonLoad || m.reason == balance.ReasonHot) {
			quiet++
		}
	}
	if limit := w.quietLimit(); quiet > limit {
		return w.violation("%s: %d load moves in the last %v (at most %d)", scenario, quiet, quietFor, limit)
	}
	return nil
}

// quietLimit is how many load moves a steady load may cause in quietFor.
func (w *world) quietLimit() int {
	if w.opts.NoNoise {
		return 0
	}
	return 1
}

// checkPhi: without noise, the potential Σ cost(m)² never rises from one Balance round
// to the next among those from `from` on, except across the load shift.
func (w *world) checkPhi(from time.Duration) error {
	if !w.opts.NoNoise {
		return nil
	}
	var prev *phiRec
	for i := range w.bal.phi {
		r := &w.bal.phi[i]
		if r.at < from || (w.load.shiftAt > 0 && r.at >= w.load.shiftAt && r.at < w.load.shiftAt+settleFor) {
			prev = nil
			continue
		}
		if prev != nil && r.phi > prev.phi*(1+1e-6) {
			return w.violation("%s: Σ cost² rose from %.3f (round at %.3fs) to %.3f (round at %.3fs) without noise",
				w.opts.Scenario, prev.phi, prev.at.Seconds(), r.phi, r.at.Seconds())
		}
		prev = r
	}
	return nil
}

// checkShiftMoves: after the shift the balancer moves at most what isolating the new
// hot partition needs (the other namespace partitions its member holds) plus about a
// fair share's worth of partitions to the member the old hot partition left nearly
// idle, plus one per member of slack.
func (w *world) checkShiftMoves() error {
	moved := 0
	for _, m := range w.bal.moves[w.movesBefore:] {
		if m.reason == balance.ReasonLoad || m.reason == balance.ReasonHot {
			moved++
		}
	}
	members := len(w.leader.c.Members())
	loaded := 0
	for _, n := range w.load.namespaces {
		if n > 0 {
			loaded++
		}
	}
	limit := w.bal.shiftNeighbours + (loaded+members-2)/max(1, members-1) + members
	if moved > limit {
		return w.violation("load-shift: %d load moves after the shift, more than %d (%d neighbours of the new hot partition, %d loaded partitions, %d members)",
			moved, limit, w.bal.shiftNeighbours, loaded, members)
	}
	return nil
}

// checkLiar: the liar holds no more namespaces than the cap (unless it holds a single
// partition with namespaces), every honest member's true cost is within its fair
// share's band plus the liar's fair share, and the load moves stay within the
// budget's bound.
func (w *world) checkLiar(v view) error {
	liar := w.liar.id
	capNs := balance.DefaultMaxNamespaceShare*float64(w.nsTotal())/float64(len(v.members)) + balance.NamespaceSlack
	withNs := 0
	for _, p := range v.owned[liar] {
		if w.load.namespaces[p] > 0 {
			withNs++
		}
	}
	if float64(v.ns[liar]) > capNs && withNs > 1 {
		return w.violation("liar ×%v: %s holds %d namespaces, above the cap %.1f", w.opts.LiarFactor, liar, v.ns[liar], capNs)
	}
	fair := v.total / float64(len(v.members))
	slack := (1 + balance.DefaultMargin) * (1 + drift) / (1 - drift)
	for _, m := range v.members {
		if m == liar || v.exclusive[m] {
			continue
		}
		if v.cost[m] > fair*slack+fair {
			return w.violation("liar ×%v: honest %s carries %.2f, above F·(1+δ) + the liar's share = %.2f", w.opts.LiarFactor, m, v.cost[m], fair*slack+fair)
		}
	}
	if w.opts.LiarFactor == 0 {
		// Suspect freeze (design §1.5): a partition moved to the liar for load
		// reports 0 there three half-lives later, so the liar gets no load moves from
		// then on (for an hour): after the first such move, its handoff, the three
		// half-lives, a report and the round in flight, nothing more.
		first := time.Duration(-1)
		for _, m := range w.bal.moves {
			if m.to != liar || (m.reason != balance.ReasonLoad && m.reason != balance.ReasonHot) {
				continue
			}
			if first < 0 {
				first = m.at
				continue
			}
			if limit := first + suspectAfter; m.at > limit {
				return w.violation("liar ×0: %s received partition %d for %s at %.3fs, after it should have been suspect (first load move to it at %.3fs, + %v)",
					liar, m.p, m.reason, m.at.Seconds(), first.Seconds(), suspectAfter)
			}
		}
	}
	rounds := uint64((w.now-w.bal.leaderStart)/balanceInterval) + 1
	if w.res.LoadMoves > rounds*balance.DefaultMaxMoves {
		return w.violation("liar ×%v: %d load moves in %d rounds of at most %d", w.opts.LiarFactor, w.res.LoadMoves, rounds, balance.DefaultMaxMoves)
	}
	return nil
}

// checkMembershipMoves fails unless every membership move since the scenario's action
// passes ok(from, to) and moved its partition once.
func (w *world) checkMembershipMoves(ok func(from, to string) bool) error {
	seen := map[partition.ID]bool{}
	for _, m := range w.bal.moves[w.bal.actionMoves:] {
		if m.reason != balance.ReasonMembership {
			continue
		}
		if !ok(m.from, m.to) {
			return w.violation("%s: partition %d moved for membership needlessly, %s → %s", w.opts.Scenario, m.p, m.from, m.to)
		}
		if seen[m.p] {
			return w.violation("%s: partition %d moved for membership twice", w.opts.Scenario, m.p)
		}
		seen[m.p] = true
	}
	return nil
}

// checkJoinCost: what the joiner received for membership costs at most its fair share
// with the 15 % of design §7, or F plus half the costliest partition it pulled (the
// fill's own bound, r + c ≤ F + c/2, for partitions coarse against F).
func (w *world) checkJoinCost() error {
	costs, _ := w.seenCosts(w.leader)
	total := 0.0
	for _, c := range costs {
		total += c
	}
	fair := total / float64(len(w.leader.c.Members()))
	got, cmax := 0.0, 0.0
	for _, m := range w.bal.moves[w.bal.actionMoves:] {
		if m.reason == balance.ReasonMembership && m.to == w.joiner.id {
			got += costs[m.p]
			cmax = max(cmax, costs[m.p])
		}
	}
	if limit := max(1.15*fair, fair+cmax/2); got > limit*(1+1e-6) {
		return w.violation("scale-up: the joiner received %.2f for membership, above max(1.15 F, F + c_max/2) = %.2f (F %.2f)", got, limit, fair)
	}
	return nil
}

// checkMeasured: without noise, the loads the leader holds are the true loads (the
// meters are exact and bias-corrected, the loads constant, nothing moved lately), to
// the report's resolution of a thousandth.
func (w *world) checkMeasured(n *coordNode) error {
	if !w.opts.NoNoise {
		return nil
	}
	for p := range w.p {
		got, _, _ := n.c.PartitionLoad(partition.ID(p))
		want := w.load.at(p, w.now)
		if math.Abs(got-want) > 1e-3+1e-6*want {
			return w.violation("%s: the leader holds load %.4f for partition %d, true load %.4f", w.opts.Scenario, got, p, want)
		}
	}
	return nil
}

// checkSaturation: at the end of the Saturation scenario no shard is asked for more
// than it can serve, and the last quietFor saw at most quietLimit load moves (a
// saturated shard's scaled costs do not make the balancer oscillate). Whether the hot
// partition ends alone is not checked: once its shard is no longer saturated it
// measures one fair share of the load, about 0.95 F with the namespaces' base, which
// the noise puts on either side of the hot threshold (0.9 F) while it shares its shard.
func (w *world) checkSaturation(n *coordNode, v view) error {
	for _, m := range v.members {
		var d float64
		for _, p := range v.owned[m] {
			d += w.load.at(p, w.now)
		}
		if d > w.load.capacity*(1+1e-9) {
			return w.violation("saturation: %s is asked for %.2f requests/s at the end, above its capacity %.2f (saturated members in the leader's view: %d)",
				m, d, w.load.capacity, n.c.Stats().Balance.Saturated)
		}
	}
	return w.checkQuiet("saturation")
}

// Package sim is a deterministic simulation of kshard's sharding core: one
// coordinator leader at a time (handoff.Coordinator) and 3–12 shard pods
// (handoff.Shard) in one process, over simulated time, with every machine's
// clock off by an arbitrary offset and a rate error up to the drift the
// configuration allows, and a network that delays, reorders, duplicates,
// drops and cuts messages.
//
// A run is a pure function of its seed. Faults (Chaos scenario): crashes,
// crash-restarts (new incarnation, empty state), GC pauses past the TTL (a
// paused process handles nothing; on resume it first checks its deadline),
// stream cuts, new shards, graceful leaves, slow drains, and coordinator
// leader changes (the new leader has a higher term and knows only what
// shards tell it; messages of the old one are still delivered).
//
// Checked after every event (which covers every instant: nothing starts
// working between events, leases only run out): no partition is worked by
// two shards, where worked means the process is alive, not paused, holds
// the partition acquired (or is still draining it) and its lease is valid
// at its own clock. After the faults settle: every partition is worked by
// exactly one live shard within a bound, and the leader converges to the
// ring target and agrees with who works what within a bound. Scenarios
// LeaderChange, GracefulLeave and ScaleUp check that those operations move
// nothing needlessly (a leader change nothing at all, a leave only the
// leaver's partitions, a join only partitions to the new shard; one move
// each) and leave no gap longer than a warm handoff.
//
// The simulated deployment uses TTL 3s, heartbeats every 1s, Margin 0.5s
// with clock rates off by up to 5% (the bound needs 0.316s), debounce
// 1s/4s, 8–48 partitions and 1–4 concurrent moves. The leader's target
// assignment is computed outside the state machine, as coordinatorrpc does
// outside its lock, and delivered 0–250ms later (up to 2s more while
// faults run, so that membership changes overtake it and its result is
// stale). Faults run for 10–40s; they have settled once every pause, cut,
// restart, election, slow drain, slow ring computation and leave deadline
// is over and two heartbeat intervals have passed. The bounds checked from
// then on are: every partition worked within 2·(TTL+Margin) + MaxDebounce
// + discovery + two ring computations + 2s = 14.5s (workedBound), and
// convergence within that plus one debounce plus ceil(P/moves) rounds of
// one handoff each (convergedBound).
//
// Runs with loads (Options.Loads, and the SkewSteady, LoadShift, Liar and
// Saturation scenarios; docs/design-placement.md §4) give every partition a
// true load ℓ(p, t): a fifth of the 48–256 partitions empty, the others 1–4
// namespaces and a Zipf-like load, one carrying 30 % of it (Saturation: one
// fair share); LoadShift moves
// that 30 % to another partition once. Each shard process measures the
// partitions it works with loadmeter.EWMA (half-life 10s, bias-corrected,
// started when the gate acquires the partition), sampled at its own clock
// with ±10 % noise per sample (none with Options.NoNoise), and sends a load
// report on every heartbeat. The leader places by load (Placement load,
// rounds every 5s after a 10s warm-up, cooldown 60s) and gets the namespace
// counts as its informer would. Checked besides the above: no partition
// moves for load twice within the cooldown; a balancer move is a warm
// handoff; the cluster balances within the cooldown, warm-up and the rounds
// its budget needs: every member holding a hot partition holds no other
// partition with a namespace, and the busiest other member is within
// F'·(1+δ) of their fair share in the leader's view, or no move the
// balancer's rules allow remains because its partitions are too coarse to
// fit a receiver (partitions below the balancer's min gain that together
// would balance it do not excuse it); in truth within
// that, the shards' clock rate errors and the noise. SkewSteady then makes at
// most one load move in its last 10 minutes (none without noise), LoadShift
// follows the shift within the averages' settling time plus the rounds, with
// a bounded number of moves, and without noise Σ cost(m)² never rises from
// one round to the next. The Liar holds no more namespaces than the cap and
// leaves no honest member above its band plus the liar's fair share; one that
// reports 0 gets no load move once the first one it received has been probed
// (suspect, three half-lives later). The Saturation scenario bounds every
// shard's capacity at 1.15 × the fair share of the true load and gives the
// hot partition one fair share: a shard asked for more measures its
// partitions scaled down to its capacity and reports a rate-limiter wait of
// 5 s/s, so a hot partition sharing it measures below the hot threshold; at
// its end (20 minutes) no shard is asked for more than its capacity and the
// last 10 minutes saw at most one load move (none without noise). With
// loads, a leader change moves nothing through the new leader's warm-up and
// three rounds; a join's membership moves go only to the joiner and cost at
// most max(1.15 F, F + c_max/2); a leave's only take the leaver's
// partitions. Result reports the moves by reason and the final imbalance.
//
// Running:
//
//	go test ./pkg/sharding/sim                       # 1000 chaos seeds + 200 per scenario, 30 per scenario with loads (4 with -race)
//	go test ./pkg/sharding/sim -sim.seeds=N -sim.first=F
//	go test ./pkg/sharding/sim -run TestSimulation -sim.seed=S -sim.v   # replay one seed, full trace
//	go test ./pkg/sharding/sim -run TestSimulation -sim.seeds=100000 -timeout 0   # soak (200 per scenario with loads)
//	go test ./pkg/sharding/sim -run XXX -bench Simulation                # seeds/s on one core
//
// A failure prints the seed, the violation, the last steps of its trace and
// the command that replays it.
package sim

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
// Running:
//
//	go test ./pkg/sharding/sim                       # 1000 chaos seeds + 200 per scenario
//	go test ./pkg/sharding/sim -sim.seeds=N -sim.first=F
//	go test ./pkg/sharding/sim -run TestSimulation -sim.seed=S -sim.v   # replay one seed, full trace
//	go test ./pkg/sharding/sim -run TestSimulation -sim.seeds=100000 -timeout 0   # soak
//	go test ./pkg/sharding/sim -run XXX -bench Simulation                # seeds/s on one core
//
// A failure prints the seed, the violation, the last steps of its trace and
// the command that replays it.
package sim

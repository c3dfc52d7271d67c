package handoff

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// scaleCase is one size of BenchmarkCoordinatorScale.
type scaleCase struct {
	shards     int
	namespaces int
	partitions int
	// load is the ring's bounded-load factor (--ring-load); 0 is ring.DefaultLoad.
	load float64
	// cost is "" for count placement (the coordinator's default, ring.AssignFrom), or
	// costNamespaces for load placement (balance.Plan, Membership plans only) fed the
	// namespace count of every partition (SetNamespaces), no load.
	cost string
}

// costNamespaces is scaleCase.cost for load placement by namespace counts.
const costNamespaces = "namespaces"

func (sc scaleCase) String() string {
	load := sc.load
	if load == 0 {
		load = ring.DefaultLoad
	}
	name := fmt.Sprintf("shards=%d/namespaces=%d/P=%d/load=%g", sc.shards, sc.namespaces, sc.partitions, load)
	if sc.cost != "" {
		name += "/cost=" + sc.cost
	}
	return name
}

// BenchmarkCoordinatorScale measures the coordinator's state machine and ring at the sizes
// kshard is meant for: 100 and 1,000 shards, 10,000 and 100,000 namespaces.
// No process runs: the benchmark is the coordinator's edge (it computes ring requests off
// the state machine, as coordinatorrpc does, and applies owner-record requests at once) and
// every shard (each answers a command at once, as a shard with instant caches and drains
// would). Each iteration is one shard joining a converged cluster of N shards and, once
// that has converged, one randomly chosen shard leaving; ns/op is that whole cycle,
// simulated shards included. Per membership change it reports
//
//   - ring-ms: RingRequest.Compute, which the edge runs outside its lock;
//   - apply-ms: RingComputed, which runs under the lock and plans the first moves;
//   - sm-ms: every state-machine call from the membership change until converged (the
//     report that changed membership, the debounce tick, RingComputed, owner-record
//     requests and every Prepared/Released/Acquired of the moves), ring excluded;
//   - msgs: commands the coordinator sent until converged (Welcome or Ack included);
//   - parts and ns: partitions that changed owner and the namespaces they hold, and each
//     as a multiple of the ideal (×ideal): P/(N+1) partitions and namespaces/(N+1) for a
//     join, the leaver's own partitions and namespaces for a leave; max-×ideal is the
//     worst single change.
//
// and once per run: start-sm-s, the state machine's time to take N shards from their
// hellos to converged (a first start: every partition granted and acquired); heap-MiB,
// the live heap of the converged coordinator (after GC, minus the heap before it was
// built; the edge's map of N sessions is in it too); ring-alloc-MiB, what one target
// computation from the converged owners allocates;
// hb-us and tick-us, one Heartbeat and one Tick in the converged state, which at the
// coordinator's defaults (a heartbeat per shard per second, a tick every 100ms) make
// idle-cpu-%, the share of one core the state machine needs with nothing moving;
// ns-max/avg, the busiest shard's namespaces over the average; parts-max/avg, the same
// in partitions; and idle-shards, shards the ring gives no partition.
//
// With count placement (the default) the state machine works in partitions only:
// namespaces enter it nowhere. They are generated names mapped with partition.Map, to
// count what a move carries (with the server-side fence, one owner-label write per
// namespace). The cases named cost=namespaces run load placement fed those counts
// (SetNamespaces), no load: what a cold start and membership changes place by namespaces;
// they also report hb-load-us, a heartbeat carrying a load report of the shard's
// partitions, measured after the changes.
func BenchmarkCoordinatorScale(b *testing.B) {
	var cases []scaleCase
	for _, n := range []int{100, 1000} {
		for _, ns := range []int{10_000, 100_000} {
			cases = append(cases, scaleCase{shards: n, namespaces: ns, partitions: partition.DefaultCount})
		}
	}
	// The largest size again with 4 and 16 times the partitions (65,536 is the most
	// --partitions allows): 4,096 leave 1,000 shards about 4 each, coarse balance at 4
	// or 16 times the per-partition work. (--ring-load no longer affects the target, so
	// the case with 1.25 is gone.)
	cases = append(cases,
		scaleCase{shards: 1000, namespaces: 100_000, partitions: 4 * partition.DefaultCount},
		scaleCase{shards: 1000, namespaces: 100_000, partitions: partition.MaxCount},
	)
	// Load placement by namespace counts (docs/design-placement.md §7), at the largest
	// size with the default and the recommended partition counts. hb-load-us is then a
	// heartbeat carrying a load report of the shard's partitions.
	cases = append(cases,
		scaleCase{shards: 1000, namespaces: 100_000, partitions: partition.DefaultCount, cost: costNamespaces},
		scaleCase{shards: 1000, namespaces: 100_000, partitions: 4 * partition.DefaultCount, cost: costNamespaces},
	)
	for _, sc := range cases {
		b.Run(sc.String(), func(b *testing.B) { benchScale(b, sc) })
	}
}

func benchScale(b *testing.B, sc scaleCase) {
	pm, err := partition.NewMap(sc.partitions)
	if err != nil {
		b.Fatal(err)
	}
	nsPer := make([]int, sc.partitions) // namespaces per partition
	for i := range sc.namespaces {
		nsPer[pm.For(fmt.Sprintf("tenant-%06d", i))]++
	}
	cfg := Config{
		PartitionCount: sc.partitions,
		Ring:           ring.Config{Load: sc.load},
		// Sessions outlive the simulated time without a heartbeat per shard per second
		// (refresh renews them now and then); the other timings are the defaults.
		SessionTTL:        time.Hour,
		HeartbeatInterval: time.Second,
		Margin:            2 * time.Minute,
		MaxMembers:        sc.shards + 1, // --max-shards: room for the one that joins
		OwnerRecord:       true,          // --shard-fence is on by default
		SeizeAfter:        2 * time.Second,
	}
	var counts []uint32
	if sc.cost == costNamespaces {
		cfg.Balance.Placement = PlacementLoad
		counts = make([]uint32, sc.partitions)
		for p, n := range nsPer {
			counts[p] = uint32(n)
		}
	}

	runtime.GC()
	before := heapAlloc()
	e := newScaleEdge(b, cfg, sc.shards, counts)
	runtime.GC()
	heap := heapAlloc() - before
	start := e.sm
	ringAlloc := e.ringAlloc()
	nsMaxAvg, partsMaxAvg, idle := e.balance(nsPer)
	hb, tick := e.idleCost()

	rng := rand.New(rand.NewPCG(11, 4))
	var join, leave changeTotals
	iter := 0
	for b.Loop() {
		joiner := fmt.Sprintf("joiner-%d", iter)
		iter++
		join.add(e.change(nsPer, "", func() { e.step(hello(joiner, 1)) }))
		// Anybody but the shard that just joined; its leave would only undo the join.
		var leaver string
		for leaver == "" || leaver == joiner {
			leaver = e.c.ids[rng.IntN(len(e.c.ids))]
		}
		leave.add(e.change(nsPer, leaver, func() { e.heartbeat(leaver, true) }))
		e.refresh()
	}
	// After the loop, so that the loads reported do not change the placement measured.
	var hbLoad time.Duration
	if sc.cost != "" {
		hbLoad = e.loadCost()
	}
	// After the loop: b.Loop's first call resets the metrics reported before it.
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(ringAlloc, "ring-alloc-MiB")
	b.ReportMetric(nsMaxAvg, "ns-max/avg")
	b.ReportMetric(partsMaxAvg, "parts-max/avg")
	b.ReportMetric(float64(idle), "idle-shards")
	b.ReportMetric(start.Seconds(), "start-sm-s")
	b.ReportMetric(float64(hb.Nanoseconds())/1e3, "hb-us")
	b.ReportMetric(float64(tick.Nanoseconds())/1e3, "tick-us")
	if sc.cost != "" {
		b.ReportMetric(float64(hbLoad.Nanoseconds())/1e3, "hb-load-us")
	}
	b.ReportMetric(100*(float64(sc.shards)*hb.Seconds()+10*tick.Seconds()), "idle-cpu-%")
	join.report(b, "join", float64(sc.partitions)/float64(sc.shards+1), float64(sc.namespaces)/float64(sc.shards+1))
	leave.report(b, "leave", 0, 0)
	runtime.KeepAlive(e)
}

func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// scaleEdge is the coordinator's edge and every shard for BenchmarkCoordinatorScale. It
// times the coordinator's calls and the ring computation apart, and answers each command
// at once: Prepared, Released and Acquired as asked, Disconnected after a Farewell.
type scaleEdge struct {
	tb       testing.TB
	c        *Coordinator
	now      time.Time
	sessions map[string]Session
	seq      uint64
	queue    []Command
	renewed  time.Time // when refresh last renewed every session

	// Since the last reset: commands sent, time in state-machine calls (sm), in
	// RingRequest.Compute (ring) and in RingComputed (apply, also counted in sm).
	sent            int
	sm, ring, apply time.Duration
	rings           int
}

// newScaleEdge returns a converged coordinator of n shards, built as a new leader would
// be: hellos just before its grace ends, then the first target and its grants. counts,
// if not nil, are the namespace counts the edge gives it first.
func newScaleEdge(tb testing.TB, cfg Config, n int, counts []uint32) *scaleEdge {
	tb.Helper()
	c, err := New(cfg, 1, t0)
	if err != nil {
		tb.Fatal(err)
	}
	c.OffloadRing() // as coordinatorrpc does
	if counts != nil {
		c.SetNamespaces(t0, counts)
	}
	cfg = c.Config()
	e := &scaleEdge{tb: tb, c: c, now: t0.Add(cfg.SessionTTL + cfg.Margin - time.Second), sessions: map[string]Session{}}
	for i := range n {
		e.step(hello(fmt.Sprintf("shard-%04d", i), 1))
	}
	e.now = e.now.Add(time.Second)
	e.renewed = e.now
	e.tick()
	if !c.Converged() {
		tb.Fatalf("%d shards did not converge: %+v", n, c.Stats())
	}
	return e
}

// step feeds one report and everything that follows from it.
func (e *scaleEdge) step(r Report) {
	if r.Kind == ReportHello {
		e.sessions[r.Shard] = r.Session
	}
	start := time.Now()
	err := e.c.Step(e.now, r)
	e.sm += time.Since(start)
	if err != nil {
		e.tb.Fatalf("%v: %v", r, err)
	}
	e.drain()
}

func (e *scaleEdge) tick() {
	start := time.Now()
	e.c.Tick(e.now)
	e.sm += time.Since(start)
	e.drain()
}

func (e *scaleEdge) heartbeat(shard string, leaving bool) {
	e.seq++
	e.step(Report{Kind: ReportHeartbeat, Shard: shard, Session: e.sessions[shard], Seq: e.seq, Leaving: leaving})
}

// drain does what the edge does after every call (send the outbox, hand out the ring and
// owner-record requests) and answers every command, until nothing is left.
func (e *scaleEdge) drain() {
	for {
		e.queue = append(e.queue, e.c.Outbox()...)
		e.c.Events()
		start := time.Now()
		rec, ok := e.c.TakeRecordRequest()
		if ok {
			e.c.RecordApplied(e.now, rec.Gen, nil)
			e.sm += time.Since(start)
			continue
		}
		req, ok := e.c.TakeRingRequest()
		e.sm += time.Since(start)
		if ok {
			start = time.Now()
			target, err := req.Compute()
			e.ring += time.Since(start)
			start = time.Now()
			e.c.RingComputed(e.now, req.Gen, target, err)
			d := time.Since(start)
			e.apply += d
			e.sm += d
			e.rings++
			continue
		}
		if len(e.queue) == 0 {
			e.queue = nil // or the heap measured keeps the largest outbox's array
			return
		}
		cmd := e.queue[0]
		e.queue = e.queue[1:]
		e.sent++
		r := Report{Shard: cmd.To, Session: cmd.Session, Partition: cmd.Partition, Epoch: cmd.Epoch}
		switch cmd.Kind {
		case CmdPrepare:
			r.Kind = ReportPrepared
		case CmdRelease:
			r.Kind = ReportReleased
		case CmdAcquire:
			r.Kind = ReportAcquired
		case CmdFarewell:
			start = time.Now()
			e.c.Disconnected(e.now, cmd.To, cmd.Session)
			e.sm += time.Since(start)
			delete(e.sessions, cmd.To)
			continue
		case CmdSessionEnded:
			e.tb.Fatalf("unexpected %v", cmd)
		default:
			continue // Welcome, Ack, Cancel: nothing to answer
		}
		start = time.Now()
		err := e.c.Step(e.now, r)
		e.sm += time.Since(start)
		if err != nil {
			e.tb.Fatalf("%v: %v", r, err)
		}
	}
}

// change applies one membership change (do), lets the debounce pass and waits for the
// coordinator to converge, and returns what it cost. leaver is the shard that leaves, or
// "" for a join.
func (e *scaleEdge) change(nsPer []int, leaver string, do func()) changeCost {
	owners := e.owners()
	e.sent, e.sm, e.ring, e.apply, e.rings = 0, 0, 0, 0, 0
	do()
	e.now = e.now.Add(e.c.cfg.Debounce)
	for i := 0; !e.c.Converged() || (leaver != "" && e.sessions[leaver] != Session{}); i++ {
		if i == 100 {
			e.tb.Fatalf("not converged 10s after the debounce: %+v", e.c.Stats())
		}
		e.tick()
		e.now = e.now.Add(100 * time.Millisecond) // coordinatorrpc's tick interval
	}
	if e.rings != 1 {
		e.tb.Fatalf("%d target computations for one membership change, want 1", e.rings)
	}
	out := changeCost{msgs: e.sent, sm: e.sm, ring: e.ring, apply: e.apply}
	for p, o := range e.owners() {
		if o != owners[p] {
			out.parts++
			out.ns += nsPer[p]
		}
		if leaver != "" && owners[p] == leaver {
			out.idealParts++
			out.idealNS += float64(nsPer[p])
		}
	}
	return out
}

// refresh renews every session (a heartbeat each) once a quarter of the TTL has passed in
// simulated time, outside the measurement.
func (e *scaleEdge) refresh() {
	if e.now.Sub(e.renewed) < e.c.cfg.SessionTTL/4 {
		return
	}
	for _, id := range slices.Clone(e.c.ids) {
		e.heartbeat(id, false)
	}
	e.renewed = e.now
}

func (e *scaleEdge) owners() []string {
	out := make([]string, len(e.c.parts))
	for p := range e.c.parts {
		out[p] = e.c.parts[p].owner
	}
	return out
}

// idleCost returns the mean time of one Heartbeat (one of every shard's) and of one Tick
// (100 of them) in the converged state.
func (e *scaleEdge) idleCost() (hb, tick time.Duration) {
	ids := slices.Clone(e.c.ids)
	e.sm = 0
	for _, id := range ids {
		e.heartbeat(id, false)
	}
	hb = e.sm / time.Duration(len(ids))
	e.sm = 0
	const ticks = 100
	for range ticks {
		e.tick()
	}
	return hb, e.sm / ticks
}

// loadCost returns the mean time of one heartbeat carrying a load report of every
// partition the shard owns (1 req/s each, 100 objects), one of every shard's.
func (e *scaleEdge) loadCost() time.Duration {
	held := map[string][]PartitionLoad{}
	for p := range e.c.parts {
		o := e.c.parts[p].owner
		held[o] = append(held[o], PartitionLoad{Partition: partition.ID(p), LoadMilli: 1000, Objects: 100, AgeSeconds: 3600})
	}
	ids := slices.Clone(e.c.ids)
	e.sm = 0
	for _, id := range ids {
		e.seq++
		e.step(Report{Kind: ReportHeartbeat, Shard: id, Session: e.sessions[id], Seq: e.seq, Load: &LoadReport{Partitions: held[id]}})
	}
	if st := e.c.Stats().Balance; len(st.ReportsRejected) != 0 {
		e.tb.Fatalf("load reports rejected: %v", st.ReportsRejected)
	}
	return e.sm / time.Duration(len(ids))
}

// ringAlloc returns the MiB one target computation of the current members allocates.
func (e *scaleEdge) ringAlloc() float64 {
	r, err := ring.New(e.c.cfg.Ring)
	if err != nil {
		e.tb.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	if _, err := r.AssignFrom(e.c.ids, e.owners()); err != nil {
		e.tb.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	return float64(m1.TotalAlloc-m0.TotalAlloc) / (1 << 20)
}

// balance returns the most namespaces one shard owns over the average, the same for
// partitions, and how many shards own no partition at all.
func (e *scaleEdge) balance(nsPer []int) (nsMaxAvg, partsMaxAvg float64, idle int) {
	per := map[string]int{}
	parts := map[string]int{}
	total := 0
	for p := range e.c.parts {
		per[e.c.parts[p].owner] += nsPer[p]
		parts[e.c.parts[p].owner]++
		total += nsPer[p]
	}
	most, mostParts := 0, 0
	for o, n := range per {
		most = max(most, n)
		mostParts = max(mostParts, parts[o])
	}
	shards := float64(len(e.c.ids))
	return float64(most) / (float64(total) / shards), float64(mostParts) / (float64(len(e.c.parts)) / shards), len(e.c.ids) - len(parts)
}

// changeCost is what one membership change cost; idealParts and idealNS are set for a
// leave (the leaver's share) and left zero for a join (the ideal is a fixed share).
type changeCost struct {
	msgs, parts, ns     int
	idealParts, idealNS float64
	sm, ring, apply     time.Duration
}

// changeTotals collects the changeCost of every iteration.
type changeTotals []changeCost

func (t *changeTotals) add(c changeCost) { *t = append(*t, c) }

// report reports the means over the iterations. The ×ideal ratios are of totals (moved
// over ideal, summed over the iterations), so that a leaver that owned nothing (at 1,000
// shards and 4,096 partitions some own none) counts what it moved without dividing by
// zero; the worst single change is over those with an ideal above zero. idealParts and
// idealNS are the ideal of every change, or zero to take each change's own (a leave).
func (t changeTotals) report(b *testing.B, name string, idealParts, idealNS float64) {
	if len(t) == 0 {
		return
	}
	var msgs, parts, ns, sumIdealParts, sumIdealNS, maxRatio float64
	var sm, ring, apply time.Duration
	for _, c := range t {
		ip, in := c.idealParts, c.idealNS
		if idealParts > 0 {
			ip, in = idealParts, idealNS
		}
		msgs += float64(c.msgs)
		parts += float64(c.parts)
		ns += float64(c.ns)
		sumIdealParts += ip
		sumIdealNS += in
		if ip > 0 {
			maxRatio = max(maxRatio, float64(c.parts)/ip)
		}
		sm += c.sm
		ring += c.ring
		apply += c.apply
	}
	n := float64(len(t))
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / n }
	b.ReportMetric(ms(ring), name+"-ring-ms")
	b.ReportMetric(ms(apply), name+"-apply-ms")
	b.ReportMetric(ms(sm), name+"-sm-ms")
	b.ReportMetric(msgs/n, name+"-msgs")
	b.ReportMetric(parts/n, name+"-parts")
	b.ReportMetric(parts/sumIdealParts, name+"-parts-×ideal")
	b.ReportMetric(maxRatio, name+"-parts-max-×ideal")
	b.ReportMetric(ns/n, name+"-ns")
	b.ReportMetric(ns/sumIdealNS, name+"-ns-×ideal")
}

// BenchmarkStepRefusedReleased measures what a Released report the coordinator refuses
// (a shard resending one, or flooding: the edge lets a stream send 4·P + 64 partition
// reports in a row) costs at the default partition count: a refusal changes nothing, so
// it must not walk every partition as an accepted Released does.
func BenchmarkStepRefusedReleased(b *testing.B) {
	e := newScaleEdge(b, Config{}, 10, nil)
	id := e.c.ids[0]
	r := Report{Kind: ReportReleased, Shard: id, Session: e.sessions[id], Partition: 3, Epoch: 1}
	for b.Loop() {
		if err := e.c.Step(e.now, r); err == nil {
			b.Fatal("a Released of a partition not being moved was accepted")
		}
	}
}

// BenchmarkHeartbeatLoadReport measures an accepted load report at 1,000 shards of the
// default partition count, as each arrives with a heartbeat (100 a second at the default
// 10 s report interval): the partitions' loads and the saturation rule, whose median of
// the group's other shards is kept per report (waitIndex).
func BenchmarkHeartbeatLoadReport(b *testing.B) {
	cfg := Config{Balance: BalanceConfig{Placement: PlacementLoad, Enabled: true},
		Load: LoadSettings{ReportInterval: 10 * time.Second, HalfLife: time.Minute, ReconcileWeight: 0.1}}
	e := newScaleEdge(b, cfg, 1000, nil)
	owned := map[string][]PartitionLoad{}
	for _, a := range e.c.Assignments() {
		owned[a.Owner] = append(owned[a.Owner], PartitionLoad{Partition: a.Partition, LoadMilli: 2000, Objects: 10, AgeSeconds: 600})
	}
	seq := uint64(1 << 40)
	i := 0
	report := func() {
		id := e.c.ids[i%len(e.c.ids)]
		i++
		seq++
		e.now = e.now.Add(10 * time.Millisecond) // each shard every 10 s
		r := Report{Kind: ReportHeartbeat, Shard: id, Session: e.sessions[id], Seq: seq,
			Load: &LoadReport{LimiterWaitPermille: uint32(i % 3000), Partitions: owned[id]}}
		if err := e.c.Step(e.now, r); err != nil {
			b.Fatal(err)
		}
		e.c.Outbox()
	}
	for range e.c.ids { // each shard's first report since its Welcome rebuilds the index
		report()
	}
	for b.Loop() {
		report()
	}
}

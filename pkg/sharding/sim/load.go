package sim

import (
	"math"
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/loadmeter"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
)

// Load model of the runs with loads (Options.Loads; docs/design-placement.md §4): a
// scaled-down deployment. Every heartbeat carries a load report, averaged with a 10 s
// half-life; the balancer runs a round every 5 s after a 10 s warm-up and leaves a
// partition acquired less than 60 s ago where it is.
const (
	loadReportInterval = hbInterval
	loadHalfLife       = 10 * time.Second
	reconcileWeight    = 0.1
	balanceInterval    = 5 * time.Second
	balanceWarmup      = 10 * time.Second
	balanceCooldown    = 60 * time.Second
	// loadNoise: each sample of a partition's requests is off by up to ±10 %, uniformly.
	loadNoise = 0.10
	// hotShare is the share of all load the hot partition carries.
	hotShare = 0.30
	// The Saturation scenario's: each shard can serve saturationCapacity × the initial
	// fair share of the true load; the hot partition carries saturationHot × it; a
	// saturated shard reports saturatedWaitPermille (above the default
	// handoff.DefaultSaturationWait).
	saturationCapacity    = 1.15
	saturationHot         = 1.0
	saturatedWaitPermille = 5000
	// The absurd-report bounds (handoff.BalanceConfig) the simulated coordinator runs
	// with: the defaults. Honest shards stay far below them (loadPerShard).
	maxPartitionLoad = 1000
	maxShardLoad     = 2000
)

// loadModel is the true load ℓ(p, t) of every partition, in requests/s: seeded per run
// and scenario-defined. It is piecewise constant: the hot partition's load may jump to
// another partition once (LoadShift).
type loadModel struct {
	rate       []float64 // ℓ(p) before the shift
	namespaces []uint32
	objects    []uint32
	hot        int
	total      float64
	// From shiftAt on (if > 0) the hot load is carried by shiftTo, and hot carries
	// what shiftTo carried.
	shiftAt time.Duration
	shiftTo int
	// capacity is what one shard can serve, requests/s (Saturation); 0 for no bound.
	capacity float64
}

// newLoadModel draws a run's loads: about a fifth of the partitions hold no namespace
// and no load (the empty class); the others hold 1–4 namespaces and a Zipf-like load
// (rank^-0.6 over a random order); one of them, the hot partition, carries hotShare of
// the total. The total is 5–50 requests/s per initial shard.
func (w *world) newLoadModel(shards int) *loadModel {
	m := &loadModel{
		rate:       make([]float64, w.p),
		namespaces: make([]uint32, w.p),
		objects:    make([]uint32, w.p),
	}
	m.total = float64(shards) * (5 + 45*w.rng.Float64())
	var loaded []int
	for p := range w.p {
		if w.chance(0.2) {
			continue
		}
		loaded = append(loaded, p)
	}
	if len(loaded) < 2 {
		loaded = []int{0, w.p - 1}
	}
	w.rng.Shuffle(len(loaded), func(i, j int) { loaded[i], loaded[j] = loaded[j], loaded[i] })
	m.hot = loaded[0]
	rest := loaded[1:]
	var sum float64
	for i, p := range rest {
		m.rate[p] = math.Pow(float64(i+1), -0.6)
		sum += m.rate[p]
	}
	for _, p := range rest {
		m.rate[p] *= (1 - hotShare) * m.total / sum
	}
	share := hotShare
	if w.opts.Scenario == Saturation {
		share = saturationHot / float64(shards)
		m.capacity = saturationCapacity * m.total / float64(shards)
	}
	m.rate[m.hot] = share * m.total
	for _, p := range loaded {
		m.namespaces[p] = uint32(1 + w.rng.IntN(4))
		m.objects[p] = m.namespaces[p] * uint32(10+w.rng.IntN(200))
	}
	// The partition the hot load may shift to: another loaded one.
	m.shiftTo = rest[w.rng.IntN(len(rest))]
	return m
}

// at returns ℓ(p, t).
func (m *loadModel) at(p int, t time.Duration) float64 {
	if m.shiftAt > 0 && t >= m.shiftAt {
		switch p {
		case m.hot:
			return m.rate[m.shiftTo]
		case m.shiftTo:
			return m.rate[m.hot]
		}
	}
	return m.rate[p]
}

// hotAt returns the partition that carries the hot load at t.
func (m *loadModel) hotAt(t time.Duration) int {
	if m.shiftAt > 0 && t >= m.shiftAt {
		return m.shiftTo
	}
	return m.hot
}

// integral returns ∫ℓ(p) over [from, to]: the requests p's work makes meanwhile.
func (m *loadModel) integral(p int, from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	if m.shiftAt > from && m.shiftAt < to {
		return m.at(p, from)*(m.shiftAt-from).Seconds() + m.at(p, m.shiftAt)*(to-m.shiftAt).Seconds()
	}
	return m.at(p, from) * (to - from).Seconds()
}

// costs returns cost(p) = ℓ(p, t) + λ·N(p) (balance.Costs' formula) of the true loads.
func (m *loadModel) costs(t time.Duration) []float64 {
	var sumL, sumN float64
	for p := range m.rate {
		sumL += m.at(p, t)
		sumN += float64(m.namespaces[p])
	}
	lambda := 0.001
	if sumN > 0 {
		lambda = max(lambda, 0.05*sumL/sumN)
	}
	out := make([]float64, len(m.rate))
	for p := range out {
		out[p] = m.at(p, t) + lambda*float64(m.namespaces[p])
	}
	return out
}

// meterModel is a shard process's load meter as the simulation plays it: per partition
// it works, the real loadmeter.EWMA, started when the gate acquired it (at 0, bias-
// corrected), fed at each heartbeat with the requests the partition's work made since
// the last sample, with noise, at the shard's own clock (whose rate error is the
// meter's too).
type meterModel struct {
	held map[partition.ID]*meteredPartition
}

type meteredPartition struct {
	ewma  loadmeter.EWMA
	since time.Time     // the shard's clock at acquisition
	last  time.Duration // true time of the last sample
}

func newMeterModel() *meterModel {
	return &meterModel{held: map[partition.ID]*meteredPartition{}}
}

// acquired starts p's average (loadmeter.Meter.Acquired): a no-op if it runs already.
func (w *world) meterAcquired(s *shardNode, p partition.ID) {
	if s.meter == nil {
		return
	}
	if _, ok := s.meter.held[p]; ok {
		return
	}
	at := s.clk.at(w.now)
	s.meter.held[p] = &meteredPartition{ewma: loadmeter.NewEWMA(loadHalfLife, at), since: at, last: w.now}
}

// meterReleased ends p's average (loadmeter.Meter.Released): acquired again, it starts
// from 0.
func (s *shardNode) meterReleased(p partition.ID) {
	if s.meter != nil {
		delete(s.meter.held, p)
	}
}

// loadReport samples s's meter now and returns the report its heartbeat carries, as
// shardrpc's client builds it from loadmeter.Meter.Snapshot: held partitions with a
// namespace or load, held for at least one report interval, ascending. The liar
// (Scenario Liar) multiplies its loads by Options.LiarFactor.
func (w *world) loadReport(s *shardNode) *handoff.LoadReport {
	now := s.clk.at(w.now)
	ids := make([]partition.ID, 0, len(s.meter.held))
	for p := range s.meter.held {
		ids = append(ids, p)
	}
	slices.Sort(ids)
	r := &handoff.LoadReport{Partitions: make([]handoff.PartitionLoad, 0, len(ids))}
	served := 1.0 // the share of its partitions' demand the shard serves now
	if demand := w.demandOf(ids); w.load.capacity > 0 && demand > w.load.capacity {
		served = w.load.capacity / demand
		r.LimiterWaitPermille = saturatedWaitPermille
	}
	for _, p := range ids {
		h := s.meter.held[p]
		count := served * w.load.integral(int(p), h.last, w.now)
		if w.noisy() {
			count *= 1 + loadNoise*(2*w.rng.Float64()-1)
		} else {
			// An exact meter: the shard's clock rate error, which makes it
			// measure rates off by up to drift, is cancelled too.
			count *= s.clk.rate
		}
		if h.ewma.Observe(now, count) {
			h.last = w.now
		}
		age := now.Sub(h.since)
		if age < loadReportInterval || (w.load.namespaces[p] == 0 && h.ewma.Rate() == 0) {
			continue
		}
		rate := h.ewma.Rate()
		if w.liar == s {
			rate *= w.opts.LiarFactor
		}
		r.Partitions = append(r.Partitions, handoff.PartitionLoad{
			Partition:  p,
			LoadMilli:  uint32(min(math.Round(rate*1000), math.MaxUint32)),
			Objects:    w.load.objects[p],
			AgeSeconds: uint32(min(age/time.Second, protocol.MaxLoadAgeSeconds)),
		})
	}
	if err := protocol.CheckLoadReport(*r, w.p); err != nil {
		panic("sim: invalid load report: " + err.Error())
	}
	return r
}

// demandOf is the true load of partitions now, summed in their order (ascending, as
// loadReport passes them: a map's order would make the low bits, and so a run, vary).
func (w *world) demandOf(partitions []partition.ID) float64 {
	var d float64
	for _, p := range partitions {
		d += w.load.at(int(p), w.now)
	}
	return d
}

// noisy reports whether the run's samples carry noise.
func (w *world) noisy() bool { return !w.opts.NoNoise }

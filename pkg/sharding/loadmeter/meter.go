package loadmeter

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kshard/kshard/pkg/sharding/gate"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Defaults of Options (docs/design-placement.md §1.2–1.3).
const (
	// DefaultHalfLife is long because placement by load is for long-lived skew (a hot
	// tenant), not bursts: moving a partition costs a warm-up and a short pause of it.
	DefaultHalfLife = 5 * time.Minute
	// DefaultReconcileWeight gives load to reconciles that write nothing (cache-only
	// syncs), at a tenth of a request each: requests are what the client budgets bound.
	DefaultReconcileWeight = 0.1
	// DefaultMinAge is the default report interval: a partition held for less has one
	// sample at most, too few to tell its rate. The coordinator's Welcome replaces it with
	// its own report interval (SetSettings).
	DefaultMinAge = 10 * time.Second
)

// unit is the fixed-point scale of weighted request counts: a request of weight w adds
// round(w × unit), so that counters stay atomic integers.
const unit = 1_000_000

// Options configure a Meter.
type Options struct {
	// HalfLife of every average (> 0).
	HalfLife time.Duration
	// ReconcileWeight is what one reconcile adds to a partition's load, in requests
	// (≥ 0): load = weighted requests/s + ReconcileWeight × reconciles/s.
	ReconcileWeight float64
	// MinAge: partitions held for less are left out of a Snapshot (≥ 0).
	MinAge time.Duration
	// Now is the clock that stamps acquisitions and the meter's start; nil means
	// time.Now. Snapshot takes its time from the caller, who should read this clock
	// (Meter.Now).
	Now func() time.Time
}

// DefaultOptions returns the options the shard runs with.
func DefaultOptions() Options {
	return Options{HalfLife: DefaultHalfLife, ReconcileWeight: DefaultReconcileWeight, MinAge: DefaultMinAge}
}

// Meter counts each partition's API requests, reconciles and client rate-limiter wait,
// and turns them into smoothed rates (Snapshot). Counting is lock-free. The gate's
// Acquired and Released, which it calls under its own write lock (every queue waits
// meanwhile), take the meter's map lock only for a map update; Snapshot holds that lock
// only to copy the held set, and computes the averages under a lock of its own.
type Meter struct {
	opts Options
	// requests (weighted, in 1/unit), reconciles and wait (ns) per partition, indexed by
	// partition ID: dense, so that counting is one atomic add and no lookup.
	requests   []atomic.Uint64
	reconciles []atomic.Uint64
	wait       []atomic.Uint64
	// Counts no partition can be given: requests to paths that name no resource or need
	// no owner (access reviews), and waits of requests made outside any reconcile.
	otherRequests, otherWait atomic.Uint64

	// sampling serializes the updates of the averages (Snapshot, SetSettings): shard and
	// every held entry's rates are touched only under it. Taken before mu, never after.
	sampling sync.Mutex
	// shard averages all counts, held partitions or not, since New.
	shard rates

	// mu guards held (the map, not the rates of its entries), opts' half-life and weight,
	// and controllers.
	mu   sync.Mutex
	held map[partition.ID]*held
	// controllers holds each controller's total rate-limiter wait (ns), shared by its
	// limiters.
	controllers map[string]*atomic.Uint64
}

var _ gate.Observer = (*Meter)(nil)

// counts are a set of counter values, raw.
type counts struct{ requests, reconciles, wait uint64 }

// rates are the averages of one set of counters and the counter values they have
// seen.
type rates struct {
	base                       counts
	requests, reconciles, wait EWMA
}

func newRates(halfLife time.Duration, now time.Time, base counts) rates {
	return rates{base: base, requests: NewEWMA(halfLife, now), reconciles: NewEWMA(halfLife, now), wait: NewEWMA(halfLife, now)}
}

// setHalfLife changes every average's half-life.
func (r *rates) setHalfLife(h time.Duration) {
	r.requests.SetHalfLife(h)
	r.reconciles.SetHalfLife(h)
	r.wait.SetHalfLife(h)
}

// observe samples c at now; a sample not after the last is skipped, its counts kept for
// the next.
func (r *rates) observe(now time.Time, c counts) {
	if !r.requests.Observe(now, float64(c.requests-r.base.requests)/unit) {
		return
	}
	r.reconciles.Observe(now, float64(c.reconciles-r.base.reconciles))
	r.wait.Observe(now, float64(c.wait-r.base.wait)/float64(time.Second))
	r.base = c
}

// held is what the meter keeps of a partition the shard holds.
type held struct {
	partition partition.ID
	since     time.Time
	// rates are touched under Meter.sampling only.
	rates rates
}

// New returns a meter of partitions partitions (the shard's partition count).
func New(partitions int, opts Options) (*Meter, error) {
	if err := partition.ValidateCount(partitions); err != nil {
		return nil, fmt.Errorf("loadmeter: %w", err)
	}
	if opts.HalfLife <= 0 {
		return nil, errors.New("loadmeter: the half-life must be positive")
	}
	if opts.ReconcileWeight < 0 || math.IsNaN(opts.ReconcileWeight) || math.IsInf(opts.ReconcileWeight, 0) {
		return nil, fmt.Errorf("loadmeter: reconcile weight %v: want a finite number ≥ 0", opts.ReconcileWeight)
	}
	if opts.MinAge < 0 {
		return nil, errors.New("loadmeter: the minimum age must not be negative")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Meter{
		opts:        opts,
		requests:    make([]atomic.Uint64, partitions),
		reconciles:  make([]atomic.Uint64, partitions),
		wait:        make([]atomic.Uint64, partitions),
		held:        map[partition.ID]*held{},
		controllers: map[string]*atomic.Uint64{},
	}
	m.shard = newRates(opts.HalfLife, opts.Now(), counts{})
	return m, nil
}

// Now reads the meter's clock (Options.Now).
func (m *Meter) Now() time.Time { return m.opts.Now() }

// Options returns the options the meter runs with (Now filled in; the half-life and
// reconcile weight as SetSettings last set them).
func (m *Meter) Options() Options {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opts
}

// contains reports whether p is one of the meter's partitions.
func (m *Meter) contains(p partition.ID) bool { return int64(p) < int64(len(m.requests)) }

// addRequest counts a request of weight units (in 1/unit) to partition p.
func (m *Meter) addRequest(p partition.ID, units uint64) {
	if m.contains(p) {
		m.requests[p].Add(units)
		return
	}
	m.otherRequests.Add(units)
}

// addWait counts d waited by a request of partition p (ok) or of none (!ok).
func (m *Meter) addWait(p partition.ID, ok bool, d time.Duration) {
	if d <= 0 {
		return
	}
	if ok && m.contains(p) {
		m.wait[p].Add(uint64(d))
		return
	}
	m.otherWait.Add(uint64(d))
}

// Acquired implements gate.Observer: p's averages start now, at 0.
func (m *Meter) Acquired(p partition.ID) {
	if !m.contains(p) {
		return
	}
	now := m.opts.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[p]; ok {
		return
	}
	m.held[p] = &held{partition: p, since: now, rates: newRates(m.opts.HalfLife, now, m.countsOf(p))}
}

// Released implements gate.Observer: p is no longer reported; if acquired again, its
// averages start again from 0.
func (m *Meter) Released(p partition.ID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.held, p)
}

// Done implements gate.Observer: one reconcile of p completed.
func (m *Meter) Done(p partition.ID) {
	if m.contains(p) {
		m.reconciles[p].Add(1)
	}
}

// countsOf reads p's counters.
func (m *Meter) countsOf(p partition.ID) counts {
	return counts{requests: m.requests[p].Load(), reconciles: m.reconciles[p].Load(), wait: m.wait[p].Load()}
}

// totals sums every counter, the unattributed ones included.
func (m *Meter) totals() counts {
	c := counts{requests: m.otherRequests.Load(), wait: m.otherWait.Load()}
	for i := range m.requests {
		c.requests += m.requests[i].Load()
		c.reconciles += m.reconciles[i].Load()
		c.wait += m.wait[i].Load()
	}
	return c
}

// Counts are a meter's raw totals since it was created: monotonic, unsmoothed.
type Counts struct {
	// Requests is the weighted count of API requests.
	Requests float64
	// Reconciles is the count of completed reconciles.
	Reconciles uint64
	// LimiterWait is the time requests waited in the controllers' client rate limiters.
	LimiterWait time.Duration
}

func (c counts) public() Counts {
	return Counts{Requests: float64(c.requests) / unit, Reconciles: c.reconciles, LimiterWait: time.Duration(c.wait)}
}

// CountsOf returns p's raw totals since the meter was created, held or not.
func (m *Meter) CountsOf(p partition.ID) Counts {
	if !m.contains(p) {
		return Counts{}
	}
	return m.countsOf(p).public()
}

// Totals returns the shard's raw totals since the meter was created: every partition's
// and the requests and waits no partition was given.
func (m *Meter) Totals() Counts { return m.totals().public() }

// controllerWait returns the wait counter of controller, shared by its limiters.
func (m *Meter) controllerWait(controller string) *atomic.Uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.controllers[controller]
	if c == nil {
		c = new(atomic.Uint64)
		m.controllers[controller] = c
	}
	return c
}

// ControllerWait returns the time the requests of controller's clients waited in their
// rate limiters since the meter was created.
func (m *Meter) ControllerWait(controller string) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.controllers[controller]; c != nil {
		return time.Duration(c.Load())
	}
	return 0
}

// PartitionLoad is one held partition's smoothed, bias-corrected rates.
type PartitionLoad struct {
	Partition partition.ID
	// Load is Requests + ReconcileWeight × Reconciles, in requests per second: what the
	// coordinator places by.
	Load float64
	// Requests are the weighted API requests per second.
	Requests float64
	// Reconciles are the completed reconciles per second.
	Reconciles float64
	// LimiterWait is the time the partition's requests waited in the controllers' client
	// rate limiters, in seconds per second (it can exceed 1: requests wait in parallel).
	// Not part of Load.
	LimiterWait float64
	// Age is how long the shard has held the partition: the span its averages cover.
	Age time.Duration
}

// Snapshot is the meter's view at one instant.
type Snapshot struct {
	// At is the instant of the sample.
	At time.Time
	// Partitions are the partitions held for at least Options.MinAge, in ascending order,
	// those with no load included.
	Partitions []PartitionLoad
	// Requests, Reconciles and Load are the shard's rates over all its counts (held
	// partitions or not, and requests no partition was given), averaged since the meter
	// was created; Load = Requests + ReconcileWeight × Reconciles.
	Requests, Reconciles, Load float64
	// LimiterWait is the time the shard's requests waited in its controllers' client
	// rate limiters, in seconds per second, shard-wide (waits outside any reconcile
	// included): a sign of saturation.
	LimiterWait float64
}

// SetSettings applies the coordinator's half-life (> 0), reconcile weight (finite, ≥ 0)
// and report interval as the minimum age (≥ 0), which its Welcome carries, so that every
// shard measures alike whatever it was started with: to the averages held now (for their
// samples to come) and to those of partitions acquired later. The minimum age follows the
// report interval so that a partition is left out of one report at most after it is
// acquired (the coordinator reads one left out as 0), at the default interval as at a
// test's scaled-down one.
func (m *Meter) SetSettings(halfLife time.Duration, reconcileWeight float64, minAge time.Duration) error {
	if minAge < 0 {
		return fmt.Errorf("loadmeter: minimum age %s: want ≥ 0", minAge)
	}
	if halfLife <= 0 {
		return fmt.Errorf("loadmeter: half-life %s: want > 0", halfLife)
	}
	if reconcileWeight < 0 || math.IsNaN(reconcileWeight) || math.IsInf(reconcileWeight, 0) {
		return fmt.Errorf("loadmeter: reconcile weight %v: want a finite number ≥ 0", reconcileWeight)
	}
	m.sampling.Lock()
	defer m.sampling.Unlock()
	m.mu.Lock()
	m.opts.HalfLife, m.opts.ReconcileWeight, m.opts.MinAge = halfLife, reconcileWeight, minAge
	held := m.heldLocked()
	m.mu.Unlock()
	m.shard.setHalfLife(halfLife)
	for _, h := range held {
		h.rates.setHalfLife(halfLife)
	}
	return nil
}

// Snapshot samples every counter at now into the averages and returns the rates. A
// sample at or before the last one changes no average (its counts go into the next).
// Callers pass the meter's clock (Now); the shard samples every report interval and at
// every metrics scrape, which the averages allow, since their weights follow time, not
// the number of samples.
func (m *Meter) Snapshot(now time.Time) Snapshot {
	m.sampling.Lock()
	defer m.sampling.Unlock()
	m.mu.Lock()
	w := m.opts.ReconcileWeight
	held := m.heldLocked()
	m.mu.Unlock()
	m.shard.observe(now, m.totals())
	s := Snapshot{
		At:          now,
		Requests:    m.shard.requests.Rate(),
		Reconciles:  m.shard.reconciles.Rate(),
		LimiterWait: m.shard.wait.Rate(),
	}
	s.Load = s.Requests + w*s.Reconciles
	s.Partitions = make([]PartitionLoad, 0, len(held))
	for _, h := range held {
		p := h.partition
		h.rates.observe(now, m.countsOf(p))
		age := h.rates.requests.Age()
		if age < m.opts.MinAge || age <= 0 {
			continue
		}
		pl := PartitionLoad{
			Partition:   p,
			Requests:    h.rates.requests.Rate(),
			Reconciles:  h.rates.reconciles.Rate(),
			LimiterWait: h.rates.wait.Rate(),
			Age:         age,
		}
		pl.Load = pl.Requests + w*pl.Reconciles
		s.Partitions = append(s.Partitions, pl)
	}
	slices.SortFunc(s.Partitions, func(a, b PartitionLoad) int { return cmp.Compare(a.Partition, b.Partition) })
	return s
}

// heldLocked returns the held entries; m.mu must be held. A Snapshot that runs while a
// partition is released may still sample (and report) it once: its entry is dropped from
// the map, not changed.
func (m *Meter) heldLocked() []*held {
	out := make([]*held, 0, len(m.held))
	for _, h := range m.held {
		out = append(out, h)
	}
	return out
}

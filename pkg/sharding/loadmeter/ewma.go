package loadmeter

import (
	"math"
	"time"
)

// EWMA is an exponentially weighted moving average of a rate (events per second) with a
// half-life in time, not in samples, so that samples may come at any interval: a sample
// after dt weighs a = 1 − 2^(−dt/H). It is pure (time is passed in, never read), so the
// simulation and the balancer's tests run the same arithmetic as the shard.
//
// The average starts at 0 at its start time, which biases it low for a few half-lives;
// Rate removes that bias as Adam's optimiser does, dividing by 1 − 2^(−age/H). For a
// constant rate r, sampled at any instants, the raw average after age A is exactly
// r·(1 − 2^(−A/H)), so Rate returns r from the first sample on: a partition that just
// moved reports its true rate within one report interval, with nothing carried over from
// the shard that held it before.
type EWMA struct {
	halfLife    time.Duration
	start, last time.Time
	avg         float64
}

// NewEWMA returns an average at 0 that starts at start, with half-life halfLife (> 0).
func NewEWMA(halfLife time.Duration, start time.Time) EWMA {
	if halfLife <= 0 {
		panic("loadmeter: an EWMA needs a positive half-life")
	}
	return EWMA{halfLife: halfLife, start: start, last: start}
}

// SetHalfLife changes the half-life (> 0) for the samples to come: the average so far
// stays, and later samples weigh by the new one. The coordinator's Welcome can carry a
// half-life other than the one the shard started with. Rate's bias correction then
// assumes the new half-life over the whole age, which is approximate until the samples
// from before the change have faded.
func (e *EWMA) SetHalfLife(halfLife time.Duration) {
	if halfLife <= 0 {
		panic("loadmeter: an EWMA needs a positive half-life")
	}
	e.halfLife = halfLife
}

// Observe adds count events that happened since the last sample (or the start) up to
// now, that is a rate of count/(now − last) over that span. A sample not after the last
// one is ignored and Observe returns false: its count must then be kept for the next.
func (e *EWMA) Observe(now time.Time, count float64) bool {
	dt := now.Sub(e.last)
	if dt <= 0 {
		return false
	}
	rate := count / dt.Seconds()
	e.avg += e.weight(dt) * (rate - e.avg)
	e.last = now
	return true
}

// weight is 1 − 2^(−dt/H), computed without cancellation for small dt.
func (e *EWMA) weight(dt time.Duration) float64 {
	return -math.Expm1(-math.Ln2 * dt.Seconds() / e.halfLife.Seconds())
}

// Raw returns the average without the bias correction.
func (e EWMA) Raw() float64 { return e.avg }

// Rate returns the bias-corrected average: the rate in events per second, weighted
// towards the recent past with the half-life. It is 0 before the first sample.
func (e EWMA) Rate() float64 {
	age := e.Age()
	if age <= 0 {
		return 0
	}
	return e.avg / e.weight(age)
}

// Age returns the span the average covers: from its start to its last sample.
func (e EWMA) Age() time.Duration { return e.last.Sub(e.start) }

// Last returns the time of the last sample (the start before any).
func (e EWMA) Last() time.Time { return e.last }

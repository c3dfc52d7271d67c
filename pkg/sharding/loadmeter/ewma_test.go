package loadmeter

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// near reports whether got is within a relative 1e-9 of want.
func near(got, want float64) bool {
	if want == 0 {
		return math.Abs(got) < 1e-12
	}
	return math.Abs(got-want) <= 1e-9*math.Abs(want)
}

// step is a stretch of constant rate, sampled every interval.
type step struct {
	rate     float64
	span     time.Duration
	interval time.Duration
}

// feed samples steps into e, each step's rate times the interval at each sample.
func feed(e *EWMA, steps []step) {
	now := e.Last()
	for _, s := range steps {
		for end := now.Add(s.span); now.Before(end); {
			next := now.Add(s.interval)
			if next.After(end) {
				next = end
			}
			e.Observe(next, s.rate*next.Sub(now).Seconds())
			now = next
		}
	}
}

// TestEWMA: the half-life and the bias correction. A constant rate is reported exactly
// from the first sample on, however it is sampled; a rate that stops halves its raw
// average in one half-life; a step is followed as the closed form says.
func TestEWMA(t *testing.T) {
	const h = 5 * time.Minute
	tests := []struct {
		name     string
		steps    []step
		wantRate float64
		wantRaw  float64 // checked when not 0
		wantAge  time.Duration
	}{
		{name: "one sample of a constant rate", steps: []step{{rate: 7, span: 10 * time.Second, interval: 10 * time.Second}},
			wantRate: 7, wantRaw: 7 * (1 - math.Pow(2, -10.0/300)), wantAge: 10 * time.Second},
		{name: "constant rate, regular samples", steps: []step{{rate: 3.5, span: 17 * time.Minute, interval: 10 * time.Second}},
			wantRate: 3.5, wantRaw: 3.5 * (1 - math.Pow(2, -17.0/5)), wantAge: 17 * time.Minute},
		{name: "constant rate, irregular samples", steps: []step{
			{rate: 2, span: 3 * time.Second, interval: time.Second},
			{rate: 2, span: 4 * time.Minute, interval: 37 * time.Second},
			{rate: 2, span: 9 * time.Minute, interval: 3 * time.Minute}},
			wantRate: 2, wantAge: 3*time.Second + 13*time.Minute},
		{name: "one half-life after the rate stops, the raw average halves", steps: []step{
			{rate: 10, span: 5 * h, interval: 10 * time.Second},
			{rate: 0, span: h, interval: 10 * time.Second}},
			wantRaw: 10 * (1 - math.Pow(2, -5)) / 2, wantRate: 10 * (1 - math.Pow(2, -5)) / 2 / (1 - math.Pow(2, -6)), wantAge: 6 * h},
		{name: "idle for a half-life, then busy for one", steps: []step{
			{rate: 0, span: h, interval: 10 * time.Second},
			{rate: 6, span: h, interval: 10 * time.Second}},
			// raw = 6·(1 − 2^−1) = 3; corrected by 1 − 2^−2 = 3/4.
			wantRaw: 3, wantRate: 4, wantAge: 2 * h},
		{name: "no sample", wantRate: 0, wantAge: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEWMA(h, t0)
			feed(&e, tc.steps)
			if got := e.Rate(); !near(got, tc.wantRate) {
				t.Errorf("Rate %v, want %v", got, tc.wantRate)
			}
			if tc.wantRaw != 0 && !near(e.Raw(), tc.wantRaw) {
				t.Errorf("Raw %v, want %v", e.Raw(), tc.wantRaw)
			}
			if e.Age() != tc.wantAge {
				t.Errorf("Age %v, want %v", e.Age(), tc.wantAge)
			}
		})
	}
}

// TestEWMASamplingDoesNotMatter: the same events reach the same average whether sampled
// once or in many steps (for a constant rate within the span), so samples taken at
// scrapes between reports do not change the reports.
func TestEWMASamplingDoesNotMatter(t *testing.T) {
	once, many := NewEWMA(time.Minute, t0), NewEWMA(time.Minute, t0)
	once.Observe(t0.Add(40*time.Second), 400)
	for i := 1; i <= 40; i++ {
		many.Observe(t0.Add(time.Duration(i)*time.Second), 10)
	}
	if !near(once.Raw(), many.Raw()) {
		t.Errorf("one sample gives %v, forty give %v", once.Raw(), many.Raw())
	}
}

// TestEWMAIgnoresSamplesNotAfterTheLast: a sample at or before the last one changes
// nothing and says so, so the caller keeps its count for the next.
func TestEWMAIgnoresSamplesNotAfterTheLast(t *testing.T) {
	e := NewEWMA(time.Minute, t0)
	if !e.Observe(t0.Add(10*time.Second), 50) {
		t.Fatal("a sample after the start was refused")
	}
	before := e
	for _, at := range []time.Time{t0.Add(10 * time.Second), t0.Add(5 * time.Second), t0} {
		if e.Observe(at, 1000) {
			t.Errorf("a sample at %v, not after the last (%v), was taken", at.Sub(t0), before.Last().Sub(t0))
		}
	}
	if e != before {
		t.Errorf("refused samples changed the average: %+v, was %+v", e, before)
	}
}

package app

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// leaseReadiness is the coordinator's "lease" readiness check, the one the chart's probe
// keeps (/readyz?exclude=leader): a replica is Ready once it has seen who leads (itself
// or another) and as long as the API server answers its reads and renewals of the election
// Lease, which the elector makes every retry period. A standby that lost the API server
// could not take over; it stops counting as Ready (for a rollout, for the
// PodDisruptionBudget) once no call about the Lease has succeeded for a Lease duration.
type leaseReadiness struct {
	// election is false with leader election disabled: nothing reads the Lease.
	election bool
	within   time.Duration

	seen       atomic.Bool  // a leader was observed
	lastAnswer atomic.Int64 // unix nanoseconds of the last answered call about the Lease
}

// answered records an answered call about the Lease (leader.Callbacks.OnLeaseAnswered).
func (r *leaseReadiness) answered(at time.Time) { r.lastAnswer.Store(at.UnixNano()) }

// check says why the replica is not ready at now, or nil.
func (r *leaseReadiness) check(now time.Time) error {
	if !r.seen.Load() {
		return errors.New("no leader observed yet")
	}
	if !r.election {
		return nil
	}
	last := r.lastAnswer.Load()
	if last == 0 {
		return errors.New("the election Lease was never read or renewed")
	}
	if since := now.Sub(time.Unix(0, last)); since > r.within {
		return fmt.Errorf("the election Lease was last read or renewed %s ago, more than --leader-elect-lease-duration (%s): this replica could not take over",
			since.Round(time.Second), r.within)
	}
	return nil
}

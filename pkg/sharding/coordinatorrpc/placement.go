package coordinatorrpc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/placement"
)

// SetPlacement gives the state machine the namespace count of every partition and the
// pins (placement.Resolve of the coordinator's Namespace informer and its flags), now if
// it leads and at the start of every later leadership. The first call also lets a Lead
// waiting for it (Options.WaitForPlacement) go on. The caller debounces: each call costs
// O(partitions) under the lock every heartbeat needs. Counts of another length than the
// partition count are dropped (logged): they come from another partition map.
func (s *Server) SetPlacement(in placement.Inputs) {
	if n := len(in.Namespaces); n != s.opts.Config.PartitionCount {
		s.log.Error(fmt.Errorf("placement inputs for %d partitions, not %d", n, s.opts.Config.PartitionCount), "dropping namespace counts and pins")
		return
	}
	pins := in.PinTable(s.opts.Config.PartitionCount)
	s.mu.Lock()
	s.placement, s.pinTable = in, pins
	if s.core != nil {
		now := s.opts.Now()
		s.core.SetNamespaces(now, in.Namespaces)
		s.core.SetPins(now, pins)
		s.flushLocked()
	}
	s.mu.Unlock()
	s.placementOnce.Do(func() { close(s.placementReady) })
}

// waitPlacement waits for the first SetPlacement when Options.WaitForPlacement asks for
// it, until ctx ends (Lead bounds it by ClaimTimeout): a leader placing by load without
// namespace counts would take every partition for empty and place by count, then move
// them again once the counts arrive.
func (s *Server) waitPlacement(ctx context.Context) error {
	if !s.opts.WaitForPlacement {
		return nil
	}
	select {
	case <-s.placementReady:
		return nil
	default:
	}
	start := time.Now()
	select {
	case <-s.placementReady:
		s.log.Info("placement inputs arrived: leading", "waited", time.Since(start).String())
		return nil
	case <-ctx.Done():
		if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			return fmt.Errorf("no namespace counts within %s: the coordinator's Namespace informer has not synced (can it list and watch namespaces?)", s.opts.ClaimTimeout)
		}
		return context.Cause(ctx)
	}
}

// applyPlacementLocked gives a new state machine the last placement inputs; s.mu held.
func (s *Server) applyPlacementLocked() {
	if s.core == nil || s.placement.Namespaces == nil {
		return
	}
	now := s.opts.Now()
	s.core.SetNamespaces(now, s.placement.Namespaces)
	s.core.SetPins(now, s.pinTable)
}

// liveGroups returns the shard groups ("" for the default group) that have a member the
// plans place partitions on: not leaving, not fenced out. A pin to a group outside it is
// unsatisfied (the balancer places the partition in the default domain); nil for no
// member, when every pin is.
func liveGroups(members []handoff.MemberInfo) map[string]bool {
	var out map[string]bool
	for _, m := range members {
		if m.Leaving || m.FencedOut {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[m.Group] = true
	}
	return out
}

// balanceCounters are the state machine's cumulative balancer counters of one
// leadership (handoff.BalanceStats), as last exported.
type balanceCounters struct {
	rounds, rejected map[string]uint64
}

// countBalanceLocked adds to the Prometheus counters what the state machine's balancer
// counters gained since the last call of this leadership; s.mu held.
func (s *Server) countBalanceLocked(st handoff.BalanceStats) {
	m := s.opts.Metrics
	s.balanceSeen.rounds = addDeltas(m.BalancerRounds, s.balanceSeen.rounds, st.Rounds)
	s.balanceSeen.rejected = addDeltas(m.LoadReportsRejected, s.balanceSeen.rejected, st.ReportsRejected)
}

// addDeltas adds cur − seen to each label's counter and returns cur (copied).
func addDeltas(c *prometheus.CounterVec, seen, cur map[string]uint64) map[string]uint64 {
	next := make(map[string]uint64, len(cur))
	for k, v := range cur {
		if v > seen[k] {
			c.WithLabelValues(k).Add(float64(v - seen[k]))
		}
		next[k] = v
	}
	return next
}

// updatePlacementGaugesLocked sets the placement series from the state machine's stats
// and members and the edge's pins; s.mu held, s.core set.
func (s *Server) updatePlacementGaugesLocked(st handoff.Stats, members []handoff.MemberInfo) {
	m := s.opts.Metrics
	s.countBalanceLocked(st.Balance)
	m.ShardLoad.Reset()
	for _, mi := range members {
		m.ShardLoad.WithLabelValues(mi.ID).Set(mi.Load)
	}
	m.LoadFair.Reset()
	m.LoadImbalance.Reset()
	hot := 0
	for _, d := range st.Balance.Domains {
		m.LoadFair.WithLabelValues(d.Group).Set(d.Fair)
		m.LoadImbalance.WithLabelValues(d.Group).Set(d.Imbalance)
		hot += d.Hot
	}
	m.HotPartitions.Set(float64(hot))
	m.SuspectMembers.Set(float64(st.Balance.Suspects))
	m.SaturatedMembers.Set(float64(st.Balance.Saturated))
	s.updatePinGaugesLocked(members)
}

// updatePinGaugesLocked sets the pin series, which the edge knows whether or not this
// replica leads; s.mu held.
func (s *Server) updatePinGaugesLocked(members []handoff.MemberInfo) {
	m := s.opts.Metrics
	for state, n := range s.placement.States(liveGroups(members)) {
		m.Pins.WithLabelValues(state).Set(float64(n))
	}
	for reason, n := range s.placement.Ignored {
		m.PinAnnotationsIgnored.WithLabelValues(reason).Set(float64(n))
	}
}

package coordinatorrpc

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// OwnerRecord is the edge of the server-side fence the Server drives when
// Config.OwnerRecord is on (ownerrecord.Fence in production): Claim when leadership
// starts, Apply for each batch the state machine asks for.
type OwnerRecord interface {
	// Claim makes the record this leadership's, written while tenure is valid, and
	// returns what it says: the owners and the highest term found on it.
	Claim(ctx context.Context, term uint32, tenure Tenure) (ownerrecord.Claimed, error)
	// Apply writes owners and returns once the API server enforces them.
	Apply(ctx context.Context, owners map[partition.ID]string) (ownerrecord.Applied, error)
	// Release stops all writes of the record: leadership ended.
	Release()
}

// claimRecord claims the owner record for a new leader's term. Until it succeeds the
// leader cannot grant anything safely, so it is retried (it fails only until the
// namespace informer has synced) for at most Options.ClaimTimeout: a leader that cannot
// claim it by then returns, so that the Lease goes to a replica that can.
func (s *Server) claimRecord(ctx context.Context, term uint32, tenure Tenure) (ownerrecord.Claimed, error) {
	if !s.opts.Config.OwnerRecord {
		return ownerrecord.Claimed{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.ClaimTimeout)
	defer cancel()
	var (
		claimed ownerrecord.Claimed
		last    error
	)
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		var err error
		if claimed, err = s.opts.Record.Claim(ctx, term, tenure); err != nil {
			last = err
			s.log.Info("claiming the owner record failed; retrying", "term", term, "err", err.Error())
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return claimed, fmt.Errorf("claiming the owner record for term %d within %s: %w (last error: %v)", term, s.opts.ClaimTimeout, err, last)
	}
	s.log.Info("claimed the owner record", "term", term, "entries", len(claimed.Owners),
		"highestTerm", claimed.HighestTerm, "highestIn", claimed.HighestIn, "rolesAboveTerm", claimed.Above)
	return claimed, nil
}

// startRecordLocked writes the owner record batch the state machine asks for on its
// own goroutine, outside s.mu (a write and its enforcement take a few API round trips;
// heartbeats must not wait for them), and feeds the result back under it. The state
// machine hands out one batch at a time; a result for a core that is no longer current
// is dropped, and the context of the write ends with the leadership. s.mu must be held.
func (s *Server) startRecordLocked() {
	core := s.core
	req, ok := core.TakeRecordRequest()
	if !ok {
		return
	}
	ctx := s.leadCtx
	go func() {
		a, err := s.opts.Record.Apply(ctx, req.Owners)
		m := s.opts.Metrics
		if err != nil {
			m.RecordErrors.Inc()
		} else {
			m.RecordWrites.Inc()
			m.RecordObjectWrites.Add(float64(a.Writes))
			m.RecordWrite.Observe(a.Write.Seconds())
			m.RecordEnforce.Observe(a.Enforce.Seconds())
			m.RecordPartitions.Observe(float64(len(req.Owners)))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.core != core {
			return
		}
		if err != nil {
			s.log.Info("owner record write failed; the partitions it moves wait for the retry",
				"generation", req.Gen, "partitions", len(req.Owners), "err", err.Error())
		} else {
			s.log.V(1).Info("owner record enforced", "generation", req.Gen, "partitions", len(req.Owners), "writes", a.Writes,
				"write", a.Write.String(), "enforce", a.Enforce.String(), "reviews", a.Reviews, "probeRounds", a.Probes, "namespace", a.ProbeNamespace)
		}
		core.RecordApplied(s.opts.Now(), req.Gen, err)
		s.flushLocked()
	}()
}

package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/leader"
)

// reLeadEvery is the least time between two re-leads on shards' claims of a newer term:
// a re-lead starts a fresh state machine, which grants nothing for a session TTL, and a
// claim is only a claim (see leadership.skipPast).
const reLeadEvery = time.Minute

// leadership runs the terms of one election win of this replica. It leads with the term
// the election recorded and, when a higher term turns up that the Lease does not explain
// (Lead's TermBehindError, or a shard's claim: skipPast), records a term above it and
// leads again without giving the Lease up. A replica that cannot lead at all ends the
// election (stepDown): the elector releases the Lease for another replica, and the
// process exits so that its restart campaigns afresh. Nothing it reads is ever a reason
// to hold the Lease without serving.
type leadership struct {
	log logr.Logger
	srv leadServer
	// termAbove records a term above seen (leader.Options.TermAbove).
	termAbove func(ctx context.Context, seen uint64) (uint64, error)
	stepDown  context.CancelCauseFunc
	// term is the term being led, 0 while following (read by the step-down check).
	term atomic.Uint64
	// waiting is when this replica started a term it does not serve yet (Unix nanoseconds,
	// 0 otherwise), for the liveness check.
	waiting atomic.Int64

	mu       sync.Mutex
	endTerm  context.CancelCauseFunc // ends the term being led; nil while following
	lastSkip time.Time               // the last re-lead on a shard's claim
}

// leadServer is what leadership needs of coordinatorrpc.Server.
type leadServer interface {
	Lead(ctx context.Context, term uint32, tenure coordinatorrpc.Tenure) error
	Leading() bool
	NewerTermClaim() (shard string, term uint32)
}

// run leads from term t until ctx (the election's) ends or leading fails.
func (l *leadership) run(ctx context.Context, t uint64, tenure coordinatorrpc.Tenure) {
	defer l.term.Store(0)
	defer l.waiting.Store(0)
	for {
		termCtx, end := context.WithCancelCause(ctx)
		l.mu.Lock()
		l.endTerm = end
		l.mu.Unlock()
		l.term.Store(t)
		l.waiting.Store(time.Now().UnixNano())
		err := l.srv.Lead(termCtx, uint32(t), tenure)
		cause := context.Cause(termCtx)
		l.mu.Lock()
		l.endTerm = nil
		l.mu.Unlock()
		end(nil)
		if ctx.Err() != nil {
			return // the election ended
		}
		var behind *coordinatorrpc.TermBehindError
		switch {
		case errors.As(err, &behind), err == nil && errors.As(cause, &behind):
		case err != nil:
			l.log.Error(err, "cannot lead: giving the Lease up", "term", t)
			l.stepDown(fmt.Errorf("cannot lead: %w", err))
			return
		default:
			return
		}
		l.waiting.Store(time.Now().UnixNano())
		next, err := l.termAbove(ctx, uint64(behind.Term))
		if err != nil {
			l.log.Error(err, "cannot record a term above one found: giving the Lease up", "term", t, "found", behind.Term, "source", behind.Source)
			l.stepDown(fmt.Errorf("cannot record a term above %d: %w", behind.Term, err))
			return
		}
		l.log.Info("a term above this leader's outlived its record: leading again with a term above it",
			"term", t, "found", behind.Term, "source", behind.Source, "newTerm", next)
		t = next
	}
}

// skipPast makes the leadership lead again with a term above claim, which shard reported
// holding and the Lease does not explain (confirmStepDown found no newer leader): its
// term record was lost (the term Lease deleted, an etcd restore) while it ran. Refused,
// and logged as suspicious, when no coordinator can have led claim yet
// (leader.PlausibleTerm) or a re-lead on a claim happened less than reLeadEvery ago: a
// claim is only a claim, and a re-lead costs a session TTL without grants.
func (l *leadership) skipPast(shard string, claim uint32, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	kv := []any{"shard", shard, "claimedTerm", claim, "term", l.term.Load()}
	switch {
	case l.endTerm == nil || uint64(claim) <= l.term.Load():
		return false
	case !leader.PlausibleTerm(uint64(claim), now):
		l.log.Info("SUSPICIOUS: a shard claims an epoch of a term no coordinator can have led yet; refusing the shard", kv...)
		return false
	case !l.lastSkip.IsZero() && now.Sub(l.lastSkip) < reLeadEvery:
		l.log.Info("a shard claims an epoch of a newer term again: refusing it until the next re-lead is allowed", append(kv, "lastReLead", l.lastSkip)...)
		return false
	}
	l.lastSkip = now
	l.endTerm(&coordinatorrpc.TermBehindError{Term: claim, Source: fmt.Sprintf("epochs held by shard %s, with no newer leader in the Lease", shard)})
	return true
}

// stuck reports an error when this replica has held the Lease for longer than bound
// without serving: for the liveness check, so that a replica wedged in taking over is
// restarted and its Lease goes to another.
func (l *leadership) stuck(now time.Time, bound time.Duration) error {
	since := l.waiting.Load()
	if since == 0 || l.srv.Leading() {
		return nil
	}
	if waited := now.Sub(time.Unix(0, since)); waited > bound {
		return fmt.Errorf("holds the leader Lease but has not served for %s (term %d)", waited.Round(time.Second), l.term.Load())
	}
	return nil
}

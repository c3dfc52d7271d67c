package app

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/kshard/kshard/pkg/sharding/leader"
)

// confirmStepDown steps down (ends the leadership through stepDown) only if the API
// server shows that the leader of term was replaced. A shard's report of a newer term is
// a claim that anybody with a client certificate can make; stepping down on it would let
// them make every leader exit in turn. Without evidence this replica keeps leading (if it
// was in fact replaced, its Lease renewal fails and the leader election ends its
// leadership anyway), and the caller may lead again above the claim
// (leadership.skipPast). It reports whether it stepped down.
func confirmStepDown(ctx context.Context, log logr.Logger, v leader.Verifier, term uint64, timeout time.Duration,
	claim string, stepDown context.CancelCauseFunc) bool {
	if term == 0 {
		return false // not leading (any more)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	evidence, err := v.Deposed(ctx, term)
	if evidence != "" {
		log.Info("stepping down: the Lease confirms a newer leader", "claim", claim, "evidence", evidence, "term", term)
		stepDown(fmt.Errorf("%s, and the Lease confirms it: %s", claim, evidence))
		return true
	}
	kv := []any{"claim", claim, "term", term}
	if err != nil {
		kv = append(kv, "lookupError", err.Error())
	}
	log.Info("a shard claims a newer leader term, but the Lease shows this replica still leads at the highest term recorded: "+
		"keeping leadership", kv...)
	return false
}

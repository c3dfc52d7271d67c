package handoff

import (
	"errors"
	"fmt"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// Reason says why a message was refused. The edge counts rejections by
// reason in a metric: bad or stale messages are expected after reconnects
// and leader changes, and are never trusted.
type Reason uint8

const (
	// ReasonNone is not a rejection.
	ReasonNone Reason = iota
	// ReasonUnknownShard: no live session for that shard (expired or never
	// said hello).
	ReasonUnknownShard
	// ReasonStaleIncarnation: from an older process of the shard.
	ReasonStaleIncarnation
	// ReasonStaleSession: from an older (or duplicate) session of the
	// current process, or a command for a session the shard left.
	ReasonStaleSession
	// ReasonStaleEpoch: about an older grant than the one in force.
	ReasonStaleEpoch
	// ReasonNotHolder: about a partition the sender does not hold or is not
	// moving.
	ReasonNotHolder
	// ReasonBadPartition: the partition does not exist.
	ReasonBadPartition
	// ReasonFencedOut: the shard was cut off for not releasing in time and
	// must wait for its session to expire.
	ReasonFencedOut
	// ReasonNewerTerm: a shard reports an epoch of a newer leader term, so
	// this coordinator is deposed and must step down.
	ReasonNewerTerm
	// ReasonNotWelcomed: a command arrived before the Welcome of its session.
	ReasonNotWelcomed
	// ReasonMalformed: missing fields or unknown kind.
	ReasonMalformed
	// ReasonTooManyMembers: a hello from a new shard while MaxMembers
	// shards already have a session.
	ReasonTooManyMembers

	// NumReasons is the number of reasons, for arrays indexed by Reason.
	NumReasons
)

var reasonNames = [...]string{
	"none", "unknown_shard", "stale_incarnation", "stale_session", "stale_epoch",
	"not_holder", "bad_partition", "fenced_out", "newer_term", "not_welcomed", "malformed", "too_many_members",
}

// String returns a metric label value.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason_%d", uint8(r))
}

// Rejection is the error returned for a refused message.
type Rejection struct {
	Reason    Reason
	Shard     string
	Partition partition.ID
	Epoch     Epoch
	Detail    string
}

func (r *Rejection) Error() string {
	msg := "rejected (" + r.Reason.String() + ")"
	if r.Shard != "" {
		msg += " from " + r.Shard
	}
	if r.Detail != "" {
		msg += ": " + r.Detail
	}
	return msg
}

// ReasonOf returns the reason of a rejection error, ReasonNone for nil and
// ReasonMalformed for any other error.
func ReasonOf(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ReasonMalformed
}

func reject(reason Reason, shard string, detail string, args ...any) *Rejection {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	return &Rejection{Reason: reason, Shard: shard, Detail: detail}
}

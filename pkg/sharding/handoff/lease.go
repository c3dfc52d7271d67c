package handoff

import "time"

// Lease is a shard's fencing clock: its right to work. Each acknowledged
// heartbeat sent at local time s extends the right to s+TTL; with no fresh
// acknowledgement the shard stops every worker at the deadline (self-fence)
// but keeps its caches. Only the shard's own clock is used: the send time is
// remembered locally and the acknowledgement carries only a sequence number,
// so clock offsets between machines do not matter, only clock rates do (see
// the package documentation for the margin this needs).
//
// The edge must read now from a monotonic clock (time.Now in the same
// process keeps a monotonic reading), never from a wire timestamp.
type Lease struct {
	ttl      time.Duration
	deadline time.Time
}

// NewLease returns a lease that grants nothing until extended.
func NewLease(ttl time.Duration) Lease { return Lease{ttl: ttl} }

// TTL returns the lease duration.
func (l *Lease) TTL() time.Duration { return l.ttl }

// SetTTL changes the duration used by later extensions; the coordinator
// dictates it in every Welcome.
func (l *Lease) SetTTL(ttl time.Duration) { l.ttl = ttl }

// Extend records the acknowledgement of a heartbeat sent at sentAt (local
// clock). Deadlines only move forward: an acknowledgement of an older
// heartbeat that arrives late never shortens the lease.
func (l *Lease) Extend(sentAt time.Time) {
	if d := sentAt.Add(l.ttl); d.After(l.deadline) {
		l.deadline = d
	}
}

// CanWork reports whether the shard may work at local time now.
func (l *Lease) CanWork(now time.Time) bool { return now.Before(l.deadline) }

// Deadline is the instant the right to work ends; the edge arms a timer to
// stop all workers then, and gives every reconcile a context with this
// deadline.
func (l *Lease) Deadline() time.Time { return l.deadline }

// Revoke ends the right to work at once (the coordinator ended the session).
func (l *Lease) Revoke() { l.deadline = time.Time{} }

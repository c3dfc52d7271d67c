package handoff

import "fmt"

// Epoch orders every grant and revocation of a partition. It only grows,
// across coordinator leaders too: the high 32 bits are the leader's term
// (for example the Lease's leaseTransitions+1) and the low 32 bits a counter
// of that leader. A shard refuses any command older than what it has seen
// for the partition, so a delayed command from a deposed leader or from an
// earlier handoff can never resurrect ownership.
type Epoch uint64

// MakeEpoch composes an epoch from a leader term and that leader's counter.
func MakeEpoch(term, counter uint32) Epoch {
	return Epoch(uint64(term)<<32 | uint64(counter))
}

// Term returns the leader term that issued e.
func (e Epoch) Term() uint32 { return uint32(e >> 32) }

// Counter returns the per-leader counter part of e.
func (e Epoch) Counter() uint32 { return uint32(e) }

func (e Epoch) String() string { return fmt.Sprintf("%d.%d", e.Term(), e.Counter()) }

// Session identifies one hello-to-close conversation of one shard process.
// Incarnation changes on every process start and must grow across restarts
// of the same shard ID (the edge uses the process start time in Unix
// nanoseconds); Seq grows with every hello of that process. Every command
// carries the session it belongs to and a shard ignores commands of any
// other session, so a shard that reconnected (or moved to a new leader)
// cannot act on what the old stream still delivers.
type Session struct {
	Incarnation uint64
	Seq         uint64
}

// Less orders sessions: first by incarnation, then by hello sequence.
func (s Session) Less(o Session) bool {
	if s.Incarnation != o.Incarnation {
		return s.Incarnation < o.Incarnation
	}
	return s.Seq < o.Seq
}

func (s Session) String() string { return fmt.Sprintf("%d/%d", s.Incarnation, s.Seq) }

package handoff

import (
	"fmt"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// SlotState is what a shard holds for one partition.
type SlotState uint8

const (
	// SlotWarming: caches are syncing (after Prepare, or after an Acquire
	// that arrived cold); the partition is not worked.
	SlotWarming SlotState = iota + 1
	// SlotPrepared: caches are synced, the partition is not worked.
	SlotPrepared
	// SlotAcquired: the partition is worked while the lease is valid.
	SlotAcquired
	// SlotReleasing: no new keys are taken; in-flight work drains.
	SlotReleasing
)

var slotStateNames = [...]string{"", "warming", "prepared", "acquired", "releasing"}

func (s SlotState) String() string {
	if int(s) < len(slotStateNames) && s != 0 {
		return slotStateNames[s]
	}
	return fmt.Sprintf("SlotState(%d)", uint8(s))
}

// Held is one partition a shard holds, as reported in a Hello or kept by a
// Welcome. Epoch is the epoch of the grant (Prepare or Acquire) that gave it.
type Held struct {
	Partition partition.ID
	Epoch     Epoch
	State     SlotState
}

// ReportKind is the kind of a shard-to-coordinator message.
type ReportKind uint8

const (
	// ReportHello opens a session and reports everything the shard holds.
	// It is also heartbeat 0: the Welcome acknowledges it.
	ReportHello ReportKind = iota + 1
	// ReportHeartbeat keeps the session (and the lease) alive. Leaving set
	// asks the coordinator to move every partition away.
	ReportHeartbeat
	// ReportPrepared: caches of Partition are synced at Epoch.
	ReportPrepared
	// ReportReleased: Partition is no longer worked and its in-flight work
	// has finished; the shard will not work it again unless it gets an
	// Acquire newer than Epoch.
	ReportReleased
	// ReportAcquired confirms an Acquire, so the coordinator stops resending.
	ReportAcquired
)

var reportKindNames = [...]string{"", "hello", "heartbeat", "prepared", "released", "acquired"}

func (k ReportKind) String() string {
	if int(k) < len(reportKindNames) && k != 0 {
		return reportKindNames[k]
	}
	return fmt.Sprintf("ReportKind(%d)", uint8(k))
}

// Report is one message from a shard to the coordinator. Which fields are
// meaningful depends on Kind; the others are zero.
type Report struct {
	Kind    ReportKind
	Shard   string
	Session Session
	// Seq numbers heartbeats within a session (Hello is 0). The shard keeps
	// its own send time per Seq; no timestamp crosses the wire, so the two
	// clocks never have to agree on absolute time.
	Seq uint64
	// Leaving (Hello, Heartbeat): the shard got SIGTERM and wants to hand
	// everything over before it exits.
	Leaving bool
	// Held (Hello): every partition the shard holds. Acquired entries are
	// reported only while the lease is valid (a fenced shard reports them
	// as prepared), which is what lets a new leader adopt them safely.
	Held []Held
	// Partition and Epoch (Prepared, Released, Acquired).
	Partition partition.ID
	Epoch     Epoch
}

// CommandKind is the kind of a coordinator-to-shard message.
type CommandKind uint8

const (
	// CmdWelcome answers a Hello: session parameters and which of the
	// reported partitions the shard keeps (it drops the others before the
	// lease is extended). It acknowledges the Hello as heartbeat 0.
	CmdWelcome CommandKind = iota + 1
	// CmdAck acknowledges heartbeat Seq of Session.
	CmdAck
	// CmdPrepare: warm caches of Partition, do not work it, report Prepared.
	CmdPrepare
	// CmdRelease: stop working Partition, drain in-flight work, drop its
	// caches, report Released with Epoch.
	CmdRelease
	// CmdAcquire: work Partition from now on (warming first if cold; listing it
	// again first if Refresh).
	CmdAcquire
	// CmdCancel: drop prepared caches of Partition; the planned move was
	// called off. Acquired partitions are not affected.
	CmdCancel
	// CmdSessionEnded: the coordinator no longer honours this session (it
	// expired or was fenced out). The shard stops all work at once and says
	// Hello again.
	CmdSessionEnded
	// CmdFarewell: a leaving shard holds nothing any more and may exit.
	CmdFarewell
)

var commandKindNames = [...]string{"", "welcome", "ack", "prepare", "release", "acquire", "cancel", "session-ended", "farewell"}

func (k CommandKind) String() string {
	if int(k) < len(commandKindNames) && k != 0 {
		return commandKindNames[k]
	}
	return fmt.Sprintf("CommandKind(%d)", uint8(k))
}

// Command is one message from the coordinator to one shard session. The
// edge sends it on the stream of that session and drops it if that stream is
// gone. Which fields are meaningful depends on Kind.
type Command struct {
	Kind    CommandKind
	To      string
	Session Session
	// Seq (Ack): the heartbeat acknowledged.
	Seq uint64
	// TTL and HeartbeatInterval (Welcome): the lease the shard must apply,
	// so both sides use the coordinator's configuration.
	TTL               time.Duration
	HeartbeatInterval time.Duration
	// Keep (Welcome): the reported partitions the shard keeps.
	Keep []Held
	// Partition and Epoch (Prepare, Release, Acquire, Cancel).
	Partition partition.ID
	Epoch     Epoch
	// Refresh (Acquire): this shard was told to warm the partition while another shard
	// could still write to it: the source of a move, which works it until it releases
	// it. A shard that prepared it lists it again before working it: caches warmed
	// meanwhile may show the other shard's last writes in one informer and not yet in
	// another (a Job's status counting a pod whose finalizer removal the pod cache has
	// not seen), and a sync on such a view acts twice. Grants carry none: a grant is
	// warmed ahead of its Acquire only when nobody can write the partition any more.
	Refresh bool
}

func (c Command) String() string {
	switch c.Kind {
	case CmdPrepare, CmdRelease, CmdAcquire, CmdCancel:
		return fmt.Sprintf("%s(p%d@%s)→%s[%s]", c.Kind, c.Partition, c.Epoch, c.To, c.Session)
	case CmdAck:
		return fmt.Sprintf("ack(%d)→%s[%s]", c.Seq, c.To, c.Session)
	case CmdWelcome:
		return fmt.Sprintf("welcome(keep %d)→%s[%s]", len(c.Keep), c.To, c.Session)
	default:
		return fmt.Sprintf("%s→%s[%s]", c.Kind, c.To, c.Session)
	}
}

func (r Report) String() string {
	switch r.Kind {
	case ReportPrepared, ReportReleased, ReportAcquired:
		return fmt.Sprintf("%s(p%d@%s)←%s[%s]", r.Kind, r.Partition, r.Epoch, r.Shard, r.Session)
	case ReportHeartbeat:
		return fmt.Sprintf("heartbeat(%d,leaving=%v)←%s[%s]", r.Seq, r.Leaving, r.Shard, r.Session)
	default:
		return fmt.Sprintf("hello(held %d,leaving=%v)←%s[%s]", len(r.Held), r.Leaving, r.Shard, r.Session)
	}
}

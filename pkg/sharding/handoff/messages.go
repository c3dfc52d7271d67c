package handoff

import (
	"errors"
	"fmt"
	"math"
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
	// Group (Hello): the shard group the shard runs in ("" for the default group). It is
	// fixed for the life of a process: a hello of the same incarnation naming another group
	// is refused. The edge has validated it (and, with token authentication, checked it
	// against the shard's pod); placement by load puts a group's pinned partitions on its
	// members (balance.Member.Group).
	Group string
	// Held (Hello): every partition the shard holds. Acquired entries are
	// reported only while the lease is valid (a fenced shard reports them
	// as prepared), which is what lets a new leader adopt them safely.
	Held []Held
	// Partition and Epoch (Prepared, Released, Acquired).
	Partition partition.ID
	Epoch     Epoch
	// Load (Heartbeat): the shard's load snapshot, on the first heartbeat after each
	// Welcome and then every Command.Load.ReportInterval; nil on the others. The edge has
	// checked its syntax (protocol.CheckLoadReport); the coordinator drops and counts what
	// it claims wrongly (partitions not held, absurd loads) and never refuses the
	// heartbeat for it.
	Load *LoadReport
}

// LoadReport is a shard's full snapshot of the load of the partitions it holds
// (docs/design-placement.md §1.4): the coordinator's balancer places partitions by it. It
// is a snapshot, never a delta, so nothing is lost with a heartbeat, a session or a leader:
// a held partition left out carries no load, or has been held for less than the shard
// meter's minimum age (10 s), which includes one just acquired again.
type LoadReport struct {
	// Partitions are the entries, strictly ascending by partition: held partitions that
	// hold a namespace or had load.
	Partitions []PartitionLoad
	// LimiterWaitPermille is, shard-wide, the milliseconds per second the shard's
	// controller clients waited in their rate limiters. It tells a saturated shard apart
	// (its measured load is then below its demand): at BalanceConfig.SaturationWait or
	// more, plans count the shard's partitions above their load. It is not a cost of any
	// partition, since the same partition waits on a busy shard and not on an idle one.
	LimiterWaitPermille uint32
}

// PartitionLoad is one partition's entry in a LoadReport.
type PartitionLoad struct {
	Partition partition.ID
	// LoadMilli is the partition's load × 1000 in requests/s: weighted API requests per
	// second plus LoadSettings.ReconcileWeight × reconciles per second, a moving average
	// with LoadSettings.HalfLife, bias-corrected for the time the shard has held it (so a
	// partition just moved reports its true rate, not a rate rising from 0).
	LoadMilli uint32
	// Objects the shard caches for the partition, over all informers: what moving it
	// costs its next owner to warm.
	Objects uint32
	// AgeSeconds is how long the shard has held the partition, saturating at the wire's
	// cap (protocol.MaxLoadAgeSeconds): a new leader learns from it which partitions moved
	// lately.
	AgeSeconds uint32
}

// Bounds of LoadSettings that both the coordinator's configuration and a shard reading a
// Welcome enforce, so that a coordinator never starts with settings its shards refuse.
const (
	// MaxLoadReportInterval bounds LoadSettings.ReportInterval: a report an hour is far
	// slower than any balancer can use.
	MaxLoadReportInterval = time.Hour
	// MaxLoadHalfLife bounds LoadSettings.HalfLife.
	MaxLoadHalfLife = 24 * time.Hour
	// MaxReconcileWeight bounds LoadSettings.ReconcileWeight: a reconcile weighs a
	// fraction of a request by design (0.1), a thousand requests is absurd.
	MaxReconcileWeight = 1000
)

// LoadSettings tell shards how to measure and report load; the coordinator sends its
// own in every Welcome (Command.Load), so every shard measures alike whatever its flags.
// The zero value asks for no reports, as a coordinator that predates them does.
type LoadSettings struct {
	// ReportInterval: a shard attaches a LoadReport to the first heartbeat after a
	// Welcome and then to every heartbeat ReportInterval apart (every
	// ReportInterval/HeartbeatInterval-th). Zero: no reports.
	ReportInterval time.Duration
	// HalfLife of the moving average of a partition's load.
	HalfLife time.Duration
	// ReconcileWeight is what one reconcile counts, in requests.
	ReconcileWeight float64
}

// ReportEvery is how many heartbeats apart a shard sends its load reports at heartbeat
// interval hb: ReportInterval in heartbeat intervals rounded to the nearest, at least 1 (a
// changed --heartbeat-interval needs no second flag); 0 without reports.
func (l LoadSettings) ReportEvery(hb time.Duration) uint64 {
	if l.ReportInterval <= 0 || hb <= 0 {
		return 0
	}
	return max(1, uint64((l.ReportInterval+hb/2)/hb))
}

// Cadence is the interval shards actually report at, ReportEvery heartbeats: what the
// bounds that count reports (the half-life's, the balance interval's) and the meter's
// minimum age must use. 0 without reports.
func (l LoadSettings) Cadence(hb time.Duration) time.Duration {
	return time.Duration(l.ReportEvery(hb)) * hb
}

// Validate reports settings a shard must refuse. Zero everywhere is valid (no reports);
// with reports on, the half-life must be positive.
func (l LoadSettings) Validate() error {
	var errs []error
	if l.ReportInterval < 0 || l.ReportInterval > MaxLoadReportInterval {
		errs = append(errs, fmt.Errorf("load report interval %v must be in [0, %v] (0: no reports)", l.ReportInterval, MaxLoadReportInterval))
	}
	if l.HalfLife < 0 || l.HalfLife > MaxLoadHalfLife || (l.ReportInterval > 0 && l.HalfLife == 0) {
		errs = append(errs, fmt.Errorf("load half-life %v must be in (0, %v] (0 only without reports)", l.HalfLife, MaxLoadHalfLife))
	}
	if w := l.ReconcileWeight; math.IsNaN(w) || w < 0 || w > MaxReconcileWeight {
		errs = append(errs, fmt.Errorf("reconcile weight %v must be in [0, %v]", w, MaxReconcileWeight))
	}
	return errors.Join(errs...)
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
	// Load (Welcome): how the shard measures and reports load (Config.Load).
	Load LoadSettings
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
		if r.Group != "" {
			return fmt.Sprintf("hello(held %d,leaving=%v,group=%s)←%s[%s]", len(r.Held), r.Leaving, r.Group, r.Shard, r.Session)
		}
		return fmt.Sprintf("hello(held %d,leaving=%v)←%s[%s]", len(r.Held), r.Leaving, r.Shard, r.Session)
	}
}

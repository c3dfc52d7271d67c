package protocol

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// LeaderMetadataKey is the gRPC trailer key in which a coordinator that is not the leader
// names the leader's address when it refuses a session, so that a shard given several
// addresses goes straight to the leader. Both gRPC edges use it.
const LeaderMetadataKey = "kshard-leader"

// Hasher names the namespace-to-partition hash both sides must share.
const Hasher = "xxhash64"

// ErrMalformed wraps every validation failure.
var ErrMalformed = errors.New("malformed message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Stats are the shard's self-reported numbers carried on hellos and heartbeats.
type Stats struct {
	AcquiredPartitions uint32
	PreparedPartitions uint32
	Namespaces         uint64
	CachedObjects      uint64
	QueueDepth         uint64
	Fenced             bool
}

func statsToWire(s Stats) *kshardv1.ShardStats {
	return &kshardv1.ShardStats{
		AcquiredPartitions: s.AcquiredPartitions, PreparedPartitions: s.PreparedPartitions,
		Namespaces: s.Namespaces, CachedObjects: s.CachedObjects, QueueDepth: s.QueueDepth, Fenced: s.Fenced,
	}
}

func statsFromWire(w *kshardv1.ShardStats) Stats {
	if w == nil {
		return Stats{}
	}
	return Stats{
		AcquiredPartitions: w.AcquiredPartitions, PreparedPartitions: w.PreparedPartitions,
		Namespaces: w.Namespaces, CachedObjects: w.CachedObjects, QueueDepth: w.QueueDepth, Fenced: w.Fenced,
	}
}

// LoadReport is a shard's load snapshot on a heartbeat (handoff.Report.Load): the state
// machine's type, so that the coordinator's edge hands it on unchanged.
type LoadReport = handoff.LoadReport

// PartitionLoad is one partition's entry in a LoadReport.
type PartitionLoad = handoff.PartitionLoad

// LoadSettings are a Welcome's load-report settings (handoff.Command.Load).
type LoadSettings = handoff.LoadSettings

// Bounds of a LoadReport's entries.
const (
	// MaxLoadAgeSeconds caps PartitionLoad.AgeSeconds (2 bytes on the wire): past 4.5
	// hours a partition's age tells the balancer nothing more.
	MaxLoadAgeSeconds = 16383
	// MaxLoadObjects bounds PartitionLoad.Objects: a billion cached objects in one
	// partition is no real shard's.
	MaxLoadObjects = 1_000_000_000
)

// CheckLoadReport checks a report's syntax against partitionCount partitions: at most one
// entry per partition, strictly ascending and below partitionCount, ages at most
// MaxLoadAgeSeconds and objects at most MaxLoadObjects. Both edges use it: the coordinator
// refuses a heartbeat whose report fails it as malformed, and a shard does not send one
// that would.
func CheckLoadReport(r LoadReport, partitionCount int) error {
	if len(r.Partitions) > partitionCount {
		return malformed("load report of %d partitions, more than the %d that exist", len(r.Partitions), partitionCount)
	}
	for i, e := range r.Partitions {
		if int64(e.Partition) >= int64(partitionCount) {
			return malformed("load report: partition %d out of range [0, %d)", e.Partition, partitionCount)
		}
		if i > 0 && e.Partition <= r.Partitions[i-1].Partition {
			return malformed("load report: partition %d after %d, not strictly ascending", e.Partition, r.Partitions[i-1].Partition)
		}
		if e.AgeSeconds > MaxLoadAgeSeconds {
			return malformed("load report: partition %d aged %ds, above the cap of %d", e.Partition, e.AgeSeconds, MaxLoadAgeSeconds)
		}
		if e.Objects > MaxLoadObjects {
			return malformed("load report: partition %d with %d objects, above %d", e.Partition, e.Objects, MaxLoadObjects)
		}
	}
	return nil
}

// loadFromWire validates a heartbeat's load report; nil in, nil out.
func loadFromWire(w *kshardv1.LoadReport, partitionCount int) (*LoadReport, error) {
	if w == nil {
		return nil, nil
	}
	n := len(w.Partitions)
	if len(w.LoadMilli) != n || len(w.Objects) != n || len(w.AgeSeconds) != n {
		return nil, malformed("load report of %d partitions with %d loads, %d object counts and %d ages",
			n, len(w.LoadMilli), len(w.Objects), len(w.AgeSeconds))
	}
	if n > partitionCount { // before allocating
		return nil, malformed("load report of %d partitions, more than the %d that exist", n, partitionCount)
	}
	r := &LoadReport{LimiterWaitPermille: w.LimiterWaitPermille}
	if n > 0 {
		r.Partitions = make([]PartitionLoad, n)
		for i := range n {
			r.Partitions[i] = PartitionLoad{Partition: partition.ID(w.Partitions[i]), LoadMilli: w.LoadMilli[i],
				Objects: w.Objects[i], AgeSeconds: w.AgeSeconds[i]}
		}
	}
	if err := CheckLoadReport(*r, partitionCount); err != nil {
		return nil, err
	}
	return r, nil
}

// loadToWire encodes a load report as four parallel lists; nil in, nil out.
func loadToWire(r *LoadReport) *kshardv1.LoadReport {
	if r == nil {
		return nil
	}
	w := &kshardv1.LoadReport{LimiterWaitPermille: r.LimiterWaitPermille}
	if n := len(r.Partitions); n > 0 {
		w.Partitions, w.LoadMilli, w.Objects, w.AgeSeconds = make([]uint32, n), make([]uint32, n), make([]uint32, n), make([]uint32, n)
		for i, e := range r.Partitions {
			w.Partitions[i], w.LoadMilli[i], w.Objects[i], w.AgeSeconds[i] = uint32(e.Partition), e.LoadMilli, e.Objects, e.AgeSeconds
		}
	}
	return w
}

// ValidateShardID checks a shard ID the way Kubernetes checks a pod name (a DNS-1123
// subdomain), because it is one in a cluster and it appears in metric labels.
func ValidateShardID(id string) error {
	if errs := validation.IsDNS1123Subdomain(id); len(errs) > 0 {
		return malformed("shard id %q: %v", id, errs)
	}
	return nil
}

// ValidateGroup checks a shard group's name as a Hello carries it: empty (the default
// group) or a DNS-1123 label, because it is also the value of the shard pod's label
// kshard.io/shard-group, which the coordinator compares it with, and appears in metric
// labels and logs.
func ValidateGroup(g string) error {
	if g == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(g); len(errs) > 0 {
		return malformed("shard group %q: %v", g, errs)
	}
	return nil
}

func sessionFromWire(s *kshardv1.Session) (handoff.Session, error) {
	if s == nil || s.Incarnation == 0 || s.Seq == 0 {
		return handoff.Session{}, malformed("missing or zero session")
	}
	return handoff.Session{Incarnation: s.Incarnation, Seq: s.Seq}, nil
}

func sessionToWire(s handoff.Session) *kshardv1.Session {
	return &kshardv1.Session{Incarnation: s.Incarnation, Seq: s.Seq}
}

func checkPartition(p uint32, epoch uint64, count int) error {
	if int64(p) >= int64(count) {
		return malformed("partition %d out of range [0, %d)", p, count)
	}
	if epoch == 0 {
		return malformed("partition %d with epoch 0", p)
	}
	return nil
}

// heldFromWire validates held partitions; a Welcome's keep list may omit the state.
func heldFromWire(in []*kshardv1.Held, count int, stateOptional bool) ([]handoff.Held, error) {
	if len(in) > count {
		return nil, malformed("%d held partitions, more than the %d that exist", len(in), count)
	}
	seen := make(map[uint32]bool, len(in))
	out := make([]handoff.Held, 0, len(in))
	for _, h := range in {
		if h == nil {
			return nil, malformed("nil held entry")
		}
		if err := checkPartition(h.Partition, h.Epoch, count); err != nil {
			return nil, err
		}
		if seen[h.Partition] {
			return nil, malformed("partition %d listed twice", h.Partition)
		}
		seen[h.Partition] = true
		var st handoff.SlotState
		if !(stateOptional && h.State == kshardv1.SlotState_SLOT_STATE_UNSPECIFIED) {
			var err error
			if st, err = slotFromWire(h.State); err != nil {
				return nil, err
			}
		}
		out = append(out, handoff.Held{Partition: partition.ID(h.Partition), Epoch: handoff.Epoch(h.Epoch), State: st})
	}
	return out, nil
}

func heldToWire(in []handoff.Held) []*kshardv1.Held {
	out := make([]*kshardv1.Held, 0, len(in))
	for _, h := range in {
		out = append(out, &kshardv1.Held{Partition: uint32(h.Partition), Epoch: uint64(h.Epoch), State: slotToWire(h.State)})
	}
	return out
}

func slotFromWire(s kshardv1.SlotState) (handoff.SlotState, error) {
	switch s {
	case kshardv1.SlotState_SLOT_STATE_WARMING:
		return handoff.SlotWarming, nil
	case kshardv1.SlotState_SLOT_STATE_PREPARED:
		return handoff.SlotPrepared, nil
	case kshardv1.SlotState_SLOT_STATE_ACQUIRED:
		return handoff.SlotAcquired, nil
	case kshardv1.SlotState_SLOT_STATE_RELEASING:
		return handoff.SlotReleasing, nil
	}
	return 0, malformed("unknown slot state %v", s)
}

func slotToWire(s handoff.SlotState) kshardv1.SlotState {
	switch s {
	case handoff.SlotWarming:
		return kshardv1.SlotState_SLOT_STATE_WARMING
	case handoff.SlotPrepared:
		return kshardv1.SlotState_SLOT_STATE_PREPARED
	case handoff.SlotAcquired:
		return kshardv1.SlotState_SLOT_STATE_ACQUIRED
	case handoff.SlotReleasing:
		return kshardv1.SlotState_SLOT_STATE_RELEASING
	}
	return kshardv1.SlotState_SLOT_STATE_UNSPECIFIED
}

// Incoming is a validated shard message.
type Incoming struct {
	Report handoff.Report
	// Stats is set on hellos and heartbeats.
	Stats *Stats
	// BuildVersion is set on hellos.
	BuildVersion string
}

// ReportFromWire validates a shard message. shardID is the ID the stream's Hello named
// ("" for the first message, which must be a Hello); partitionCount bounds partitions.
func ReportFromWire(m *kshardv1.ShardMessage, shardID string, partitionCount int) (Incoming, error) {
	if m == nil {
		return Incoming{}, malformed("nil message")
	}
	sess, err := sessionFromWire(m.Session)
	if err != nil {
		return Incoming{}, err
	}
	r := handoff.Report{Shard: shardID, Session: sess}
	in := Incoming{}
	switch k := m.Kind.(type) {
	case *kshardv1.ShardMessage_Hello:
		h := k.Hello
		if h == nil {
			return Incoming{}, malformed("empty hello")
		}
		if err := ValidateShardID(h.ShardId); err != nil {
			return Incoming{}, err
		}
		if shardID != "" && h.ShardId != shardID {
			return Incoming{}, malformed("hello for shard %q on the stream of %q", h.ShardId, shardID)
		}
		if len(h.BuildVersion) > 256 {
			return Incoming{}, malformed("build version longer than 256 bytes")
		}
		if err := ValidateGroup(h.Group); err != nil {
			return Incoming{}, err
		}
		held, err := heldFromWire(h.Held, partitionCount, false)
		if err != nil {
			return Incoming{}, err
		}
		r.Kind, r.Shard, r.Group, r.Leaving, r.Held = handoff.ReportHello, h.ShardId, h.Group, h.Leaving, held
		st := statsFromWire(h.Stats)
		in.Stats, in.BuildVersion = &st, h.BuildVersion
	case *kshardv1.ShardMessage_Heartbeat:
		if shardID == "" {
			return Incoming{}, malformed("heartbeat before hello")
		}
		if k.Heartbeat == nil || k.Heartbeat.Seq == 0 {
			return Incoming{}, malformed("heartbeat without seq")
		}
		load, err := loadFromWire(k.Heartbeat.Load, partitionCount)
		if err != nil {
			return Incoming{}, err
		}
		r.Kind, r.Seq, r.Leaving, r.Load = handoff.ReportHeartbeat, k.Heartbeat.Seq, k.Heartbeat.Leaving, load
		st := statsFromWire(k.Heartbeat.Stats)
		in.Stats = &st
	case *kshardv1.ShardMessage_Prepared:
		err = partitionReport(&r, handoff.ReportPrepared, k.Prepared, shardID, partitionCount)
	case *kshardv1.ShardMessage_Released:
		err = partitionReport(&r, handoff.ReportReleased, k.Released, shardID, partitionCount)
	case *kshardv1.ShardMessage_Acquired:
		err = partitionReport(&r, handoff.ReportAcquired, k.Acquired, shardID, partitionCount)
	default:
		return Incoming{}, malformed("message without a kind")
	}
	if err != nil {
		return Incoming{}, err
	}
	in.Report = r
	return in, nil
}

func partitionReport(r *handoff.Report, kind handoff.ReportKind, pr *kshardv1.PartitionReport, shardID string, count int) error {
	if shardID == "" {
		return malformed("%s before hello", kind)
	}
	if pr == nil {
		return malformed("empty %s", kind)
	}
	if err := checkPartition(pr.Partition, pr.Epoch, count); err != nil {
		return err
	}
	r.Kind, r.Partition, r.Epoch = kind, partition.ID(pr.Partition), handoff.Epoch(pr.Epoch)
	return nil
}

// ReportToWire encodes a shard's report with its stats. A heartbeat's Load goes on the
// wire as it is: the shard checks it first (CheckLoadReport).
func ReportToWire(r handoff.Report, stats Stats, buildVersion string) (*kshardv1.ShardMessage, error) {
	m := &kshardv1.ShardMessage{Session: sessionToWire(r.Session)}
	pr := &kshardv1.PartitionReport{Partition: uint32(r.Partition), Epoch: uint64(r.Epoch)}
	switch r.Kind {
	case handoff.ReportHello:
		m.Kind = &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{
			ShardId: r.Shard, Group: r.Group, BuildVersion: buildVersion, Leaving: r.Leaving, Held: heldToWire(r.Held), Stats: statsToWire(stats),
		}}
	case handoff.ReportHeartbeat:
		m.Kind = &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{Seq: r.Seq, Leaving: r.Leaving, Stats: statsToWire(stats), Load: loadToWire(r.Load)}}
	case handoff.ReportPrepared:
		m.Kind = &kshardv1.ShardMessage_Prepared{Prepared: pr}
	case handoff.ReportReleased:
		m.Kind = &kshardv1.ShardMessage_Released{Released: pr}
	case handoff.ReportAcquired:
		m.Kind = &kshardv1.ShardMessage_Acquired{Acquired: pr}
	default:
		return nil, fmt.Errorf("unknown report kind %v", r.Kind)
	}
	return m, nil
}

// SessionInfo is what a Welcome adds beyond the state machine's Command.
type SessionInfo struct {
	PartitionCount int
	Hasher         string
	LeaderTerm     uint32
}

// CommandToWire encodes a coordinator command.
func CommandToWire(c handoff.Command, info SessionInfo) (*kshardv1.CoordinatorMessage, error) {
	m := &kshardv1.CoordinatorMessage{Session: sessionToWire(c.Session)}
	pc := &kshardv1.PartitionCommand{Partition: uint32(c.Partition), Epoch: uint64(c.Epoch)}
	switch c.Kind {
	case handoff.CmdWelcome:
		w := &kshardv1.Welcome{
			Ttl: durationpb.New(c.TTL), HeartbeatInterval: durationpb.New(c.HeartbeatInterval),
			Keep: heldToWire(c.Keep), PartitionCount: uint32(info.PartitionCount), Hasher: info.Hasher, LeaderTerm: info.LeaderTerm,
			ReconcileWeight: c.Load.ReconcileWeight,
		}
		// Zero settings are left out, as a coordinator that predates them sends them.
		if c.Load.ReportInterval != 0 {
			w.LoadReportInterval = durationpb.New(c.Load.ReportInterval)
		}
		if c.Load.HalfLife != 0 {
			w.LoadHalfLife = durationpb.New(c.Load.HalfLife)
		}
		m.Kind = &kshardv1.CoordinatorMessage_Welcome{Welcome: w}
	case handoff.CmdAck:
		m.Kind = &kshardv1.CoordinatorMessage_Ack{Ack: &kshardv1.HeartbeatAck{Seq: c.Seq}}
	case handoff.CmdPrepare:
		m.Kind = &kshardv1.CoordinatorMessage_Prepare{Prepare: pc}
	case handoff.CmdRelease:
		m.Kind = &kshardv1.CoordinatorMessage_Release{Release: pc}
	case handoff.CmdAcquire:
		pc.Refresh = c.Refresh
		m.Kind = &kshardv1.CoordinatorMessage_Acquire{Acquire: pc}
	case handoff.CmdCancel:
		m.Kind = &kshardv1.CoordinatorMessage_Cancel{Cancel: pc}
	case handoff.CmdSessionEnded:
		m.Kind = &kshardv1.CoordinatorMessage_SessionEnded{SessionEnded: &kshardv1.SessionEnded{Reason: "session no longer honoured"}}
	case handoff.CmdFarewell:
		m.Kind = &kshardv1.CoordinatorMessage_Farewell{Farewell: &kshardv1.Farewell{}}
	default:
		return nil, fmt.Errorf("unknown command kind %v", c.Kind)
	}
	return m, nil
}

// CommandFromWire validates a coordinator message addressed to shard; partitionCount and
// hasher are the shard's own configuration, which a Welcome must match.
func CommandFromWire(m *kshardv1.CoordinatorMessage, shard string, partitionCount int, hasher string) (handoff.Command, error) {
	if m == nil {
		return handoff.Command{}, malformed("nil message")
	}
	sess, err := sessionFromWire(m.Session)
	if err != nil {
		return handoff.Command{}, err
	}
	c := handoff.Command{To: shard, Session: sess}
	part := func(kind handoff.CommandKind, pc *kshardv1.PartitionCommand) error {
		if pc == nil {
			return malformed("empty %s", kind)
		}
		if err := checkPartition(pc.Partition, pc.Epoch, partitionCount); err != nil {
			return err
		}
		if pc.Refresh && kind != handoff.CmdAcquire {
			return malformed("%s with refresh, which only an acquire carries", kind)
		}
		c.Kind, c.Partition, c.Epoch, c.Refresh = kind, partition.ID(pc.Partition), handoff.Epoch(pc.Epoch), pc.Refresh
		return nil
	}
	switch k := m.Kind.(type) {
	case *kshardv1.CoordinatorMessage_Welcome:
		w := k.Welcome
		if w == nil {
			return c, malformed("empty welcome")
		}
		if int(w.PartitionCount) != partitionCount || w.Hasher != hasher {
			return c, fmt.Errorf("%w: coordinator uses %d partitions hashed with %q, this shard %d with %q: run both with the same --partitions",
				ErrMalformed, w.PartitionCount, w.Hasher, partitionCount, hasher)
		}
		ttl, hb := w.Ttl.AsDuration(), w.HeartbeatInterval.AsDuration()
		if ttl <= 0 || hb <= 0 || hb >= ttl || ttl > time.Hour {
			return c, malformed("welcome with TTL %s and heartbeat interval %s", ttl, hb)
		}
		keep, err := heldFromWire(w.Keep, partitionCount, true)
		if err != nil {
			return c, err
		}
		// Absent (a coordinator that predates load reports) reads as zero: no reports.
		load := LoadSettings{ReportInterval: w.LoadReportInterval.AsDuration(), HalfLife: w.LoadHalfLife.AsDuration(),
			ReconcileWeight: w.ReconcileWeight}
		if err := load.Validate(); err != nil {
			return c, malformed("welcome: %v", err)
		}
		c.Kind, c.TTL, c.HeartbeatInterval, c.Keep, c.Load = handoff.CmdWelcome, ttl, hb, keep, load
	case *kshardv1.CoordinatorMessage_Ack:
		if k.Ack == nil || k.Ack.Seq == 0 {
			return c, malformed("ack without seq")
		}
		c.Kind, c.Seq = handoff.CmdAck, k.Ack.Seq
	case *kshardv1.CoordinatorMessage_Prepare:
		err = part(handoff.CmdPrepare, k.Prepare)
	case *kshardv1.CoordinatorMessage_Release:
		err = part(handoff.CmdRelease, k.Release)
	case *kshardv1.CoordinatorMessage_Acquire:
		err = part(handoff.CmdAcquire, k.Acquire)
	case *kshardv1.CoordinatorMessage_Cancel:
		err = part(handoff.CmdCancel, k.Cancel)
	case *kshardv1.CoordinatorMessage_SessionEnded:
		c.Kind = handoff.CmdSessionEnded
	case *kshardv1.CoordinatorMessage_Farewell:
		c.Kind = handoff.CmdFarewell
	default:
		return c, malformed("message without a kind")
	}
	return c, err
}

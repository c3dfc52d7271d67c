package handoff

import (
	"maps"
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

// The owner record (Config.OwnerRecord) is the server-side fence's input: an object the
// API server's admission reads to refuse a shard's writes to partitions the record does
// not name it the owner of. With it on, the coordinator sends no Acquire for a partition
// until the edge reports that the API server enforces a record naming the new owner: from
// that moment anything the previous owner still sends is refused, whatever state that
// process is in. Everything the coordinator's owner table says is mirrored into the record
// (adoptions too, so a record the previous leader left behind is corrected), in batches:
// one RecordRequest at a time, holding every change wanted since the last one.
//
// Because late writes are refused, a shard whose stream broke (a killed process) need not
// be waited out until its lease has certainly run out: with Config.SeizeAfter, a member
// disconnected that long is dropped, its partitions are recorded to their new owners and
// granted at once.

// RecordRequest asks the edge to make the owner record say Owners (partition → shard;
// only the partitions that change) and to wait until the API server enforces it. The edge
// answers with RecordApplied, with the same Gen.
type RecordRequest struct {
	Gen    uint64
	Owners map[partition.ID]string

	// incs are the owners' incarnations the request was made for (the coordinator's
	// copy only): an answer confirms the record for those processes.
	incs map[partition.ID]uint64
}

// RecordKnown tells a new coordinator what the owner record already says (the edge reads
// it when it starts leading), so adoptions that match it cost no write. Those entries are
// treated as enforced: they were written before this leader's term began, and a new leader
// grants nothing before its grace has passed. Call it right after New.
func (c *Coordinator) RecordKnown(owners map[partition.ID]string) {
	for p, s := range owners {
		if int(p) < len(c.parts) {
			c.parts[p].recorded = s
		}
	}
	c.recDirty = true
}

// TakeRecordRequest returns the record change the coordinator waits for. At most one is
// out at a time: until RecordApplied answers it, no other is handed out, and changes
// wanted meanwhile go into the next one.
func (c *Coordinator) TakeRecordRequest() (RecordRequest, bool) {
	if !c.cfg.OwnerRecord || !c.recDirty || c.recOut != nil || c.now.Before(c.recRetryAt) {
		return RecordRequest{}, false
	}
	// The edge asks after every message it feeds; the partitions are walked only when an
	// owner or the record changed since the last walk (or a write came back).
	c.recDirty = false
	// Called after every message the edge feeds: allocate only when something changed.
	var (
		owners map[partition.ID]string
		incs   map[partition.ID]uint64
	)
	for p := range c.parts {
		if want, ok := c.recordWant(p); ok {
			if owners == nil {
				owners, incs = map[partition.ID]string{}, map[partition.ID]uint64{}
			}
			owners[partition.ID(p)] = want
			incs[partition.ID(p)] = c.parts[p].ownerInc
		}
	}
	if len(owners) == 0 {
		return RecordRequest{}, false
	}
	c.recGen++
	c.recOut = &RecordRequest{Gen: c.recGen, Owners: owners, incs: incs}
	c.stats.RecordRequests++
	return RecordRequest{Gen: c.recGen, Owners: maps.Clone(owners)}, true
}

// RecordApplied answers the request of generation gen: err is nil when the record says
// what the request asked and the API server enforces it. Acquires that waited for it are
// sent in this call. After an error, the next request is handed out after RetryInterval.
func (c *Coordinator) RecordApplied(now time.Time, gen uint64, err error) {
	now = c.observe(now)
	req := c.recOut
	if req == nil || req.Gen != gen {
		c.stats.RecordResultsStale++
		c.step(now)
		return
	}
	c.recOut = nil
	c.recDirty = true // what changed while it was out, or the failed batch again
	if err != nil {
		c.stats.RecordErrors++
		c.stats.LastRecordError = err.Error()
		c.recRetryAt = now.Add(c.cfg.RetryInterval)
		c.step(now)
		return
	}
	// In partition order: the outbox must not depend on map iteration, or a run would
	// not be reproducible (the simulation replays runs by seed).
	ps := slices.Sorted(maps.Keys(req.Owners))
	for _, p := range ps {
		s := req.Owners[p]
		pr := &c.parts[p]
		pr.recorded, pr.recordedInc, pr.recordedFor = s, req.incs[p], true
		if c.recordReady(int(p)) && !pr.acked && pr.move == nil {
			pr.lastSent = now
			c.sendAcquireCmd(int(p))
		}
	}
	c.step(now)
}

// recordWant reports the owner the record should name for p, when it differs from what
// the record is known to say: the owner of the coordinator's table. An unowned partition
// keeps its entry (nobody is granted it, so nobody competes with a late write of its last
// owner); it is rewritten when it is granted. A partition granted but not yet acquired
// is also written when the record names its owner but this leader has not had that
// enforced for the owner's current process (see part.recordedInc): the grant then waits
// for a write that would fail, were this leader deposed.
func (c *Coordinator) recordWant(p int) (string, bool) {
	pr := &c.parts[p]
	if pr.owner == "" || (pr.owner == pr.recorded && (pr.acked || pr.recordedFor && pr.recordedInc == pr.ownerInc)) {
		return "", false
	}
	return pr.owner, true
}

// recordReady reports whether an Acquire of p may be sent: always without the owner
// record, otherwise once the enforced record names p's owner.
func (c *Coordinator) recordReady(p int) bool {
	if !c.cfg.OwnerRecord {
		return true
	}
	pr := &c.parts[p]
	if pr.owner == "" || pr.recorded != pr.owner || !pr.recordedFor || pr.recordedInc != pr.ownerInc {
		return false
	}
	// A write still out for p names somebody else (the owner changed back while it was
	// being written): wait for it, then the next request names the owner again.
	if c.recOut != nil {
		if s, ok := c.recOut.Owners[partition.ID(p)]; ok && (s != pr.owner || c.recOut.incs[partition.ID(p)] != pr.ownerInc) {
			return false
		}
	}
	return true
}

// sendAcquire sends p's Acquire to its owner, or leaves it for RecordApplied when the
// record does not name the owner yet. lastSent is set either way: retry resends only
// once the record is ready.
func (c *Coordinator) sendAcquire(p int, now time.Time) {
	pr := &c.parts[p]
	pr.lastSent = now
	if c.recordReady(p) {
		c.sendAcquireCmd(p)
	}
}

// seize drops every member whose stream has been closed for SeizeAfter without a new
// hello: with the owner record, its late writes are refused once its partitions are
// recorded to others, so its lease need not be waited out. The new target is computed
// without debounce: a crash is not the start of a rolling update.
func (c *Coordinator) seize(now time.Time) {
	if !c.cfg.OwnerRecord || c.cfg.SeizeAfter <= 0 || now.Before(c.graceUntil) {
		return
	}
	for i := 0; i < len(c.ids); {
		m := c.members[c.ids[i]]
		if m.connected || m.disconnectedAt.IsZero() || now.Sub(m.disconnectedAt) < c.cfg.SeizeAfter {
			i++
			continue
		}
		c.stats.Seizures++
		c.dropMember(m, now, now, EventMemberSeized)
		c.urgent = true
	}
}

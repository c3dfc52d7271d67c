package handoff

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/ring"
)

// hello opens (or reopens) a session and reconciles what the shard holds.
func (c *Coordinator) hello(now time.Time, r Report) *Rejection {
	if r.Shard == "" {
		return reject(ReasonMalformed, "", "hello without shard ID")
	}
	for _, h := range r.Held {
		if h.Epoch.Term() > c.term {
			c.stats.NewerTermSeen = true
			return reject(ReasonNewerTerm, r.Shard, "holds p%d at %s, this leader's term is %d", h.Partition, h.Epoch, c.term)
		}
	}
	m := c.members[r.Shard]
	if m != nil {
		switch {
		case r.Session.Incarnation < m.session.Incarnation:
			return reject(ReasonStaleIncarnation, r.Shard, "hello of %s, current %s", r.Session, m.session)
		case r.Session.Incarnation == m.session.Incarnation && !m.session.Less(r.Session):
			return reject(ReasonStaleSession, r.Shard, "hello of %s, current %s", r.Session, m.session)
		case r.Session.Incarnation == m.session.Incarnation && m.fencedOut:
			// Its old lease must run out before it may start over.
			return reject(ReasonFencedOut, r.Shard, "fenced out until %v", c.expiresAt(m))
		case r.Session.Incarnation > m.session.Incarnation:
			// The process restarted. The old one is presumably dead, but its
			// partitions are only free once its lease has certainly run out.
			c.dropMember(m, now, c.expiresAt(m), EventMemberRestarted)
			m = nil
		}
	} else if t, ok := c.tombs[r.Shard]; ok && !t.session.Less(r.Session) {
		reason := ReasonStaleSession
		if r.Session.Incarnation < t.session.Incarnation {
			reason = ReasonStaleIncarnation
		}
		return reject(reason, r.Shard, "hello of %s after session %s ended", r.Session, t.session)
	}
	if m != nil && r.Group != m.group {
		// A process's group is its flag: a new one comes with a new incarnation. Taking it
		// here would change a member's domain under a target computed for the old one.
		return reject(ReasonMalformed, r.Shard, "hello names group %q, this process (incarnation %d) named %q", r.Group, m.session.Incarnation, m.group)
	}
	if m == nil && len(c.members) >= c.cfg.MaxMembers {
		// Checked after a restarted member was dropped above: a new
		// incarnation of a member replaces it and never counts twice.
		return reject(ReasonTooManyMembers, r.Shard, "%d shards have a session, the most this coordinator accepts (MaxMembers)", len(c.members))
	}
	if m == nil {
		m = &member{id: r.Shard, group: r.Group, joined: now}
		c.addMember(m)
		c.stats.Joins++
		c.emit(Event{Kind: EventMemberJoined, At: now, Shard: r.Shard})
	}
	m.session = r.Session
	if now.After(m.lastRecv) {
		m.lastRecv = now
	}
	m.connected = true
	m.disconnectedAt = time.Time{}
	m.farewell = time.Time{}
	if m.loadSinceWelcome {
		m.loadSinceWelcome = false
		c.bal.waits.invalidate()
	}
	if r.Leaving && !m.leaving {
		c.markLeaving(m, now)
	}
	keep := c.reconcile(m, r.Held, now)
	c.send(m, Command{Kind: CmdWelcome, TTL: c.cfg.SessionTTL, HeartbeatInterval: c.cfg.HeartbeatInterval, Keep: keep, Load: c.cfg.Load})
	return nil
}

// heartbeat acknowledges a heartbeat of the current session.
func (c *Coordinator) heartbeat(now time.Time, r Report) *Rejection {
	m := c.members[r.Shard]
	if m == nil || r.Session != m.session {
		if m != nil && r.Session.Less(m.session) {
			if r.Session.Incarnation < m.session.Incarnation {
				return reject(ReasonStaleIncarnation, r.Shard, "heartbeat of %s, current %s", r.Session, m.session)
			}
			return reject(ReasonStaleSession, r.Shard, "heartbeat of %s, current %s", r.Session, m.session)
		}
		// Nobody honours this session (it expired): tell the shard, which
		// stops working at once and says hello again.
		c.outbox = append(c.outbox, Command{Kind: CmdSessionEnded, To: r.Shard, Session: r.Session})
		return reject(ReasonUnknownShard, r.Shard, "no session %s", r.Session)
	}
	if m.fencedOut {
		c.send(m, Command{Kind: CmdSessionEnded})
		return reject(ReasonFencedOut, r.Shard, "heartbeat while fenced out")
	}
	if now.After(m.lastRecv) {
		m.lastRecv = now
	}
	if r.Leaving && !m.leaving {
		c.markLeaving(m, now)
	}
	if r.Load != nil && c.earlyReport(m, now) {
		// Sooner than the cadence the Welcome set: a shard that reports on every
		// heartbeat would cost the coordinator a table update per heartbeat. Dropped and
		// counted; the heartbeat is acknowledged (see below).
		c.bal.rejected[rejectEarly]++
	} else if r.Load != nil {
		// Whatever a report claims (a partition this member does not hold, an absurd
		// load), the heartbeat is acknowledged: a load report must never fence a shard.
		// What is wrong in it is dropped and counted (loadReport).
		if !m.loadSinceWelcome {
			m.loadSinceWelcome = true
			c.bal.waits.invalidate()
		}
		m.loadReports++
		m.loadAt = now
		m.loadEntries = len(r.Load.Partitions)
		c.loadReport(m, r.Load, now)
	}
	c.send(m, Command{Kind: CmdAck, Seq: r.Seq})
	return nil
}

func (c *Coordinator) markLeaving(m *member, now time.Time) {
	m.leaving = true
	c.bal.waits.invalidate()
	c.stats.Leaves++
	c.emit(Event{Kind: EventMemberLeaving, At: now, Shard: m.id})
}

// expire drops every member whose lease has certainly run out, and forgets
// tombs past their time. It looks at them only once the earliest may have
// come (expiryFloor, tombFloor).
func (c *Coordinator) expire(now time.Time) {
	if !now.Before(c.expiryFloor) {
		var floor time.Time
		for i := 0; i < len(c.ids); {
			m := c.members[c.ids[i]]
			at := c.expiresAt(m)
			if !now.Before(at) {
				c.dropMember(m, now, now, EventMemberExpired)
				// Silent for TTL + margin: gone, not the start of a rolling update,
				// so its partitions are re-targeted without the debounce.
				c.urgent = true
				continue // ids shrank; same index is the next member
			}
			if floor.IsZero() || at.Before(floor) {
				floor = at
			}
			i++
		}
		c.expiryFloor = floor
	}
	if c.tombFloor.IsZero() || now.After(c.tombFloor) {
		var floor time.Time
		for id, t := range c.tombs {
			if now.After(t.until) {
				delete(c.tombs, id)
				continue
			}
			if floor.IsZero() || t.until.Before(floor) {
				floor = t.until
			}
		}
		c.tombFloor = floor
	}
}

// dropMember removes m and frees what it held. Its partitions become
// grantable at hold: now for an expired lease, later for a restarted
// process whose old lease may still run.
func (c *Coordinator) dropMember(m *member, now, hold time.Time, why EventKind) {
	c.removeMember(m.id)
	c.tombs[m.id] = tomb{session: m.session, until: now.Add(4 * (c.cfg.SessionTTL + c.cfg.Margin))}
	inc := m.session.Incarnation
	switch why {
	case EventMemberExpired:
		c.stats.Expirations++
	case EventMemberRestarted:
		c.stats.Restarts++
	}
	c.emit(Event{Kind: why, At: now, Shard: m.id})
	for p := range c.parts {
		pr := &c.parts[p]
		if n := len(pr.stale); n > 0 {
			pr.stale = slices.DeleteFunc(pr.stale, func(s staleHolder) bool { return s.shard == m.id && s.inc == inc })
			if len(pr.stale) < n && hold.After(pr.holdUntil) {
				pr.holdUntil = hold // its old lease may still run
			}
		}
		if mv := pr.move; mv != nil && mv.to == m.id && mv.toInc == inc {
			if mv.releasing {
				mv.to = "" // the owner still has to finish releasing
			} else {
				c.abortMove(p, now, false)
			}
		}
		if pr.owner != m.id || pr.ownerInc != inc {
			continue
		}
		switch {
		case pr.move != nil && !hold.After(now):
			// The source is gone: the release is complete, the prepared
			// destination (if still there) takes over warm.
			c.completeRelease(p, now)
		case pr.move != nil:
			c.abortMove(p, now, true)
			c.orphan(p, now, hold)
		default:
			c.orphan(p, now, hold)
		}
		pr.seized = pr.owner == "" && why == EventMemberSeized
	}
}

// applyMembership asks for a new target assignment once membership has been
// quiet for Debounce (or changing for MaxDebounce). The ring is not
// computed here: it costs O(members × ReplicationFactor × log) and an edge
// that serialises the state machine with a lock would stop acknowledging
// heartbeats meanwhile (every shard fences once that exceeds its TTL). It
// becomes a RingRequest the edge computes outside its lock (OffloadRing),
// or that is computed at once when nobody offloads it.
func (c *Coordinator) applyMembership(now time.Time) {
	desired := c.desiredMembers()
	if !slices.Equal(desired, c.desired) {
		c.desired = desired
		c.lastChange = now
		if !c.dirty {
			c.dirty = true
			c.dirtySince = now
		}
	}
	first := c.target == nil
	if !first && !c.dirty {
		return
	}
	// Cold: the target assigns nothing and every expected shard is here (ExpectedMembers).
	cold := c.cfg.ExpectedMembers > 0 && len(c.applied) == 0 && len(desired) >= c.cfg.ExpectedMembers
	if !first && !c.urgent && !cold && now.Sub(c.lastChange) < c.cfg.Debounce && now.Sub(c.dirtySince) < c.cfg.MaxDebounce {
		return
	}
	c.dirty, c.urgent = false, false
	switch {
	case c.ringReq != nil && slices.Equal(c.desired, c.ringReq.Members):
		return // being computed
	case c.ringReq == nil && !first && slices.Equal(c.desired, c.applied):
		return // nothing to change
	}
	// A newer generation supersedes any request still being computed: its
	// result, when it comes, is ignored.
	c.ringGen++
	if !first && slices.Equal(c.desired, c.applied) {
		c.ringReq = nil // membership went back to what the target is for
		return
	}
	c.ringReq = &RingRequest{Gen: c.ringGen, Members: slices.Clone(c.desired), Current: c.currentOwners(), ring: c.ring}
	c.ringTaken = false
	c.stats.RingRequests++
	if c.loadPlacement() {
		c.ringReq.Kind = balance.Membership
		c.ringReq.plan = c.planInput(c.ringReq.Members, c.ringReq.Current, false, now)
	}
	c.computeInline(now)
}

// computeInline computes the request just made at once, unless the edge offloads it.
func (c *Coordinator) computeInline(now time.Time) {
	if !c.offloadRing {
		req, _ := c.TakeRingRequest()
		res, err := req.Compute()
		c.ringComputed(now, req.Gen, res, err)
	}
}

// currentOwners is what the target is computed from besides the members
// (ring.AssignFrom): per partition, where it is going if a move is under way
// (the destination the previous target chose), else its owner, "" if
// nobody. Copied under the lock, a few microseconds even at 65,536
// partitions (P string headers; the strings are shared).
func (c *Coordinator) currentOwners() []string {
	out := make([]string, len(c.parts))
	for p := range c.parts {
		pr := &c.parts[p]
		if mv := pr.move; mv != nil && mv.to != "" {
			out[p] = mv.to
		} else {
			out[p] = pr.owner
		}
	}
	return out
}

// RingRequest asks the edge to compute the target assignment of a member
// set from the current owners. Members and Current belong to the request;
// Compute may run on any goroutine without the coordinator's lock.
type RingRequest struct {
	// Gen identifies the request; RingComputed ignores a result whose
	// generation is no longer the latest (membership changed meanwhile).
	Gen uint64
	// Members is the sorted member set the target is for.
	Members []string
	// Current is, per partition, who owns it or is receiving it when the
	// request was made ("" for nobody). The target keeps partitions where
	// they are as far as balance allows, so it depends on them.
	Current []string
	// Kind is the plan's kind with load placement: Membership for a membership change
	// or a first target, Balance for a load round. Count placement ignores it.
	Kind balance.Kind
	ring *ring.Ring // immutable, safe for concurrent use
	// plan is the rest of balance.Plan's input with load placement (members with their
	// New flags, costs, objects, namespaces, pins, cooling, params), nil with count
	// placement. Its slices belong to the request.
	plan *balance.Input
}

// Compute returns the owner of every partition for the request's members
// and current owners: ring.AssignFrom with count placement, balance.Plan with
// load placement. It touches no coordinator state.
func (r RingRequest) Compute() (RingResult, error) {
	if r.ring == nil {
		return RingResult{}, errors.New("handoff: empty ring request")
	}
	if r.plan == nil {
		target, err := r.ring.AssignFrom(r.Members, r.Current)
		return RingResult{Target: target}, err
	}
	in := *r.plan
	in.Ring, in.Current, in.Kind = r.ring, r.Current, r.Kind
	out, err := balance.Plan(in)
	if err != nil {
		return RingResult{}, err
	}
	return RingResult{Target: out.Target, Reason: out.Reason, Domains: out.Domains, BudgetExhausted: out.BudgetExhausted}, nil
}

// OffloadRing makes the edge responsible for computing target assignments:
// from now on the coordinator only asks for them (TakeRingRequest) and
// waits for RingComputed, serving every other input meanwhile. Without it
// the coordinator computes each one synchronously inside Step or Tick,
// which is fine for tests and small member sets. Call it right after New.
func (c *Coordinator) OffloadRing() { c.offloadRing = true }

// TakeRingRequest returns the ring computation the coordinator waits for,
// once per generation. The edge must hand every request it takes back to
// RingComputed (with the result or an error): until then no other request
// is handed out, so at most one computation runs however fast membership
// changes, and the latest wanted one starts as soon as it ends.
func (c *Coordinator) TakeRingRequest() (RingRequest, bool) {
	if c.ringReq == nil || c.ringTaken || c.ringOut != 0 {
		return RingRequest{}, false
	}
	c.ringTaken = true
	c.ringOut = c.ringReq.Gen
	return *c.ringReq, true
}

// RingComputed delivers the result of the request of generation gen (res
// and err as RingRequest.Compute returned them). A result of an outdated
// generation is ignored. The new target takes effect at once: moves toward
// it are planned in this call.
func (c *Coordinator) RingComputed(now time.Time, gen uint64, res RingResult, err error) {
	now = c.observe(now)
	c.ringComputed(now, gen, res, err)
	c.step(now)
}

func (c *Coordinator) ringComputed(now time.Time, gen uint64, res RingResult, err error) {
	target := res.Target
	if gen == c.ringOut {
		c.ringOut = 0
	}
	req := c.ringReq
	if req == nil || gen != req.Gen {
		c.stats.RingResultsStale++
		return
	}
	c.ringReq = nil
	if err == nil && len(target) != len(c.parts) {
		err = fmt.Errorf("ring result has %d partitions, want %d", len(target), len(c.parts))
	}
	first := c.target == nil
	if err != nil {
		c.stats.RingErrors++
		c.stats.LastRingError = err.Error()
		if !first {
			return // keep the old target; the next membership change retries
		}
		// Without any target nothing is ever granted: start from an empty
		// one (everything unassigned) until membership changes again.
		target = make([]string, len(c.parts))
	}
	// A load round that changes nothing is counted as a round (balanced), not as a
	// target change: it comes every Balance.Interval.
	changed := req.Kind != balance.Balance || first || !slices.Equal(target, c.target)
	c.applied = req.Members
	c.target = slices.Clone(target)
	c.applyPlan(req, res, err)
	if changed {
		c.stats.TargetChanges++
		c.emit(Event{Kind: EventTargetChanged, At: now, Members: len(c.applied)})
	}
}

// desiredMembers is the member set the target should be computed from:
// everyone with a session except those leaving or fenced out. Disconnected
// members stay in: they may be reconnecting, and expiry removes them.
func (c *Coordinator) desiredMembers() []string {
	out := make([]string, 0, len(c.ids))
	for _, id := range c.ids {
		if m := c.members[id]; !m.leaving && !m.fencedOut {
			out = append(out, id)
		}
	}
	return out
}

// involved reports whether shard id owns, is receiving or is still
// releasing any partition.
func (c *Coordinator) involved(id string) bool {
	for p := range c.parts {
		pr := &c.parts[p]
		if pr.owner == id || (pr.move != nil && pr.move.to == id) {
			return true
		}
		for _, s := range pr.stale {
			if s.shard == id {
				return true
			}
		}
	}
	return false
}

// farewells tells leaving shards that hold nothing that they may exit.
func (c *Coordinator) farewells(now time.Time) {
	var busy map[string]bool
	for _, id := range c.ids {
		m := c.members[id]
		if !m.leaving || !m.connected || m.fencedOut {
			continue
		}
		if !m.farewell.IsZero() && now.Sub(m.farewell) < c.cfg.RetryInterval {
			continue
		}
		if busy == nil {
			busy = c.busyMembers()
		}
		if busy[id] {
			continue
		}
		m.farewell = now
		c.send(m, Command{Kind: CmdFarewell})
	}
}

func (c *Coordinator) busyMembers() map[string]bool {
	busy := map[string]bool{}
	for p := range c.parts {
		pr := &c.parts[p]
		if pr.owner != "" {
			busy[pr.owner] = true
		}
		if pr.move != nil && pr.move.to != "" {
			busy[pr.move.to] = true
		}
		for _, s := range pr.stale {
			busy[s.shard] = true
		}
	}
	return busy
}

// fenceOut stops acknowledging a live shard that does not release, so its
// lease runs out and its partitions can be taken without it.
func (c *Coordinator) fenceOut(m *member, now time.Time) {
	m.fencedOut = true
	c.stats.FenceOuts++
	c.emit(Event{Kind: EventMemberFencedOut, At: now, Shard: m.id})
	c.send(m, Command{Kind: CmdSessionEnded})
}

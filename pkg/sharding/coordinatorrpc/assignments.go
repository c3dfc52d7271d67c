package coordinatorrpc

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// ShardView is one shard in the assignments answer.
type ShardView struct {
	Shard string `json:"shard"`
	// Group is the shard group its hello named (its --shard-group); absent for the
	// default group.
	Group         string   `json:"group,omitempty"`
	Partitions    int      `json:"partitions"`
	Namespaces    uint64   `json:"namespaces"`
	CachedObjects uint64   `json:"cachedObjects"`
	QueueDepth    uint64   `json:"queueDepth"`
	Fenced        bool     `json:"fenced"`
	Connected     bool     `json:"connected"`
	Leaving       bool     `json:"leaving"`
	Version       string   `json:"version,omitempty"`
	PartitionIDs  []uint32 `json:"partitionIDs,omitempty"`
	// LoadReports counts the load reports this leader accepted from the shard's current
	// process; LoadEntries is how many partitions the last one listed. Both stay 0 while
	// load reports are off (--load-report-interval=0); a shard with nothing to list
	// sends empty reports (LoadEntries 0).
	LoadReports uint64 `json:"loadReports,omitempty"`
	LoadEntries int    `json:"loadEntries,omitempty"`
	// Load is the cost of the shard's partitions as measured: their reported load
	// (requests/s) plus a base per namespace (balance.Costs); a saturated shard's plans
	// count it --balance-saturation-factor × (Saturated), this does not.
	Load float64 `json:"load"`
	// LoadShare is Load over the sum of Load of the shards in its placement domain (its
	// group's if the last load plan made the group a domain of its own, else the
	// default domain's), 0..1; 0 when the domain carries no cost, and absent with
	// --placement=count, which has no domains. The shares of a domain sum to 1.
	LoadShare float64 `json:"loadShare,omitempty"`
	// Exclusive: the shard holds a hot partition as of the last load plan (one of those
	// kshard_coordinator_hot_partitions counts), so load rounds move every other
	// partition with a namespace off it and none onto it, as their budget allows (a
	// membership plan moves nothing for that, nor does anything with --balance=false).
	Exclusive bool `json:"exclusive,omitempty"`
	// Suspect: the balancer does not trust the shard's load reports (a partition it
	// received for load reported far below what its donor had; design §1.5): no load or
	// hot move goes to it for an hour. What kshard_coordinator_balancer_suspect_members
	// counts.
	Suspect bool `json:"suspect,omitempty"`
	// Saturated: its load reports' rate-limiter wait reached --balance-saturation-wait
	// and twice the median of its shard group's other shards (and has not fallen below
	// half the one or 1.5 × the other since), so the balancer counts its partitions
	// --balance-saturation-factor × their cost (their load is below their demand) and
	// moves no load onto it. What kshard_coordinator_balancer_saturated_members counts;
	// always false with --placement=count.
	Saturated bool `json:"saturated,omitempty"`
	// LimiterWaitPermille is its last load report's client rate-limiter wait: the
	// milliseconds per second its controllers' clients waited for a token, summed over
	// them (so above 1000 when several wait at once). High, the shard is saturated and
	// its load is a lower bound of its demand (Saturated). A measurement of the shard, not of
	// placement: shown whenever the shard reports, --placement=count included.
	LimiterWaitPermille uint32 `json:"limiterWaitPermille,omitempty"`
}

// Assignments is the answer of GET /assignments.
type Assignments struct {
	Term           uint32         `json:"term"`
	PartitionCount int            `json:"partitionCount"`
	Converged      bool           `json:"converged"`
	MovesInFlight  int            `json:"movesInFlight"`
	ByState        map[string]int `json:"partitionsByState"`
	// Placement is "count" or "load" (--placement).
	Placement string `json:"placement"`
	// Namespaces is how many namespaces the coordinator's own informer counts, with
	// placement by load (0 otherwise: it runs no informer for placement).
	Namespaces uint64 `json:"namespaces,omitempty"`
	// PinsByState counts the pinned partitions by state (satisfied, unsatisfied,
	// conflict); absent when nothing is pinned.
	PinsByState map[string]int `json:"pinsByState,omitempty"`
	// Pins lists the pinned and the conflicting partitions, by partition: at most one
	// entry per partition whatever the namespaces. Absent when nothing is pinned.
	Pins   []PinView   `json:"pins,omitempty"`
	Shards []ShardView `json:"shards"`
	// Loads are, with ?loads=true, the MaxLoads costliest partitions, costliest first
	// (ties by partition ID); partitions of cost 0 are left out. An empty list (not
	// absent) with --placement=count, whose placement knows no cost.
	Loads []PartitionLoadView `json:"loads,omitzero"`
}

// MaxLoads is how many partitions ?loads=true lists: the few that matter when one
// namespace is hot, in an answer of a few kilobytes at any partition count.
const MaxLoads = 50

// PartitionLoadView is one partition in the ?loads=true list.
type PartitionLoadView struct {
	Partition uint32 `json:"partition"`
	// Owner is the shard that owns it now; absent for nobody.
	Owner string `json:"owner,omitempty"`
	// Cost is its cost as measured: Load (requests/s, its owner's last report) plus a
	// base per namespace (balance.Costs); plans count a saturated owner's partitions
	// --balance-saturation-factor × this.
	Cost       float64 `json:"cost"`
	Load       float64 `json:"load"`
	Namespaces uint32  `json:"namespaces"`
	Objects    uint32  `json:"objects"`
	// Pin is the group it is pinned to; absent when unpinned (or pinned to two groups).
	Pin string `json:"pin,omitempty"`
	// Hot: it is hot as of the last load plan.
	Hot bool `json:"hot,omitempty"`
	// LastMove is why this leader gave it to its owner: membership, pin, hot or load;
	// absent when unknown (the owner held it before this leader started).
	LastMove string `json:"lastMove,omitempty"`
}

// PinView is one pinned (or conflicting) partition in the assignments answer.
type PinView struct {
	Partition uint32 `json:"partition"`
	// Group is the group it is pinned to; empty for a conflict.
	Group string `json:"group,omitempty"`
	// Source is where the pin comes from ("flag", "flag: <namespace>", "annotation:
	// <namespace>"; both sides of a conflict).
	Source string `json:"source"`
	// State is satisfied (the group has a live shard: the partition goes there, by the
	// next load round if it is elsewhere now), unsatisfied (no live shard of the group: it
	// is placed in the default domain) or conflict (pinned to two groups: unpinned).
	State string `json:"state"`
	// Owner is the shard that owns the partition now ("" for nobody), InGroup whether
	// that shard is in Group: a satisfied pin whose partition is not in its group yet
	// waits for the balancer's next round.
	Owner   string `json:"owner,omitempty"`
	InGroup bool   `json:"inGroup"`
}

// Owner is the answer of GET /assignments?namespace=X.
type Owner struct {
	Namespace string `json:"namespace"`
	Partition uint32 `json:"partition"`
	Shard     string `json:"shard"`
	State     string `json:"state"`
	Epoch     string `json:"epoch"`
	// PartitionLoad is the partition's last accepted load (requests/s) and
	// PartitionObjects its cached objects, as its owner reported them.
	PartitionLoad    float64 `json:"partitionLoad"`
	PartitionObjects uint32  `json:"partitionObjects"`
	// PartitionNamespaces is how many namespaces the coordinator's informer counts in
	// the partition (placement by load only).
	PartitionNamespaces uint32 `json:"partitionNamespaces"`
	// Cooling: the partition was acquired less than --balance-cooldown ago, so it is
	// not moved for load.
	Cooling bool `json:"cooling"`
	// Hot: the partition is hot as of the last load plan (its cost is about a shard's
	// fair share or more), so load rounds move the other partitions with a namespace
	// off its owner (see ShardView.Exclusive).
	// Always false with --placement=count.
	Hot bool `json:"hot"`
	// PinnedTo is the shard group the partition is pinned to, PinSource where the pin
	// comes from ("flag", "flag: <namespace>", "annotation: <namespace>"; both sides of
	// a conflict), PinState its state (satisfied, unsatisfied, conflict). Empty when
	// the partition is not pinned.
	PinnedTo  string `json:"pinnedTo,omitempty"`
	PinSource string `json:"pinSource,omitempty"`
	PinState  string `json:"pinState,omitempty"`
}

// AssignmentsHandler serves GET /assignments: every shard with its partition and
// namespace counts (?partitions=true lists the partition IDs, ?loads=true adds the
// costliest partitions), or with ?namespace=X the shard that owns X. A follower answers
// 503 naming the leader.
//
// The answer is copied under the server's lock and encoded and written after releasing
// it: a client that reads slowly (or not at all) must not hold the lock that every
// heartbeat needs, or shards fence. How long the write may take is the HTTP server's
// WriteTimeout (package httpserver).
func (s *Server) AssignmentsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "only GET", http.StatusMethodNotAllowed)
			return
		}
		select {
		case s.answering <- struct{}{}:
			defer func() { <-s.answering }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, fmt.Sprintf("too many /assignments requests in flight (%d): retry", MaxAssignmentsInFlight), http.StatusTooManyRequests)
			return
		}
		q := r.URL.Query()
		answer, leaderAddr, leading := s.assignmentsSnapshot(assignmentsQuery{namespace: q.Get("namespace"),
			partitions: q.Get("partitions") == "true", loads: q.Get("loads") == "true"})
		if !leading {
			msg := "this coordinator is not the leader"
			if leaderAddr != "" {
				msg += "; the leader is at " + leaderAddr
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, answer)
	})
}

// MaxAssignmentsInFlight bounds the GET /assignments requests served at once. The
// HTTP port has no authentication (it serves /metrics too), and each request walks
// every partition under the server's lock and holds its answer until written: a
// client opening many at once would keep the lock that every heartbeat needs busy.
// Operators and dashboards need a few; the rest are refused with 429 and Retry-After.
const MaxAssignmentsInFlight = 8

// assignmentsQuery is what a GET /assignments asks for.
type assignmentsQuery struct {
	namespace  string // ?namespace=: that namespace's owner only
	partitions bool   // ?partitions=true: every shard's partition IDs
	loads      bool   // ?loads=true: the MaxLoads costliest partitions
}

// assignmentsSnapshot builds the answer (an Owner for a namespace, else Assignments) from
// copies taken under s.mu; nothing in it aliases the state machine or the server's maps.
func (s *Server) assignmentsSnapshot(q assignmentsQuery) (answer any, leaderAddr string, leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.core == nil {
		return nil, s.leaderAddr, false
	}
	members := s.core.Members()
	groups := liveGroups(members)
	if q.namespace != "" {
		p := s.pmap.For(q.namespace)
		a, _ := s.core.Assignment(p)
		o := Owner{Namespace: q.namespace, Partition: uint32(p), Shard: a.Owner, State: a.State.String(), Epoch: a.Epoch.String()}
		o.PartitionLoad, o.PartitionObjects, o.Cooling = s.core.PartitionLoad(p)
		o.Hot = s.core.PartitionHot(p)
		if int(p) < len(s.placement.Namespaces) {
			o.PartitionNamespaces = s.placement.Namespaces[p]
		}
		if pin, ok := s.placement.Pins[p]; ok {
			o.PinnedTo, o.PinSource, o.PinState = pin.Group, pin.Source, s.placement.State(p, groups)
		}
		return o, "", true
	}
	st := s.core.Stats()
	out := Assignments{Term: s.term, PartitionCount: s.opts.Config.PartitionCount, Converged: s.core.Converged(),
		MovesInFlight: st.MovesInFlight, ByState: map[string]int{}, Placement: string(s.opts.Config.Balance.Placement)}
	for _, n := range s.placement.Namespaces {
		out.Namespaces += uint64(n)
	}
	if len(s.placement.Pins) > 0 {
		out.PinsByState = s.placement.States(groups)
		out.Pins = s.pinViewsLocked(groups, members)
	}
	for i, n := range st.ByState {
		out.ByState[stateName(i)] = n
	}
	ids := map[string][]uint32{}
	if q.partitions {
		for _, a := range s.core.Assignments() {
			if a.Owner != "" {
				ids[a.Owner] = append(ids[a.Owner], uint32(a.Partition))
			}
		}
	}
	byLoad := s.opts.Config.Balance.Placement == handoff.PlacementLoad
	var shares map[string]float64
	if byLoad {
		shares = loadShares(members, st.Balance.Domains)
	}
	for _, m := range members {
		ss := s.stats[m.ID]
		out.Shards = append(out.Shards, ShardView{Shard: m.ID, Group: m.Group, Partitions: m.Owned, Namespaces: ss.Namespaces,
			CachedObjects: ss.CachedObjects, QueueDepth: ss.QueueDepth, Fenced: ss.Fenced,
			Connected: m.Connected, Leaving: m.Leaving, Version: s.versions[m.ID], PartitionIDs: ids[m.ID],
			LoadReports: m.LoadReports, LoadEntries: m.LoadEntries, Load: m.Load,
			LoadShare: shares[m.ID], Exclusive: m.Exclusive, Suspect: m.Suspect, Saturated: m.Saturated, LimiterWaitPermille: m.LimiterWaitPermille})
	}
	sort.Slice(out.Shards, func(i, j int) bool { return out.Shards[i].Shard < out.Shards[j].Shard })
	if q.loads {
		out.Loads = []PartitionLoadView{}
		if byLoad {
			out.Loads = s.loadViewsLocked(s.core.CostliestPartitions(MaxLoads))
		}
	}
	return out, "", true
}

// loadShares returns each member's Load over the total Load of the members of its
// placement domain: its group's when the last load plan made that group a domain of its
// own (a dedicated group; domains lists them), else the default domain. A domain
// without cost gives its members 0.
func loadShares(members []handoff.MemberInfo, domains []balance.DomainStat) map[string]float64 {
	own := map[string]bool{}
	for _, d := range domains {
		if d.Group != "" {
			own[d.Group] = true
		}
	}
	domainOf := func(m handoff.MemberInfo) string {
		if own[m.Group] {
			return m.Group
		}
		return ""
	}
	total := map[string]float64{}
	for _, m := range members {
		total[domainOf(m)] += m.Load
	}
	out := make(map[string]float64, len(members))
	for _, m := range members {
		if t := total[domainOf(m)]; t > 0 {
			out[m.ID] = m.Load / t
		}
	}
	return out
}

// loadViewsLocked turns the state machine's costliest partitions into the answer's
// list, with each one's pin from the edge's pin table; s.mu held.
func (s *Server) loadViewsLocked(costs []handoff.PartitionCost) []PartitionLoadView {
	out := make([]PartitionLoadView, len(costs))
	for i, c := range costs {
		v := PartitionLoadView{Partition: uint32(c.Partition), Owner: c.Owner, Cost: c.Cost, Load: c.Load,
			Namespaces: c.Namespaces, Objects: c.Objects, Hot: c.Hot, LastMove: c.LastMove.String()}
		if int(c.Partition) < len(s.pinTable) {
			v.Pin = s.pinTable[c.Partition]
		}
		out[i] = v
	}
	return out
}

// pinViewsLocked lists the pins with their state and owner, by partition; s.mu held,
// s.core set.
func (s *Server) pinViewsLocked(groups map[string]bool, members []handoff.MemberInfo) []PinView {
	groupOf := make(map[string]string, len(members))
	for _, m := range members {
		groupOf[m.ID] = m.Group
	}
	out := make([]PinView, 0, len(s.placement.Pins))
	for p, pin := range s.placement.Pins {
		v := PinView{Partition: uint32(p), Group: pin.Group, Source: pin.Source, State: s.placement.State(p, groups)}
		if a, ok := s.core.Assignment(p); ok {
			v.Owner = a.Owner
		}
		if g, ok := groupOf[v.Owner]; ok && !pin.Conflict && v.Owner != "" {
			v.InGroup = g == pin.Group
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// PartitionOf exposes the namespace mapping the coordinator uses.
func (s *Server) PartitionOf(namespace string) partition.ID { return s.pmap.For(namespace) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func stateName(i int) string { return handoff.PartitionState(i).String() }

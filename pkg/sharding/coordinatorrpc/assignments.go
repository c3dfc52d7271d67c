package coordinatorrpc

import (
	"encoding/json"
	"net/http"
	"sort"

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
	// Load is the cost of the shard's partitions as the balancer sees it: their
	// reported load (requests/s) plus a base per namespace (balance.Costs).
	Load float64 `json:"load"`
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
	// PinnedTo is the shard group the partition is pinned to, PinSource where the pin
	// comes from ("flag", "flag: <namespace>", "annotation: <namespace>"; both sides of
	// a conflict), PinState its state (satisfied, unsatisfied, conflict). Empty when
	// the partition is not pinned.
	PinnedTo  string `json:"pinnedTo,omitempty"`
	PinSource string `json:"pinSource,omitempty"`
	PinState  string `json:"pinState,omitempty"`
}

// AssignmentsHandler serves GET /assignments: every shard with its partition and
// namespace counts (?partitions=true lists the partition IDs), or with ?namespace=X the
// shard that owns X. A follower answers 503 naming the leader.
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
		q := r.URL.Query()
		answer, leaderAddr, leading := s.assignmentsSnapshot(q.Get("namespace"), q.Get("partitions") == "true")
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

// assignmentsSnapshot builds the answer (an Owner for a namespace, else Assignments) from
// copies taken under s.mu; nothing in it aliases the state machine or the server's maps.
func (s *Server) assignmentsSnapshot(namespace string, withIDs bool) (answer any, leaderAddr string, leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.core == nil {
		return nil, s.leaderAddr, false
	}
	members := s.core.Members()
	groups := liveGroups(members)
	if namespace != "" {
		p := s.pmap.For(namespace)
		a, _ := s.core.Assignment(p)
		o := Owner{Namespace: namespace, Partition: uint32(p), Shard: a.Owner, State: a.State.String(), Epoch: a.Epoch.String()}
		o.PartitionLoad, o.PartitionObjects, o.Cooling = s.core.PartitionLoad(p)
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
	if withIDs {
		for _, a := range s.core.Assignments() {
			if a.Owner != "" {
				ids[a.Owner] = append(ids[a.Owner], uint32(a.Partition))
			}
		}
	}
	for _, m := range members {
		ss := s.stats[m.ID]
		out.Shards = append(out.Shards, ShardView{Shard: m.ID, Group: m.Group, Partitions: m.Owned, Namespaces: ss.Namespaces,
			CachedObjects: ss.CachedObjects, QueueDepth: ss.QueueDepth, Fenced: ss.Fenced,
			Connected: m.Connected, Leaving: m.Leaving, Version: s.versions[m.ID], PartitionIDs: ids[m.ID],
			LoadReports: m.LoadReports, LoadEntries: m.LoadEntries, Load: m.Load})
	}
	sort.Slice(out.Shards, func(i, j int) bool { return out.Shards[i].Shard < out.Shards[j].Shard })
	return out, "", true
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

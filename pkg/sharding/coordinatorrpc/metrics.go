package coordinatorrpc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// Metrics are the coordinator's Prometheus series.
type Metrics struct {
	Leader          prometheus.Gauge
	Term            prometheus.Gauge
	Epoch           prometheus.Gauge
	Members         prometheus.Gauge
	Partitions      *prometheus.GaugeVec // by shard
	Namespaces      *prometheus.GaugeVec // by shard, as the shard reports
	PartitionStates *prometheus.GaugeVec // by state
	MovesStarted    prometheus.Counter
	MovesFinished   prometheus.Counter
	MovesAborted    prometheus.Counter
	MovesInFlight   prometheus.Gauge
	Handoff         prometheus.Histogram
	Gap             prometheus.Histogram
	Rejected        *prometheus.CounterVec // by reason
	Sessions        prometheus.Counter
	MemberEvents    *prometheus.CounterVec // by kind
	// AuthRejected counts sessions refused because the shard's identity could not be
	// verified, or a message claimed another identity than the verified one.
	AuthRejected *prometheus.CounterVec // by reason
	// Refused counts sessions and hellos refused by the resource caps.
	Refused *prometheus.CounterVec // by reason: session_limit, pending_per_peer, pending_limit, hello_rate, hello_rate_table_full
	// OpenStreams is the number of authenticated Session streams open now (each holds a
	// session slot).
	OpenStreams prometheus.Gauge
	// PendingStreams is the number of Session streams open now whose hello has not yet
	// been authenticated (bounded per peer and in all).
	PendingStreams prometheus.Gauge
	// HeldCommands counts commands held because the leader's Lease was not renewed in
	// time (Tenure); non-zero only while a resumed leader waits to learn its fate.
	HeldCommands prometheus.Gauge
	// The owner record (server-side fence): batches written and enforced, failures,
	// the time to write and to see it enforced, and partitions per batch.
	RecordWrites       prometheus.Counter
	RecordObjectWrites prometheus.Counter
	RecordErrors       prometheus.Counter
	RecordWrite        prometheus.Histogram
	RecordEnforce      prometheus.Histogram
	RecordPartitions   prometheus.Histogram
	// Placement by load (docs/design-placement.md §5), from the state machine's
	// Stats().Balance and Members() and the edge's pins.
	ShardLoad             *prometheus.GaugeVec   // by shard: its partitions' cost as the balancer sees it
	LoadFair              *prometheus.GaugeVec   // by group: F of the last load plan's domain
	LoadImbalance         *prometheus.GaugeVec   // by group: busiest non-exclusive member / its fair share
	BalancerMoves         *prometheus.CounterVec // by reason: membership, pin, hot, load
	BalancerRounds        *prometheus.CounterVec // by outcome
	HotPartitions         prometheus.Gauge
	SuspectMembers        prometheus.Gauge
	SaturatedMembers      prometheus.Gauge
	Pins                  *prometheus.GaugeVec   // by state: satisfied, unsatisfied, conflict
	PinAnnotationsIgnored *prometheus.GaugeVec   // by reason: invalid, not_allowed
	LoadReportsRejected   *prometheus.CounterVec // by reason: absurd, not_held, early
}

// The label values the placement series start with at 0, so that a dashboard's rate
// has a series before the first event: handoff.BalanceStats' keys and
// balance.Reason's names.
var (
	balancerMoveReasons   = []string{"membership", "pin", "hot", "load"}
	balancerRoundOutcomes = []string{"balanced", "moved", "budget_exhausted", "incomplete_reports", "moving", "warmup"}
	loadReportRejects     = []string{"absurd", "not_held", "early"}
)

// NewMetrics registers the coordinator's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	buckets := []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	fastBuckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}
	m := &Metrics{
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_leader",
			Help: "1 while this coordinator replica is the leader."}),
		Term: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_term",
			Help: "Leader term of this coordinator (the high 32 bits of every epoch it issues)."}),
		Epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_epoch",
			Help: "Latest handoff epoch this leader issued (term in the high 32 bits, so it only grows across leaders; float precision is exact below 2^53)."}),
		Members: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_members",
			Help: "Shards with a live session."}),
		Partitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_shard_partitions",
			Help: "Partitions owned by each shard."}, []string{"shard"}),
		Namespaces: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_shard_namespaces",
			Help: "Namespaces each shard reports owning in its last heartbeat."}, []string{"shard"}),
		PartitionStates: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_partitions",
			Help: "Partitions by handoff state."}, []string{"state"}),
		MovesStarted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_moves_started_total",
			Help: "Partition moves started (Prepare sent to the new owner)."}),
		MovesFinished: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_moves_finished_total",
			Help: "Partition moves finished (Acquire confirmed by the new owner)."}),
		MovesAborted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_moves_aborted_total",
			Help: "Partition moves called off before anything was released."}),
		MovesInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_moves_in_flight",
			Help: "Partition moves between Prepare and Acquire."}),
		Handoff: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_coordinator_handoff_duration_seconds",
			Help: "Duration of a partition move from Prepare to the confirmed Acquire.", Buckets: buckets}),
		Gap: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_coordinator_ownership_gap_seconds",
			Help: "Time a partition was worked by nobody: from the old owner's release (or the partition becoming unowned) to the new owner's confirmed Acquire.", Buckets: buckets}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_rejected_messages_total",
			Help: "Shard messages rejected, by reason."}, []string{"reason"}),
		Sessions: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_sessions_total",
			Help: "Session streams opened by shards."}),
		MemberEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_member_events_total",
			Help: "Membership changes, by kind (joined, leaving, left, expired, restarted, fenced-out)."}, []string{"kind"}),
		AuthRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_auth_rejected_total",
			Help: "Sessions refused because the shard's identity could not be verified (or a message claimed another shard than the stream's verified one), by reason."}, []string{"reason"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_refused_total",
			Help: "Sessions and hellos refused by the coordinator's caps, by reason (session_limit, pending_per_peer, pending_limit, hello_rate, hello_rate_table_full)."}, []string{"reason"}),
		OpenStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_open_session_streams",
			Help: "Authenticated session streams open now (each holds a session slot)."}),
		PendingStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_pending_session_streams",
			Help: "Session streams open now whose hello is not yet authenticated."}),
		HeldCommands: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_held_commands",
			Help: "Commands to shards held because the leader's Lease was not renewed within the renew deadline (a resumed leader waiting to learn whether it still leads)."}),
		RecordWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_owner_record_batches_total",
			Help: "Owner record batches written and seen enforced by the API server."}),
		RecordObjectWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_owner_record_object_writes_total",
			Help: "Owner record writes (owner Role and RoleBinding creates, updates and deletes): the server-side fence's cost in API writes, a few per batch whatever the namespaces."}),
		RecordErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_coordinator_owner_record_errors_total",
			Help: "Owner record batches that failed to be written or to be seen enforced; retried."}),
		RecordWrite: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_coordinator_owner_record_write_seconds",
			Help: "Time to write the owner Roles of one owner record batch.", Buckets: fastBuckets}),
		RecordEnforce: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_coordinator_owner_record_enforce_seconds",
			Help: "Time from an owner record write to the API server's admission enforcing it (dry-run probes).", Buckets: fastBuckets}),
		RecordPartitions: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_coordinator_owner_record_batch_partitions",
			Help: "Partitions whose owner one record write changed.", Buckets: prometheus.ExponentialBuckets(1, 4, 8)}),
		ShardLoad: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_shard_load",
			Help: "Cost of the partitions each shard owns as measured: reported load (requests/s) plus a base per namespace (plans count a saturated shard's --balance-saturation-factor times this)."}, []string{"shard"}),
		LoadFair: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_load_fair",
			Help: "Fair share of cost per shard (total cost / shards) of each placement domain, as of the last load plan (saturated shards' partitions at --balance-saturation-factor times their cost); group \"\" is the default domain."}, []string{"group"}),
		LoadImbalance: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_load_imbalance",
			Help: "Busiest shard's cost over the fair share, among shards holding no hot partition, of each placement domain as of the last load plan."}, []string{"group"}),
		BalancerMoves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_balancer_moves_total",
			Help: "Partition moves started, by why the target changed: membership (a shard joined or left, or placement by count), pin, hot (isolating a hot partition), load (spread)."}, []string{"reason"}),
		BalancerRounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_balancer_rounds_total",
			Help: "Load balancing rounds, by outcome: balanced, moved, budget_exhausted (a plan applied), incomplete_reports, moving, warmup (due but skipped)."}, []string{"outcome"}),
		HotPartitions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_hot_partitions",
			Help: "Partitions whose cost alone exceeds a shard's fair share, as of the last load plan."}),
		SuspectMembers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_balancer_suspect_members",
			Help: "Shards whose load reports the balancer does not trust."}),
		SaturatedMembers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_coordinator_balancer_saturated_members",
			Help: "Shards whose load reports waited at least --balance-saturation-wait and twice their shard group's median in their client rate limiters (until below half the one or 1.5 times the other): the balancer counts their partitions --balance-saturation-factor times their cost and moves no load onto them."}),
		Pins: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_pins",
			Help: "Pinned partitions by state: satisfied, unsatisfied (no live shard of the group: placed in the default domain), conflict (pinned to two groups: unpinned)."}, []string{"state"}),
		PinAnnotationsIgnored: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kshard_coordinator_pin_annotations_ignored",
			Help: "Namespaces whose kshard.io/shard-group annotation is ignored, by reason: invalid (not a DNS-1123 label), not_allowed (not in --pin-annotation-groups)."}, []string{"reason"}),
		LoadReportsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_coordinator_load_reports_rejected_total",
			Help: "Load reports (or entries) rejected, by reason: absurd (above --balance-max-partition-load or --balance-max-shard-load), not_held (a partition the shard does not hold), early (a whole report sooner than half the report cadence after the shard's previous one)."}, []string{"reason"}),
	}
	for _, r := range balancerMoveReasons {
		m.BalancerMoves.WithLabelValues(r)
	}
	for _, o := range balancerRoundOutcomes {
		m.BalancerRounds.WithLabelValues(o)
	}
	for _, r := range loadReportRejects {
		m.LoadReportsRejected.WithLabelValues(r)
	}
	if err := promutil.Register(reg, m.ShardLoad, m.LoadFair, m.LoadImbalance, m.BalancerMoves, m.BalancerRounds, m.HotPartitions, m.SuspectMembers, m.SaturatedMembers,
		m.Pins, m.PinAnnotationsIgnored, m.LoadReportsRejected, m.RecordWrites, m.RecordObjectWrites, m.RecordErrors, m.RecordWrite, m.RecordEnforce, m.RecordPartitions, m.AuthRejected, m.Refused, m.OpenStreams, m.PendingStreams, m.HeldCommands, m.Leader, m.Term, m.Epoch, m.Members, m.Partitions, m.Namespaces, m.PartitionStates, m.MovesStarted,
		m.MovesFinished, m.MovesAborted, m.MovesInFlight, m.Handoff, m.Gap, m.Rejected, m.Sessions, m.MemberEvents); err != nil {
		return nil, err
	}
	return m, nil
}

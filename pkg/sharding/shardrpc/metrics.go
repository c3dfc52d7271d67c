package shardrpc

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/metrics/promutil"
)

// Metrics are the session's Prometheus series.
type Metrics struct {
	Reconnects   prometheus.Counter
	Fenced       prometheus.Gauge
	HeartbeatRTT prometheus.Histogram
	Rejected     *prometheus.CounterVec
	// LoadReports counts the load reports the shard put on its heartbeats (outcome
	// "sent") and those it left off because the reporter's snapshot was invalid
	// ("invalid": a bug, which must not end the session).
	LoadReports *prometheus.CounterVec
}

// NewMetrics registers the session metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "kshard_shard_session_reconnects_total",
			Help: "Session streams opened to a coordinator (the first one included)."}),
		Fenced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kshard_shard_fenced",
			Help: "1 while the shard's lease has run out and it does no work."}),
		HeartbeatRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kshard_shard_heartbeat_rtt_seconds",
			Help:    "Time from sending a heartbeat to its acknowledgement.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_shard_rejected_commands_total",
			Help: "Coordinator commands the shard refused, by reason."}, []string{"reason"}),
		LoadReports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kshard_shard_load_reports_total",
			Help: "Load reports the shard attached to its heartbeats (outcome=sent), or left off because its snapshot was invalid (outcome=invalid)."}, []string{"outcome"}),
	}
	if err := promutil.Register(reg, m.Reconnects, m.Fenced, m.HeartbeatRTT, m.Rejected, m.LoadReports); err != nil {
		return nil, err
	}
	return m, nil
}

// rttTracker remembers when outstanding heartbeats were sent. Seq restarts at 1 with
// every session, like the state machine's.
type rttTracker struct {
	seq  uint64
	sent map[uint64]time.Time
}

func (r *rttTracker) reset() { r.seq, r.sent = 0, nil }

func (r *rttTracker) sentAt(now time.Time) {
	r.seq++
	if r.sent == nil {
		r.sent = map[uint64]time.Time{}
	}
	r.sent[r.seq] = now
	if len(r.sent) > 64 {
		for s := range r.sent {
			if s+64 < r.seq {
				delete(r.sent, s)
			}
		}
	}
}

func (r *rttTracker) acked(seq uint64, now time.Time, m *Metrics) {
	at, ok := r.sent[seq]
	if !ok {
		return
	}
	delete(r.sent, seq)
	if m != nil {
		m.HeartbeatRTT.Observe(now.Sub(at).Seconds())
	}
}

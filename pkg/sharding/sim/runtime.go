package sim

import (
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// maxCancel is how long a revoked partition's cancelled reconcile may take to return
// when it does not hang.
const maxCancel = 50 * time.Millisecond

// runtimeModel is a shard process's runtime as the simulation sees it: the gate's
// per-partition tenure (acquired, or draining after a release, so its writes may leave)
// and, per partition, until when work that already started runs. The state machine's
// Working says when work may start; in-flight work can outlive it (a Stop cancels rather
// than waits), so the "never two owners" check must look at what still runs and can
// write, and Released must wait until it has ended.
type runtimeModel struct {
	// Per partition, indexed by partition ID (dense: the check after every event
	// scans them).
	// tenure: the partition's work may write (acquired, or draining).
	tenure []bool
	// acquired: the partition's keys may start.
	acquired []bool
	// busyUntil is when the partition's latest started work ends (sim time).
	busyUntil []time.Duration
	// held: the state machine held the partition after the shard's last output:
	// a Released for it answers for work this process did, while a Released for any
	// other is the idempotent answer to a retried release.
	held []bool
}

func newRuntimeModel(partitions int) *runtimeModel {
	return &runtimeModel{
		tenure:    make([]bool, partitions),
		acquired:  make([]bool, partitions),
		busyUntil: make([]time.Duration, partitions),
		held:      make([]bool, partitions),
	}
}

// busy reports whether work of p still runs at now.
func (m *runtimeModel) busy(now time.Duration, p partition.ID) bool {
	return m.acquired[p] || m.busyUntil[p] > now
}

// mayWrite reports whether work of p can change the cluster at now (s's clock reads
// at): some runs, the gate's per-partition fence lets it through, and the lease (the
// shard-wide fence) is valid.
func (w *world) mayWrite(s *shardNode, p partition.ID, at time.Time) bool {
	return s.rt.tenure[p] && s.rt.busy(w.now, p) && s.sh.CanWork(at)
}

// runtimeAct carries out one action on s's runtime model, as shardruntime does on the
// gate: Work acquires; Drain stops starting keys, lets the running work finish and write,
// and reports Drained only once it has ended; Stop and Drop revoke (cancel the running
// work, refuse its writes) without waiting.
func (w *world) runtimeAct(s *shardNode, a handoff.Action) {
	m, p := s.rt, a.Partition
	switch a.Kind {
	case handoff.ActionWork:
		m.acquired[p], m.tenure[p] = true, true
		w.meterAcquired(s, p)
	case handoff.ActionDrain:
		s.meterReleased(p)
		if m.acquired[p] {
			m.acquired[p] = false
			d := w.dur(0, maxDrain)
			if w.faulty && w.chance(0.1) {
				d = w.dur(0, maxHungDrain) // a reconcile that takes long to finish
				w.settle(w.now + d)
			}
			m.busyUntil[p] = max(m.busyUntil[p], w.now+d)
		}
		w.schedule(max(w.now, m.busyUntil[p]), &event{kind: evDrained, shard: s.idx, inc: s.inc, p: p})
	case handoff.ActionStop, handoff.ActionDrop:
		s.meterReleased(p)
		if m.acquired[p] {
			// The reconcile running now is cancelled; one that ignores its context
			// (busy in a loop) runs on, but none of its writes leaves.
			d := w.dur(0, maxCancel)
			if w.faulty && w.chance(0.1) {
				d = w.dur(0, maxHungDrain)
			}
			m.busyUntil[p] = max(m.busyUntil[p], w.now+d)
		}
		m.acquired[p], m.tenure[p] = false, false
	}
}

// syncHeld records what sh holds after its output was carried out.
func (m *runtimeModel) syncHeld(sh *handoff.Shard) {
	clear(m.held)
	for _, h := range sh.Held() {
		m.held[h.Partition] = true
	}
}

// runtimeDrained is the gate's Release returning: the work has ended, so the tenure ends
// unless the partition was acquired again meanwhile.
func (w *world) runtimeDrained(s *shardNode, p partition.ID) {
	if !s.rt.acquired[p] {
		s.rt.tenure[p] = false
	}
}

// checkReleased: a shard must report a partition it held Released only once nothing of
// it runs any more, or the next owner could start while it still does.
func (w *world) checkReleased(s *shardNode, r handoff.Report) *Violation {
	if r.Kind != handoff.ReportReleased || !s.rt.held[r.Partition] || !s.rt.busy(w.now, r.Partition) {
		return nil
	}
	return w.violation("%s reported partition %d released while its work still runs (until %v)",
		s.id, r.Partition, s.rt.busyUntil[r.Partition])
}

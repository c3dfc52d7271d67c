package leader

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Tenure tells the leader whether it still certainly leads, by its own clock. client-go's
// elector notices a lost Lease only when a renewal fails, up to RenewDeadline later, and
// not at all while the process is stopped (SIGSTOP, a long GC pause, a frozen VM): a leader
// resumed after its Lease ran out believes it leads until its next renewal fails, while a
// successor may already be granting. A Tenure is valid until RenewDeadline after the start
// of the last renewal that succeeded: the elector itself would give up leading by then had
// it kept running, and no other candidate can take the Lease before LeaseDuration after
// that start (it must see the renewed record unchanged for that long, and its own write
// is conditional on the version it saw). The gap between the two, LeaseDuration −
// RenewDeadline, absorbs clock-rate differences and the time a message takes to arrive.
type Tenure struct {
	valid time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last time.Time // start of the last successful renewal (or acquisition)
}

// Valid reports whether this process may still act as leader now: send grants,
// acknowledge heartbeats. Time is read from the monotonic clock, which runs while the
// process is stopped.
func (t *Tenure) Valid() bool {
	if t == nil {
		return false
	}
	if t.valid < 0 {
		return true // leader election disabled: this process is the only candidate
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.last.IsZero() && t.now().Before(t.last.Add(t.valid))
}

// unbounded is the Tenure of a coordinator that leads without election.
func unbounded() *Tenure { return &Tenure{valid: -1} }

// renewed records a successful write of the Lease that names this process, started at
// start.
func (t *Tenure) renewed(start time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if start.After(t.last) {
		t.last = start
	}
}

// tenureLock is the election's resource lock with a Tenure fed from its writes: every
// Create or Update that names this process as holder and succeeds renews the tenure from
// the moment it was started. A write that names nobody (the release on cancel) does not.
//
// It also reports every read or write of the Lease that succeeded (answered, may be nil):
// the elector reads it (followers) or renews it (the leader) every retry period, so a
// candidate whose calls stop succeeding has lost the API server and could not take over.
type tenureLock struct {
	resourcelock.Interface
	tenure   *Tenure
	answered func(at time.Time)
}

func newTenureLock(lock resourcelock.Interface, renewDeadline time.Duration, now func() time.Time) *tenureLock {
	return &tenureLock{Interface: lock, tenure: &Tenure{valid: renewDeadline, now: now}}
}

// Get reads the Lease and reports a successful read.
func (l *tenureLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.answer(l.tenure.now())
	}
	return r, raw, err
}

func (l *tenureLock) answer(at time.Time) {
	if l.answered != nil {
		l.answered(at)
	}
}

// Create creates the Lease and renews the tenure when it names this process.
func (l *tenureLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := l.tenure.now()
	if err := l.Interface.Create(ctx, r); err != nil {
		return err
	}
	l.wrote(r, start)
	return nil
}

// Update writes the Lease and renews the tenure when it names this process.
func (l *tenureLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := l.tenure.now()
	if err := l.Interface.Update(ctx, r); err != nil {
		return err
	}
	l.wrote(r, start)
	return nil
}

func (l *tenureLock) wrote(r resourcelock.LeaderElectionRecord, start time.Time) {
	l.answer(l.tenure.now())
	if r.HolderIdentity != "" && r.HolderIdentity == l.Identity() {
		l.tenure.renewed(start)
	}
}

package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// fakeLock is a resource lock whose writes succeed unless err is set.
type fakeLock struct {
	resourcelock.Interface // nil: only Create, Update and Identity are called
	id                     string
	err                    error
}

func (f *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error { return f.err }
func (f *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error { return f.err }
func (f *fakeLock) Identity() string                                                { return f.id }
func (f *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{}, nil, f.err
}

// TestLeaseAnswerReported: a successful read or write of the Lease is reported with the
// lock's clock, a failed one is not.
func TestLeaseAnswerReported(t *testing.T) {
	tests := []struct {
		name string
		op   string
		err  error
		want bool
	}{
		{name: "read", op: "get", want: true},
		{name: "failed read", op: "get", err: errors.New("connection refused"), want: false},
		{name: "renewal", op: "update", want: true},
		{name: "failed renewal", op: "update", err: errors.New("conflict"), want: false},
		{name: "acquisition", op: "create", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got time.Time
			l := newTenureLock(&fakeLock{id: "me", err: tt.err}, time.Second, func() time.Time { return t0 })
			l.answered = func(at time.Time) { got = at }
			var err error
			r := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
			switch tt.op {
			case "get":
				_, _, err = l.Get(context.Background())
			case "update":
				err = l.Update(context.Background(), r)
			case "create":
				err = l.Create(context.Background(), r)
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("%s returned %v, want %v", tt.op, err, tt.err)
			}
			if reported := got.Equal(t0); reported != tt.want {
				t.Fatalf("read reported: %v, want %v", reported, tt.want)
			}
		})
	}
}

// TestTenure: a tenure is valid for RenewDeadline after the start of the last write of
// the Lease that named this process and succeeded; a failed write, a write naming
// nobody (the release) or another holder does not extend it, and a process stopped past
// that deadline finds it invalid when it resumes, before any renewal was tried.
func TestTenure(t *testing.T) {
	const deadline = 3 * time.Second
	type write struct {
		create bool
		holder string
		err    error
		at     time.Duration // clock when the write starts
	}
	tests := []struct {
		name   string
		writes []write
		check  time.Duration
		want   bool
	}{
		{name: "never written", check: 0, want: false},
		{name: "acquired by create", writes: []write{{create: true, holder: "me"}}, check: 2 * time.Second, want: true},
		{name: "renewed by update", writes: []write{{holder: "me"}, {holder: "me", at: 2 * time.Second}}, check: 4 * time.Second, want: true},
		{name: "stopped past the deadline", writes: []write{{holder: "me"}}, check: 11700 * time.Millisecond, want: false},
		{name: "deadline is exclusive", writes: []write{{holder: "me"}}, check: deadline, want: false},
		{name: "failed renewal does not extend", writes: []write{{holder: "me"}, {holder: "me", at: 2 * time.Second, err: errors.New("conflict")}}, check: 4 * time.Second, want: false},
		{name: "release does not extend", writes: []write{{holder: "me"}, {holder: "", at: 2 * time.Second}}, check: 4 * time.Second, want: false},
		{name: "another holder does not extend", writes: []write{{holder: "me"}, {holder: "other", at: 2 * time.Second}}, check: 4 * time.Second, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clock time.Duration
			now := func() time.Time { return t0.Add(clock) }
			inner := &fakeLock{id: "me"}
			l := newTenureLock(inner, deadline, now)
			for _, w := range tt.writes {
				clock = w.at
				inner.err = w.err
				r := resourcelock.LeaderElectionRecord{HolderIdentity: w.holder}
				var err error
				if w.create {
					err = l.Create(context.Background(), r)
				} else {
					err = l.Update(context.Background(), r)
				}
				if !errors.Is(err, w.err) {
					t.Fatalf("write returned %v, want %v", err, w.err)
				}
			}
			clock = tt.check
			if got := l.tenure.Valid(); got != tt.want {
				t.Fatalf("Valid() at %v = %v, want %v", tt.check, got, tt.want)
			}
		})
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestTenureOfRun: the tenure Run hands to OnLeading is valid while the elector renews,
// and a nil or disabled-election tenure answers as documented.
func TestTenureOfRun(t *testing.T) {
	o := &Options{Enabled: true, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
		ResourceName: testLease, ResourceNamespace: testNamespace}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var valid, validLater bool
	var reads atomic.Int32
	err := Run(ctx, o, fake.NewClientset(), "me", Callbacks{OnLeading: func(_ context.Context, _ uint64, tn *Tenure) {
		valid = tn.Valid()
		time.Sleep(500 * time.Millisecond) // several renewals
		validLater = tn.Valid()
		cancel()
	}, OnLeaseAnswered: func(time.Time) { reads.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if !valid || !validLater {
		t.Fatalf("tenure while leading: at start %v, after renewals %v", valid, validLater)
	}
	if reads.Load() < 2 {
		t.Fatalf("OnLeaseAnswered called %d times over several renewals, want at least 2", reads.Load())
	}
	var none *Tenure
	if none.Valid() {
		t.Fatal("a nil tenure is valid")
	}
	if !unbounded().Valid() {
		t.Fatal("the tenure of a coordinator without election is not valid")
	}
}

package expectations

import (
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestExpectations(t *testing.T) {
	type step func(e *Expectations, c *clocktesting.FakeClock)
	creations := func(n int) step {
		return func(e *Expectations, _ *clocktesting.FakeClock) { e.ExpectCreations("k", n) }
	}
	deletions := func(n int) step {
		return func(e *Expectations, _ *clocktesting.FakeClock) { e.ExpectDeletions("k", n) }
	}
	deletionsOf := func(keys ...string) step {
		return func(e *Expectations, _ *clocktesting.FakeClock) { e.ExpectDeletionsOf("k", keys) }
	}
	created := func(e *Expectations, _ *clocktesting.FakeClock) { e.CreationObserved("k") }
	deleted := func(e *Expectations, _ *clocktesting.FakeClock) { e.DeletionObserved("k") }
	deletedOf := func(key string) step {
		return func(e *Expectations, _ *clocktesting.FakeClock) { e.DeletionOfObserved("k", key) }
	}
	wait := func(d time.Duration) step { return func(_ *Expectations, c *clocktesting.FakeClock) { c.Step(d) } }
	forget := func(e *Expectations, _ *clocktesting.FakeClock) { e.Forget("k") }
	gone := func(live ...string) step {
		return func(e *Expectations, _ *clocktesting.FakeClock) {
			e.ObserveGone("k", func(key string) bool { return slices.Contains(live, key) })
		}
	}
	tests := []struct {
		name  string
		steps []step
		want  bool
	}{
		{name: "none recorded", want: true},
		{name: "creations pending", steps: []step{creations(2), created}, want: false},
		{name: "creations observed", steps: []step{creations(2), created, created}, want: true},
		{name: "more observed than expected", steps: []step{creations(1), created, created}, want: true},
		{name: "counted deletions pending", steps: []step{deletions(2), deleted}, want: false},
		{name: "counted deletions observed", steps: []step{deletions(2), deleted, deleted}, want: true},
		{name: "tracked deletions pending", steps: []step{deletionsOf("ns/a", "ns/b"), deletedOf("ns/a")}, want: false},
		{name: "tracked deletions observed", steps: []step{deletionsOf("ns/a", "ns/b"), deletedOf("ns/a"), deletedOf("ns/b")}, want: true},
		{name: "an unexpected tracked deletion counts for nothing", steps: []step{deletionsOf("ns/a"), deletedOf("ns/x")}, want: false},
		{name: "a tracked deletion observed twice counts once", steps: []step{deletionsOf("ns/a", "ns/b"), deletedOf("ns/a"), deletedOf("ns/a")}, want: false},
		{name: "a counted deletion does not observe a tracked one", steps: []step{deletionsOf("ns/a"), deleted}, want: false},
		{name: "expired after five minutes", steps: []step{creations(3), wait(Timeout + time.Second)}, want: true},
		{name: "not expired before", steps: []step{creations(3), wait(Timeout - time.Second)}, want: false},
		{name: "forgotten", steps: []step{creations(3), forget}, want: true},
		{name: "new creations replace pending deletions", steps: []step{deletionsOf("ns/a"), creations(1), created}, want: true},
		{name: "new deletions replace pending creations", steps: []step{creations(1), deletions(1), deleted}, want: true},
		{name: "deletions the cache already shows", steps: []step{deletionsOf("ns/a", "ns/b"), gone()}, want: true},
		{name: "a deletion the cache does not show yet", steps: []step{deletionsOf("ns/a", "ns/b"), gone("ns/b")}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := clocktesting.NewFakeClock(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
			e := New(c)
			for _, s := range tc.steps {
				s(e, c)
			}
			if got := e.Satisfied("k"); got != tc.want {
				t.Errorf("Satisfied = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPending(t *testing.T) {
	e := New(clocktesting.NewFakeClock(time.Now()))
	if adds, dels := e.Pending("k"); adds != 0 || dels != 0 {
		t.Errorf("Pending of an unknown key = %d, %d; want 0, 0", adds, dels)
	}
	e.ExpectCreations("k", 3)
	e.CreationObserved("k")
	if adds, dels := e.Pending("k"); adds != 2 || dels != 0 {
		t.Errorf("Pending = %d, %d; want 2, 0", adds, dels)
	}
	e.ExpectDeletions("k", 2)
	if adds, dels := e.Pending("k"); adds != 0 || dels != 2 {
		t.Errorf("Pending = %d, %d; want 0, 2", adds, dels)
	}
	e.ExpectDeletionsOf("k", []string{"ns/a", "ns/b", "ns/c"})
	e.DeletionOfObserved("k", "ns/b")
	if adds, dels := e.Pending("k"); adds != 0 || dels != 2 {
		t.Errorf("Pending = %d, %d; want 0, 2", adds, dels)
	}
}

package handoff

import (
	"testing"
	"time"
)

// TestForgedEpochOfThisTerm: a hello may claim any epoch. One of this leader's own term
// that it never issued cannot be genuine (terms are never reused), so it must neither
// take the partition nor run the term's counter out: that used to adopt the claim and
// set the counter to it, so a claim of counter 2^32−1 exhausted the term and made the
// leader step down.
func TestForgedEpochOfThisTerm(t *testing.T) {
	const term = 3
	tests := []struct {
		name      string
		held      []Held
		wantOwned bool // partition 1 adopted by the claimer
	}{
		{name: "counter at its end", held: []Held{{Partition: 1, Epoch: MakeEpoch(term, ^uint32(0)), State: SlotAcquired}}},
		{name: "counter just above what was issued", held: []Held{{Partition: 1, Epoch: MakeEpoch(term, 1), State: SlotAcquired}}},
		{name: "releasing at a forged epoch", held: []Held{{Partition: 1, Epoch: MakeEpoch(term, ^uint32(0)), State: SlotReleasing}}},
		{name: "an older term's epoch is adopted", held: []Held{{Partition: 1, Epoch: MakeEpoch(term-1, ^uint32(0)), State: SlotAcquired}}, wantOwned: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newCluster(t, testConfig(8), term)
			k.addShard("honest", 1)
			if err := k.c.Step(k.now, Report{Kind: ReportHello, Shard: "mallory", Session: Session{1, 1}, Held: tt.held}); err != nil {
				t.Fatalf("hello: %v", err)
			}
			if owner := k.c.assignment(1).Owner; (owner == "mallory") != tt.wantOwned {
				t.Fatalf("partition 1 owned by %q after the claim; adopted: want %v", owner, tt.wantOwned)
			}
			// Past the grace period, so the leader grants (issues epochs); mallory sends
			// no heartbeats and expires.
			k.run(30*time.Second, 500*time.Millisecond)
			st := k.c.Stats()
			if st.EpochsExhausted {
				t.Fatal("a claimed epoch exhausted this term's epochs")
			}
			if st.Epoch.Term() != term || st.Epoch.Counter() == 0 || st.Epoch.Counter() > 64 {
				t.Errorf("latest epoch %v; want a few epochs of term %d, counted from 1", st.Epoch, term)
			}
			if a := k.c.assignment(1); a.Owner != "honest" || a.Epoch.Counter() > st.Epoch.Counter() {
				t.Errorf("partition 1: owner %q at %v; want the honest shard at an epoch this leader issued", a.Owner, a.Epoch)
			}
		})
	}
}

package handoff

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/partition"
)

// TestGroups: the group a shard's hello names is its member's group in the plans, so a
// pin to a live group is satisfied (its partition moves to that group's shard, by a load
// round), a dedicated group takes nothing else while a shared one (SharedGroups) takes
// its share of unpinned partitions too, and a group's only member leaving sends its
// partitions back to the default domain, the pin reported unsatisfied.
func TestGroups(t *testing.T) {
	const P = 16
	pinned := partition.ID(3)
	ones := make([]uint32, P)
	for p := range ones {
		ones[p] = 1 // every partition holds a namespace: cost-bearing
	}
	idle := func(partition.ID) float64 { return 0 }
	// setup runs shards a and b (default group), then h in group "hot", with pinned
	// pinned to "hot", until load rounds have had their chance.
	setup := func(t *testing.T, shared []string) *cluster {
		t.Helper()
		cfg := loadConfig(P)
		cfg.Balance.Params.SharedGroups = shared
		k := newCluster(t, cfg, 1)
		k.groups = map[string]string{"h": "hot"}
		k.c.SetNamespaces(k.now, ones)
		pins := make([]string, P)
		pins[pinned] = "hot"
		k.c.SetPins(k.now, pins)
		k.addShard("a", 1)
		k.addShard("b", 1)
		k.runReporting(40*time.Second, idle)
		if a, _ := k.c.Assignment(pinned); a.Owner != "a" && a.Owner != "b" {
			t.Fatalf("without a member of %q, partition %d is owned by %q, want a default member", "hot", pinned, a.Owner)
		}
		if st := k.c.Stats().Balance; len(st.Domains) != 1 || st.Domains[0].UnsatisfiedPins != 1 {
			t.Fatalf("without a member of %q: domains %+v, want the default one with 1 unsatisfied pin", "hot", st.Domains)
		}
		k.c.Events()
		k.addShard("h", 1)
		k.runReporting(90*time.Second, idle)
		return k
	}
	owned := func(k *cluster, id string) []partition.ID {
		var out []partition.ID
		for _, a := range k.c.Assignments() {
			if a.Owner == id {
				out = append(out, a.Partition)
			}
		}
		return out
	}
	group := func(k *cluster, id string) string {
		for _, m := range k.c.Members() {
			if m.ID == id {
				return m.Group
			}
		}
		return "(no member)"
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{name: "a dedicated group takes its pin and nothing else", run: func(t *testing.T) {
			k := setup(t, nil)
			if g := group(k, "h"); g != "hot" {
				t.Fatalf("member h is in group %q, want hot", g)
			}
			if got := owned(k, "h"); !slices.Equal(got, []partition.ID{pinned}) {
				t.Fatalf("h owns %v, want only the pinned partition %d", got, pinned)
			}
			if !k.c.Converged() {
				t.Fatal("not converged")
			}
			st := k.c.Stats().Balance
			if st.Moves[balance.ReasonPin.String()] != 1 {
				t.Errorf("moves %v, want 1 for the pin", st.Moves)
			}
			if len(st.Domains) != 2 || st.Domains[1].Group != "hot" || st.Domains[1].Members != 1 || st.Domains[0].UnsatisfiedPins != 0 {
				t.Errorf("domains %+v, want the default one and hot's (1 member), no pin unsatisfied", st.Domains)
			}
		}},
		{name: "a shared group takes its pin and a share of the rest", run: func(t *testing.T) {
			k := setup(t, []string{"hot"})
			got := owned(k, "h")
			if !slices.Contains(got, pinned) || len(got) < 3 {
				t.Fatalf("h owns %v, want the pinned partition %d and a share of the others", got, pinned)
			}
			if st := k.c.Stats().Balance; len(st.Domains) != 1 || st.Domains[0].Members != 3 || st.Domains[0].UnsatisfiedPins != 0 {
				t.Errorf("domains %+v, want one of 3 members, no pin unsatisfied", st.Domains)
			}
		}},
		{name: "the group's only member leaving: back to the default domain, unsatisfied", run: func(t *testing.T) {
			k := setup(t, nil)
			k.shards["h"].Leave(k.now)
			k.runReporting(30*time.Second, idle)
			if !k.shards["h"].Done() {
				t.Fatal("h was not let go")
			}
			delete(k.shards, "h")
			k.runReporting(30*time.Second, idle) // its session expires: no member of hot
			if a, _ := k.c.Assignment(pinned); (a.Owner != "a" && a.Owner != "b") || a.State != StateOwned {
				t.Fatalf("after h left, partition %d is %s owned by %q, want a default member", pinned, a.State, a.Owner)
			}
			if st := k.c.Stats().Balance; len(st.Domains) != 1 || st.Domains[0].UnsatisfiedPins != 1 {
				t.Errorf("domains %+v, want the default one with 1 unsatisfied pin", st.Domains)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

// TestHelloGroup: a member's group is the one its hello named; a later hello of the same
// process naming another group is refused (the process's flag cannot change), and a new
// process of the shard may name another one.
func TestHelloGroup(t *testing.T) {
	tests := []struct {
		name      string
		inc       uint64
		group     string
		wantErr   bool
		wantGroup string
	}{
		{name: "same process, same group", inc: 1, group: "hot", wantGroup: "hot"},
		{name: "same process, another group", inc: 1, group: "cold", wantErr: true, wantGroup: "hot"},
		{name: "same process, the default group", inc: 1, group: "", wantErr: true, wantGroup: "hot"},
		{name: "new process, another group", inc: 2, group: "cold", wantGroup: "cold"},
		{name: "new process, the default group", inc: 2, group: "", wantGroup: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(testConfig(8), 1, t0)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Step(t0, Report{Kind: ReportHello, Shard: "s", Session: Session{Incarnation: 1, Seq: 1}, Group: "hot"}); err != nil {
				t.Fatal(err)
			}
			err = c.Step(t0.Add(time.Second), Report{Kind: ReportHello, Shard: "s", Session: Session{Incarnation: tc.inc, Seq: 2}, Group: tc.group})
			var rej *Rejection
			if tc.wantErr != (err != nil) || (err != nil && (!errors.As(err, &rej) || rej.Reason != ReasonMalformed)) {
				t.Fatalf("second hello: %v, want a malformed rejection %v", err, tc.wantErr)
			}
			members := c.Members()
			if len(members) != 1 || members[0].Group != tc.wantGroup {
				t.Fatalf("members %s, want s in group %q", fmt.Sprint(members), tc.wantGroup)
			}
		})
	}
}

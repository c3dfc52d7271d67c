package coordinatorrpc

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/placement"
)

var testBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is Options.Now for tests: it moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return testBase.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) set(d time.Duration) { c.ns.Store(int64(d)) }

// newTestServer returns a Server (not leading) over p partitions with a fake clock.
func newTestServer(t *testing.T, p int) (*Server, *fakeClock) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{}
	s, err := New(Options{Config: handoff.Config{PartitionCount: p}, Metrics: m, Now: clk.now, TickInterval: 5 * time.Millisecond}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// blockingWriter is a client that does not read: Write blocks until release is closed.
type blockingWriter struct {
	header  http.Header
	code    int
	writing chan struct{} // closed at the first Write
	release chan struct{}
	body    strings.Builder
	started atomic.Bool
}

func newBlockingWriter() *blockingWriter {
	return &blockingWriter{header: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
}

func (w *blockingWriter) Header() http.Header { return w.header }
func (w *blockingWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *blockingWriter) Write(b []byte) (int, error) {
	if w.started.CompareAndSwap(false, true) {
		close(w.writing)
	}
	<-w.release
	return w.body.Write(b)
}

// TestAssignmentsWritesOutsideTheLock: while /assignments is being written to a client
// that does not read, the server's lock is free (heartbeats need it), for every kind of
// answer.
func TestAssignmentsWritesOutsideTheLock(t *testing.T) {
	tests := []struct {
		name     string
		leading  bool
		url      string
		wantCode int
		wantBody string
	}{
		{name: "all shards", leading: true, url: "/assignments", wantCode: 200, wantBody: `"shard": "a"`},
		{name: "with partition IDs", leading: true, url: "/assignments?partitions=true", wantCode: 200, wantBody: `"partitionCount": 8`},
		{name: "with loads (count placement: none)", leading: true, url: "/assignments?loads=true", wantCode: 200, wantBody: `"loads": []`},
		{name: "one namespace", leading: true, url: "/assignments?namespace=kube-system", wantCode: 200, wantBody: `"namespace": "kube-system"`},
		{name: "follower", url: "/assignments", wantCode: 503, wantBody: "the leader is at 10.0.0.1:9443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clk := newTestServer(t, 8)
			s.SetLeaderAddress("10.0.0.1:9443")
			if tt.leading {
				core, err := handoff.New(s.opts.Config, 1, clk.now())
				if err != nil {
					t.Fatal(err)
				}
				if err := core.Step(clk.now(), handoff.Report{Kind: handoff.ReportHello, Shard: "a", Session: handoff.Session{Incarnation: 1, Seq: 1}}); err != nil {
					t.Fatal(err)
				}
				s.core, s.term = core, 1
			}
			w := newBlockingWriter()
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.AssignmentsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, tt.url, nil))
			}()
			select {
			case <-w.writing:
			case <-time.After(10 * time.Second):
				t.Fatal("the handler never wrote")
			}
			if !s.mu.TryLock() {
				close(w.release)
				<-done
				t.Fatal("the server's lock is held while the answer is written")
			}
			s.mu.Unlock()
			close(w.release)
			<-done
			code := w.code
			if code == 0 {
				code = http.StatusOK
			}
			if code != tt.wantCode || !strings.Contains(w.body.String(), tt.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tt.url, code, w.body.String(), tt.wantCode, tt.wantBody)
			}
			if tt.wantCode == http.StatusOK && !json.Valid([]byte(w.body.String())) {
				t.Fatalf("invalid JSON: %q", w.body.String())
			}
		})
	}
}

// TestLiveGroups: the groups a pin can be satisfied in are those of the members the plans
// place partitions on, not leaving and not fenced out.
func TestLiveGroups(t *testing.T) {
	tests := []struct {
		name    string
		members []handoff.MemberInfo
		want    map[string]bool
	}{
		{name: "no member"},
		{name: "default group only", members: []handoff.MemberInfo{{ID: "a"}}, want: map[string]bool{"": true}},
		{name: "a group", members: []handoff.MemberInfo{{ID: "a"}, {ID: "h", Group: "hot"}}, want: map[string]bool{"": true, "hot": true}},
		{name: "the group's member leaving", members: []handoff.MemberInfo{{ID: "a"}, {ID: "h", Group: "hot", Leaving: true}}, want: map[string]bool{"": true}},
		{name: "the group's member fenced out", members: []handoff.MemberInfo{{ID: "h", Group: "hot", FencedOut: true}, {ID: "h2", Group: "cold"}}, want: map[string]bool{"cold": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := liveGroups(tt.members); !maps.Equal(got, tt.want) {
				t.Fatalf("liveGroups = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAssignmentsGroupsAndPins: /assignments names each shard's group and lists every
// pinned partition with its state: satisfied for a group with a shard, unsatisfied for one
// without, conflict for two groups.
func TestAssignmentsGroupsAndPins(t *testing.T) {
	const p = 16
	s, clk := newTestServer(t, p)
	pm, _ := partition.NewMap(p)
	// Three namespaces of three partitions: pinned to hot (a shard's group), to warm (no
	// shard's), and a partition pinned to two groups.
	var nss []string
	used := map[partition.ID]bool{}
	for i := 0; len(nss) < 3; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		if q := pm.For(ns); !used[q] {
			used[q] = true
			nss = append(nss, ns)
		}
	}
	conflicted := pm.For(nss[2])
	in := placement.Resolve(pm, placement.Rules{Namespaces: map[string]string{nss[0]: "hot", nss[1]: "warm", nss[2]: "hot"},
		Partitions: map[partition.ID]string{conflicted: "cold"}}, nil)
	core, err := handoff.New(s.opts.Config, 1, clk.now())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ id, group string }{{"a", ""}, {"h", "hot"}} {
		if err := core.Step(clk.now(), handoff.Report{Kind: handoff.ReportHello, Shard: m.id, Group: m.group, Session: handoff.Session{Incarnation: 1, Seq: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	s.SetPlacement(in) // before leading: this test's state machine has no streams to flush to
	s.mu.Lock()
	s.core, s.term = core, 1
	s.mu.Unlock()
	a, _, _ := s.assignmentsSnapshot(assignmentsQuery{})
	all := a.(Assignments)
	groups := map[string]string{}
	for _, sv := range all.Shards {
		groups[sv.Shard] = sv.Group
	}
	if want := map[string]string{"a": "", "h": "hot"}; !maps.Equal(groups, want) {
		t.Errorf("shard groups %v, want %v", groups, want)
	}
	want := []PinView{
		{Partition: uint32(pm.For(nss[0])), Group: "hot", Source: "flag: " + nss[0], State: placement.StateSatisfied},
		{Partition: uint32(pm.For(nss[1])), Group: "warm", Source: "flag: " + nss[1], State: placement.StateUnsatisfied},
		{Partition: uint32(conflicted), Source: in.Pins[conflicted].Source, State: placement.StateConflict},
	}
	slices.SortFunc(want, func(x, y PinView) int { return int(x.Partition) - int(y.Partition) })
	if !slices.Equal(all.Pins, want) {
		t.Errorf("pins %+v, want %+v", all.Pins, want)
	}
	if wantStates := map[string]int{placement.StateSatisfied: 1, placement.StateUnsatisfied: 1, placement.StateConflict: 1}; !maps.Equal(all.PinsByState, wantStates) {
		t.Errorf("pins by state %v, want %v", all.PinsByState, wantStates)
	}
	if !strings.Contains(in.Pins[conflicted].Source, "cold") {
		t.Errorf("conflict source %q does not name both groups", in.Pins[conflicted].Source)
	}
}

// loadTestConfig is a small, fast state machine configuration: heartbeats every 3s, load
// reports every 6s with a 1-minute half-life, load rounds every 20s after a 30s warmup.
func loadTestConfig(p int, place handoff.Placement) handoff.Config {
	return handoff.Config{
		PartitionCount: p, SessionTTL: 10 * time.Second, HeartbeatInterval: 3 * time.Second, Margin: 2 * time.Second,
		Debounce: time.Second, MaxDebounce: 5 * time.Second, PrepareTimeout: 5 * time.Second, ReleaseTimeout: 30 * time.Second,
		RetryInterval: time.Second, MaxConcurrentMoves: 64,
		Load: handoff.LoadSettings{ReportInterval: 6 * time.Second, HalfLife: time.Minute, ReconcileWeight: 0.1},
		Balance: handoff.BalanceConfig{Placement: place, Enabled: place == handoff.PlacementLoad, Interval: 20 * time.Second,
			Warmup: 30 * time.Second, Cooldown: time.Second},
	}
}

// loadCluster drives a Server's real state machine with in-process shards
// (handoff.Shard) that answer its commands at once and attach a load report to a
// heartbeat every report interval, on the test's clock: what /assignments shows then
// comes from real reports, plans and moves, as with shards over gRPC (edgetest), without
// their timing.
type loadCluster struct {
	t      *testing.T
	s      *Server
	clk    *fakeClock
	now    time.Duration // since testBase
	core   *handoff.Coordinator
	shards map[string]*handoff.Shard
	groups map[string]string
	// load is each partition's load (requests/s) in the shards' reports; wait each
	// shard's rate-limiter wait; liar a shard that reports every load as 0.
	load       func(p partition.ID) float64
	wait       map[string]uint32
	liar       string
	lastReport map[string]time.Duration
}

// newLoadCluster returns a Server leading term 1 with shards (ID → group), the namespaces
// nss (each its own Namespace) and the pins of rules given as the edge gives them.
func newLoadCluster(t *testing.T, cfg handoff.Config, nss []string, rules placement.Rules, shards map[string]string) *loadCluster {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := &loadCluster{t: t, clk: &fakeClock{}, shards: map[string]*handoff.Shard{}, groups: shards,
		wait: map[string]uint32{}, lastReport: map[string]time.Duration{}, load: func(partition.ID) float64 { return 0 }}
	k.s, err = New(Options{Config: cfg, Metrics: m, Now: k.clk.now, TickInterval: time.Hour}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	pm, err := partition.NewMap(cfg.PartitionCount)
	if err != nil {
		t.Fatal(err)
	}
	var namespaces []placement.Namespace
	for _, n := range nss {
		namespaces = append(namespaces, placement.Namespace{Name: n})
	}
	in := placement.Resolve(pm, rules, namespaces)
	// Before leading: SetPlacement would flush the state machine's commands to streams,
	// and this test's shards take them from the outbox.
	k.s.SetPlacement(in)
	k.core, err = handoff.New(cfg, 1, k.clk.now())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Balance.Placement == handoff.PlacementLoad {
		k.core.SetNamespaces(k.clk.now(), in.Namespaces)
		k.core.SetPins(k.clk.now(), in.PinTable(cfg.PartitionCount))
	}
	for _, id := range slices.Sorted(mapKeys(shards)) {
		sh := handoff.NewShard(id, 1)
		k.shards[id] = sh
		sh.Connect(k.clk.now())
	}
	k.pump()
	k.s.mu.Lock()
	k.s.core, k.s.term = k.core, 1
	k.s.mu.Unlock()
	return k
}

// mapKeys yields a map's keys.
func mapKeys[V any](m map[string]V) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// pump delivers commands and reports until nothing moves. A shard's heartbeat carries a
// load report of the partitions it owns when one is due (every report interval).
func (k *loadCluster) pump() {
	k.t.Helper()
	now := k.clk.now()
	for range 1000 {
		moved := false
		for _, cmd := range k.core.Outbox() {
			moved = true
			if sh := k.shards[cmd.To]; sh != nil {
				_ = sh.Step(now, cmd) // a refused command is the protocol's business, not this test's
			}
		}
		for _, id := range slices.Sorted(mapKeys(k.shards)) {
			sh := k.shards[id]
			for _, a := range sh.Actions() {
				moved = true
				switch a.Kind {
				case handoff.ActionWarm:
					sh.Synced(now, a.Partition, a.Epoch)
				case handoff.ActionDrain:
					sh.Drained(now, a.Partition)
				}
			}
			for _, r := range sh.Outbox() {
				moved = true
				switch r.Kind {
				case handoff.ReportHello:
					r.Group = k.groups[id]
				case handoff.ReportHeartbeat:
					r.Load = k.reportOf(id)
				}
				_ = k.core.Step(now, r)
			}
			if sh.NeedsHello() {
				moved = true
				sh.Connect(now)
			}
		}
		if !moved {
			return
		}
	}
	k.t.Fatal("the cluster did not quiesce")
}

// reportOf returns shard id's load report if one is due, else nil.
func (k *loadCluster) reportOf(id string) *handoff.LoadReport {
	if last, ok := k.lastReport[id]; ok && k.now-last < 6*time.Second {
		return nil
	}
	k.lastReport[id] = k.now
	r := &handoff.LoadReport{LimiterWaitPermille: k.wait[id]}
	for _, a := range k.core.Assignments() {
		if a.Owner != id {
			continue
		}
		l := k.load(a.Partition)
		if id == k.liar {
			l = 0
		}
		r.Partitions = append(r.Partitions, handoff.PartitionLoad{Partition: a.Partition, LoadMilli: uint32(l * 1000), Objects: 10, AgeSeconds: 3600})
	}
	return r
}

// run advances the clock by total in steps of 500ms: heartbeats every 3s, a tick and a
// pump every step.
func (k *loadCluster) run(total time.Duration) {
	for end := k.now + total; k.now < end; {
		k.now += 500 * time.Millisecond
		k.clk.set(k.now)
		if k.now%(3*time.Second) == 0 {
			for _, id := range slices.Sorted(mapKeys(k.shards)) {
				k.shards[id].Heartbeat(k.clk.now())
			}
		}
		k.core.Tick(k.clk.now())
		k.pump()
	}
}

// get answers GET /assignments<query> through the handler, decoded into v; it returns
// the raw JSON.
func (k *loadCluster) get(query string, v any) string {
	k.t.Helper()
	rec := httptest.NewRecorder()
	k.s.AssignmentsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/assignments"+query, nil))
	if rec.Code != http.StatusOK {
		k.t.Fatalf("GET /assignments%s = %d %s", query, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		k.t.Fatalf("GET /assignments%s: %v", query, err)
	}
	return rec.Body.String()
}

// namespaceIn returns a namespace name of partition p (in), or of another partition (!in).
func namespaceIn(t *testing.T, pm partition.Map, p partition.ID, in bool) string {
	t.Helper()
	for i := range 100_000 {
		if n := fmt.Sprintf("ns-%d", i); (pm.For(n) == p) == in {
			return n
		}
	}
	t.Fatalf("no namespace of partition %d", p)
	return ""
}

// TestAssignmentsLoadFields: what /assignments shows of placement by load, from a real
// state machine fed by shards' reports: the shard holding a hot partition exclusive and
// the partition hot; a shard lying about its loads suspect; each shard's share of its
// placement domain's cost, the shares of a domain summing to 1; the costliest partitions,
// at most MaxLoads, costliest first with ties by partition ID; and, with
// --placement=count, none of it but the rate-limiter wait, with an empty list of loads.
func TestAssignmentsLoadFields(t *testing.T) {
	const P = 32
	const hot = partition.ID(5)
	hotLoad := func(p partition.ID) float64 {
		if p == hot {
			return 50
		}
		return 1
	}
	four := map[string]string{"s0": "", "s1": "", "s2": "", "s3": ""}
	pm, _ := partition.NewMap(P)
	var nss []string // one namespace in every partition
	for p := range partition.ID(P) {
		nss = append(nss, namespaceIn(t, pm, p, true))
	}
	tests := []struct {
		name   string
		parts  int
		place  handoff.Placement
		shards map[string]string
		rules  placement.Rules
		nss    []string
		load   func(p partition.ID) float64
		run    func(k *loadCluster)
		check  func(t *testing.T, k *loadCluster, a Assignments, raw string)
	}{
		{name: "a hot partition's owner is exclusive and the partition hot", parts: P, place: handoff.PlacementLoad, shards: four, nss: nss, load: hotLoad,
			run: func(k *loadCluster) { k.run(2 * time.Minute) },
			check: func(t *testing.T, k *loadCluster, a Assignments, _ string) {
				owner := ""
				for _, l := range a.Loads {
					if l.Partition == uint32(hot) {
						owner = l.Owner
					}
				}
				if len(a.Loads) == 0 || a.Loads[0].Partition != uint32(hot) || !a.Loads[0].Hot || owner == "" {
					t.Fatalf("loads %+v, want hot partition %d first and hot", a.Loads, hot)
				}
				for _, sv := range a.Shards {
					if sv.Exclusive != (sv.Shard == owner) {
						t.Errorf("shard %s exclusive %v; the hot partition's owner is %s", sv.Shard, sv.Exclusive, owner)
					}
				}
				movedOff := 0
				for _, l := range a.Loads[1:] {
					if l.Hot {
						t.Errorf("partition %d hot too: %+v", l.Partition, l)
					}
					if l.Owner == owner && l.Namespaces > 0 {
						t.Errorf("partition %d with a namespace still on the exclusive shard %s", l.Partition, owner)
					}
					if l.LastMove == "hot" {
						movedOff++
					}
				}
				if movedOff == 0 {
					t.Errorf("no partition's last move is hot: %+v", a.Loads)
				}
				var o Owner
				k.get("?namespace="+namespaceIn(t, pm, hot, true), &o)
				var other Owner
				k.get("?namespace="+namespaceIn(t, pm, hot, false), &other)
				if !o.Hot || other.Hot {
					t.Errorf("a namespace of the hot partition hot=%v, of another hot=%v", o.Hot, other.Hot)
				}
			}},
		{name: "a shard reporting its loads as 0 is suspect", parts: P, place: handoff.PlacementLoad, shards: four, nss: nss, load: hotLoad,
			run: func(k *loadCluster) {
				k.run(2 * time.Minute) // the hot partition isolated: partitions moved for hot
				var a Assignments
				k.get("?loads=true", &a)
				received := map[string]bool{}
				for _, l := range a.Loads {
					if l.LastMove == "hot" {
						received[l.Owner] = true
					}
				}
				if len(received) == 0 {
					k.t.Fatalf("no partition moved for hot: %+v", a.Loads)
				}
				k.liar = slices.Sorted(mapKeys(received))[0]
				k.run(4 * time.Minute) // 3 half-lives after the moves: the probes are due
			},
			check: func(t *testing.T, k *loadCluster, a Assignments, _ string) {
				for _, sv := range a.Shards {
					if sv.Suspect != (sv.Shard == k.liar) {
						t.Errorf("shard %s suspect %v; the liar is %s", sv.Shard, sv.Suspect, k.liar)
					}
				}
			}},
		{name: "load shares sum to 1 per placement domain", parts: P, place: handoff.PlacementLoad,
			shards: map[string]string{"a": "", "b": "", "c": "", "h1": "hot", "h2": "hot"}, nss: nss,
			rules: placement.Rules{Partitions: map[partition.ID]string{3: "hot", 7: "hot", 11: "hot"}},
			load:  func(p partition.ID) float64 { return float64(p%5 + 1) },
			run:   func(k *loadCluster) { k.run(2 * time.Minute) },
			check: func(t *testing.T, k *loadCluster, a Assignments, _ string) {
				sums := map[string]float64{}
				for _, sv := range a.Shards {
					if sv.LoadShare <= 0 || sv.LoadShare >= 1 {
						t.Errorf("shard %s: share %v, want in (0, 1)", sv.Shard, sv.LoadShare)
					}
					sums[sv.Group] += sv.LoadShare
				}
				for g, sum := range sums {
					if math.Abs(sum-1) > 1e-9 {
						t.Errorf("domain %q: shares sum to %v, want 1", g, sum)
					}
				}
				if len(sums) != 2 {
					t.Errorf("shares by domain %v, want the default domain and hot's", sums)
				}
				pinned := 0
				for _, l := range a.Loads {
					if want := map[bool]string{true: "hot"}[l.Partition == 3 || l.Partition == 7 || l.Partition == 11]; l.Pin != want {
						t.Errorf("partition %d pin %q, want %q", l.Partition, l.Pin, want)
					}
					if l.Pin != "" {
						pinned++
					}
				}
				if pinned != 3 {
					t.Errorf("%d pinned partitions among the loads, want 3", pinned)
				}
			}},
		{name: "at most MaxLoads, costliest first, ties by partition ID", parts: 128, place: handoff.PlacementLoad,
			shards: map[string]string{"a": "", "b": "", "c": ""},
			load:   func(p partition.ID) float64 { return float64(p % 10) }, // 0 for a tenth: cost 0
			run:    func(k *loadCluster) { k.run(time.Minute) },
			check: func(t *testing.T, k *loadCluster, a Assignments, _ string) {
				// Without namespaces a partition's cost is its load.
				var want []partition.ID
				for p := range partition.ID(128) {
					if p%10 != 0 {
						want = append(want, p)
					}
				}
				slices.SortStableFunc(want, func(x, y partition.ID) int { return cmp.Compare(y%10, x%10) })
				want = want[:MaxLoads]
				if len(a.Loads) != MaxLoads {
					t.Fatalf("%d loads, want %d", len(a.Loads), MaxLoads)
				}
				for i, l := range a.Loads {
					if l.Partition != uint32(want[i]) || l.Cost != float64(want[i]%10) || l.Owner == "" {
						t.Fatalf("entry %d: %+v, want partition %d of cost %d, owned", i, l, want[i], want[i]%10)
					}
				}
			}},
		{name: "count placement: no load fields but the limiter wait, an empty list", parts: P, place: handoff.PlacementCount, shards: four, nss: nss, load: hotLoad,
			run: func(k *loadCluster) { k.run(2 * time.Minute) },
			check: func(t *testing.T, k *loadCluster, a Assignments, raw string) {
				if a.Loads == nil || len(a.Loads) != 0 || !strings.Contains(raw, `"loads": []`) {
					t.Errorf("loads %+v, want an empty list", a.Loads)
				}
				for _, key := range []string{`"loadShare"`, `"exclusive"`, `"suspect"`} {
					if strings.Contains(raw, key) {
						t.Errorf("count placement's answer has %s", key)
					}
				}
				for _, sv := range a.Shards {
					if sv.LimiterWaitPermille != k.wait[sv.Shard] {
						t.Errorf("shard %s: limiter wait %d‰, want %d‰ as reported", sv.Shard, sv.LimiterWaitPermille, k.wait[sv.Shard])
					}
				}
				var o Owner
				k.get("?namespace="+namespaceIn(t, pm, hot, true), &o)
				if o.Hot {
					t.Error("a namespace hot with count placement")
				}
				var plain Assignments
				if raw := k.get("", &plain); strings.Contains(raw, `"loads"`) {
					t.Errorf("loads without ?loads=true: %s", raw)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newLoadCluster(t, loadTestConfig(tt.parts, tt.place), tt.nss, tt.rules, tt.shards)
			k.load = tt.load
			for i, id := range slices.Sorted(mapKeys(tt.shards)) {
				k.wait[id] = uint32(100 * (i + 1))
			}
			tt.run(k)
			var a Assignments
			raw := k.get("?loads=true", &a)
			if len(a.Shards) != len(tt.shards) {
				t.Fatalf("shards %+v, want %d", a.Shards, len(tt.shards))
			}
			for _, sv := range a.Shards {
				if sv.LimiterWaitPermille != k.wait[sv.Shard] {
					t.Errorf("shard %s: limiter wait %d‰, want %d‰", sv.Shard, sv.LimiterWaitPermille, k.wait[sv.Shard])
				}
			}
			tt.check(t, k, a, raw)
		})
	}
}

// TestAssignmentsInFlight: at most MaxAssignmentsInFlight requests are served at once
// (here held while writing their answers, as slow readers would); one more is refused
// with 429 and Retry-After, and served again once one has finished.
func TestAssignmentsInFlight(t *testing.T) {
	s, clk := newTestServer(t, 8)
	core, err := handoff.New(s.opts.Config, 1, clk.now())
	if err != nil {
		t.Fatal(err)
	}
	s.core, s.term = core, 1
	get := func(w http.ResponseWriter) {
		s.AssignmentsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/assignments", nil))
	}
	var held []*blockingWriter
	var done []chan struct{}
	for range MaxAssignmentsInFlight {
		w := newBlockingWriter()
		d := make(chan struct{})
		go func() { defer close(d); get(w) }()
		select {
		case <-w.writing:
		case <-time.After(10 * time.Second):
			t.Fatal("a request within the bound was not served")
		}
		held, done = append(held, w), append(done, d)
	}
	over := httptest.NewRecorder()
	get(over)
	if over.Code != http.StatusTooManyRequests || over.Header().Get("Retry-After") == "" {
		t.Errorf("request %d: %d (Retry-After %q), want 429 with Retry-After", MaxAssignmentsInFlight+1, over.Code, over.Header().Get("Retry-After"))
	}
	close(held[0].release)
	<-done[0]
	again := httptest.NewRecorder()
	get(again)
	if again.Code != http.StatusOK {
		t.Errorf("after one finished: %d %q, want 200", again.Code, again.Body.String())
	}
	for i := 1; i < len(held); i++ {
		close(held[i].release)
		<-done[i]
	}
}

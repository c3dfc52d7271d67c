package coordinatorrpc

import (
	"encoding/json"
	"fmt"
	"maps"
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
	a, _, _ := s.assignmentsSnapshot("", false)
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

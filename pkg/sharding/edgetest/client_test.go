package edgetest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	"github.com/kshard/kshard/pkg/sharding/transport"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
	"github.com/kshard/kshard/test/testpki"
)

// TestClientScenario runs one coordinator and shards through the life of a cluster:
// two shards join, a third joins (warm moves), one leaves gracefully, one dies. After
// every step all partitions are worked by exactly one live shard and the coordinator
// agrees; throughout, no partition is ever worked by two shards (checked at every
// handler call and sampled every few milliseconds).
func TestClientScenario(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), nil)
	co.lead(t, 1)
	creds, addrs := insecureClient(t), []string{co.addr}
	margin := testConfig().Margin

	var a, b, c *shard
	var owners map[partition.ID]string
	moves := func() (started, finished, aborted float64) {
		return testutil.ToFloat64(co.metrics.MovesStarted), testutil.ToFloat64(co.metrics.MovesFinished),
			testutil.ToFloat64(co.metrics.MovesAborted)
	}
	memberEvents := func(kind string) float64 {
		return testutil.ToFloat64(co.metrics.MemberEvents.WithLabelValues(kind))
	}

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{{
		name: "two shards join and split the partitions",
		run: func(st *testing.T) {
			a = startShard(t, w, "shard-a", creds, addrs, nil)
			b = startShard(t, w, "shard-b", creds, addrs, nil)
			owners = co.waitSettled(st, w, a, b)
			per := byShard(owners)
			for _, s := range []*shard{a, b} {
				if len(per[s.id]) == 0 {
					st.Errorf("%s works no partition: %v", s.id, per)
				}
				if n := s.h.count("stop"); n != 0 {
					st.Errorf("%s was told to stop working %d times", s.id, n)
				}
				if !s.c.Welcomed() {
					st.Errorf("%s is not welcomed", s.id)
				}
			}
			st.Logf("split: %s=%d %s=%d", a.id, len(per[a.id]), b.id, len(per[b.id]))
		},
	}, {
		name: "a third shard joins: partitions move warm",
		run: func(st *testing.T) {
			from, before := w.mark(), owners
			s0, f0, a0 := moves()
			c = startShard(t, w, "shard-c", creds, addrs, nil)
			owners = co.waitSettled(st, w, a, b, c)
			if len(byShard(owners)[c.id]) == 0 {
				st.Fatalf("the new shard got no partition: %v", byShard(owners))
			}
			var moved []partition.ID
			for p := range partition.ID(partitions) {
				if owners[p] != before[p] {
					moved = append(moved, p)
				}
			}
			evs := w.eventsSince(from)
			for _, p := range moved {
				checkMoveOrder(st, evs, p, before[p], owners[p])
			}
			s1, f1, a1 := moves()
			if s1-s0 != float64(len(moved)) || f1-f0 != float64(len(moved)) || a1 != a0 {
				st.Errorf("moves started %v, finished %v, aborted %v; want %d, %d, 0 (one per partition that changed owner)",
					s1-s0, f1-f0, a1-a0, len(moved), len(moved))
			}
			for _, s := range []*shard{a, b, c} {
				if n := s.h.count("stop"); n != 0 {
					st.Errorf("%s was told to stop working %d times; moves must drain", s.id, n)
				}
			}
			st.Logf("%d partitions moved; split %v", len(moved), counts(owners))
		},
	}, {
		name: "a shard leaves gracefully",
		run: func(st *testing.T) {
			from, held := w.mark(), byShard(owners)[c.id]
			c.c.Leave()
			select {
			case <-c.c.Done():
			case <-time.After(settleTimeout):
				st.Fatalf("Done not closed %v after Leave", settleTimeout)
			}
			select {
			case <-c.finished:
				if c.runErr != nil {
					st.Errorf("Run returned %v after the farewell", c.runErr)
				}
			case <-time.After(10 * time.Second):
				st.Fatal("Run did not return after the farewell")
			}
			if ws := c.h.workingSet(); len(ws) != 0 {
				st.Errorf("the leaving shard still works %v after the farewell", ws)
			}
			if n := c.h.count("stop"); n != 0 {
				st.Errorf("the leaving shard was stopped %d times; it must drain", n)
			}
			owners = co.waitSettled(st, w, a, b)
			evs := w.eventsSince(from)
			for _, p := range held {
				checkHandedOver(st, evs, p, c.id, owners[p])
			}
			waitFor(st, 10*time.Second, "the member-left event", func() (bool, string) {
				n := memberEvents("member-left")
				return n == 1, fmt.Sprintf("member-left = %v", n)
			})
		},
	}, {
		name: "a shard restarts: the new process waits for the old one's lease",
		run: func(st *testing.T) {
			from, held := w.mark(), byShard(owners)[b.id]
			old := b
			restarted := time.Now()
			old.kill(st)
			b = startShard(t, w, old.id, creds, addrs, nil) // same ID, higher incarnation
			owners = co.waitSettled(st, w, a, b)
			first := checkTakenAfterLease(st, w.eventsSince(from), held, old.h.getDeadline().Add(margin))
			if n := memberEvents("member-restarted"); n != 1 {
				st.Errorf("member-restarted = %v, want 1", n)
			}
			st.Logf("partitions of the old process worked again %v after the restart", first.Sub(restarted).Round(time.Millisecond))
		},
	}, {
		name: "a shard dies: its partitions move after its lease ran out",
		run: func(st *testing.T) {
			from, held := w.mark(), byShard(owners)[b.id]
			died := time.Now()
			b.kill(st) // no Leave: the process is gone
			deadline := b.h.getDeadline()
			owners = co.waitSettled(st, w, a)
			// The coordinator expires a silent shard TTL+Margin after the last heartbeat it
			// received; the shard's own lease ends TTL after it sent it.
			first := checkTakenAfterLease(st, w.eventsSince(from), held, deadline.Add(margin))
			waitFor(st, 10*time.Second, "the member-expired event", func() (bool, string) {
				n := memberEvents("member-expired")
				return n == 1, fmt.Sprintf("member-expired = %v", n)
			})
			if n := a.h.count("stop"); n != 0 {
				st.Errorf("%s was told to stop working %d times", a.id, n)
			}
			st.Logf("partitions of the dead shard worked again %v after it died (lease deadline was %v after)",
				first.Sub(died).Round(time.Millisecond), deadline.Sub(died).Round(time.Millisecond))
		},
	}}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			break
		}
	}
	w.assertNoDoubleWork(t)
}

// checkTakenAfterLease checks that every partition in held was worked again (by anybody)
// and never before notBefore; it returns when the first one was.
func checkTakenAfterLease(t *testing.T, evs []event, held []partition.ID, notBefore time.Time) time.Time {
	t.Helper()
	var first time.Time
	for _, p := range held {
		i := slices.IndexFunc(evs, func(e event) bool { return e.p == p && e.kind == "work" })
		if i < 0 {
			t.Errorf("p%d was never worked again", p)
			continue
		}
		if at := evs[i].at; at.Before(notBefore) {
			t.Errorf("p%d worked by %s at %s, before the old holder's lease deadline + margin %s",
				p, evs[i].shard, at.Format("15:04:05.000"), notBefore.Format("15:04:05.000"))
		}
		if first.IsZero() || evs[i].at.Before(first) {
			first = evs[i].at
		}
	}
	return first
}

// checkMoveOrder checks the three steps of a move of p: Prepare (the destination warms,
// and its caches sync), Release (the source drains) and Acquire (the destination works
// only after the source finished draining).
func checkMoveOrder(t *testing.T, evs []event, p partition.ID, src, dst string) {
	t.Helper()
	steps := []struct{ shard, kind string }{{dst, "warm"}, {dst, "synced"}, {src, "drain"}, {src, "drained"}, {dst, "work"}}
	i := 0
	for _, e := range evs {
		if e.p != p {
			continue
		}
		if e.shard == dst && e.kind == "work" && i < len(steps)-1 {
			break // worked before the source drained
		}
		if i < len(steps) && e.shard == steps[i].shard && e.kind == steps[i].kind {
			i++
		}
	}
	if i < len(steps) {
		t.Errorf("move of p%d from %s to %s: step %s %s missing or out of order; events: %s",
			p, src, dst, steps[i].shard, steps[i].kind, describe(evs, p))
	}
}

// checkHandedOver checks that a leaving shard drained p before dst worked it.
func checkHandedOver(t *testing.T, evs []event, p partition.ID, src, dst string) {
	t.Helper()
	steps := []struct{ shard, kind string }{{src, "drain"}, {src, "drained"}, {dst, "work"}}
	i := 0
	for _, e := range evs {
		if e.p == p && i < len(steps) && e.shard == steps[i].shard && e.kind == steps[i].kind {
			i++
		}
	}
	if i < len(steps) {
		t.Errorf("hand-over of p%d from %s to %s: %s %s missing; events: %s", p, src, dst, steps[i].shard, steps[i].kind, describe(evs, p))
	}
}

func describe(evs []event, p partition.ID) string {
	var b strings.Builder
	for _, e := range evs {
		if e.p == p {
			fmt.Fprintf(&b, "%s:%s ", e.shard, e.kind)
		}
	}
	return b.String()
}

func counts(owners map[partition.ID]string) map[string]int {
	out := map[string]int{}
	for _, s := range owners {
		out[s]++
	}
	return out
}

// TestClientFollowsLeaderHint: a follower refuses the session naming the leader in a
// trailer, and the client goes there, even when the follower is its only address.
func TestClientFollowsLeaderHint(t *testing.T) {
	w := newWorld(t)
	leader := startCoordinator(t, w, "leader", insecureServer(t), nil)
	leader.lead(t, 1)
	follower := startCoordinator(t, w, "follower", insecureServer(t), nil)
	follower.srv.SetLeaderAddress(leader.addr)
	creds := insecureClient(t)

	cases := []struct {
		name       string
		addrs      []string
		statsDelay time.Duration
	}{
		{name: "follower first, then the leader", addrs: []string{follower.addr, leader.addr}},
		{name: "only the follower: the hint is the way", addrs: []string{follower.addr}},
		// The follower's refusal arrives before the client sends its hello: the send fails
		// with io.EOF and the hint must still be read from the stream's status.
		{name: "only the follower, slow hello", addrs: []string{follower.addr}, statsDelay: 100 * time.Millisecond},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startShard(t, w, fmt.Sprintf("hint-%d", i), creds, tc.addrs, func(_ *shardrpc.Options, h *fakeHandler) {
				h.statsDelay = tc.statsDelay
			})
			waitFor(t, 10*time.Second, "the leader to welcome the shard", func() (bool, string) {
				if !s.c.Welcomed() {
					return false, "not welcomed"
				}
				a, ok := leader.assignments(t)
				if !ok {
					return false, "leader not leading"
				}
				for _, v := range a.Shards {
					if v.Shard == s.id && v.Connected {
						return true, ""
					}
				}
				return false, fmt.Sprintf("the leader's members are %v", a.Shards)
			})
			if n := testutil.ToFloat64(s.metrics.Reconnects); n < 2 {
				t.Errorf("reconnects = %v: the client must have tried the follower first", n)
			}
			if n := testutil.ToFloat64(follower.metrics.Sessions); n != 0 {
				t.Errorf("the follower served %v sessions", n)
			}
			s.kill(t)
		})
	}
}

// TestClientMutualTLS: the session works over mutual TLS, and peers without the right
// certificates are refused before any session starts.
func TestClientMutualTLS(t *testing.T) {
	pki, other := testpki.New(t), testpki.New(t)
	w := newWorld(t)
	serverCreds, err := transport.ServerCredentials(transport.TLSOptions{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CAFile: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	co := startCoordinator(t, w, "coordinator", serverCreds, nil)
	co.lead(t, 1)
	clientCreds, err := transport.ClientCredentials(transport.TLSOptions{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, CAFile: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	s := startShard(t, w, "shard-tls", clientCreds, []string{co.addr}, nil)
	co.waitSettled(t, w, s)
	sessions := testutil.ToFloat64(co.metrics.Sessions)

	refused := []struct {
		name string
		opts transport.TLSOptions
	}{
		{"no client certificate", transport.TLSOptions{CAFile: pki.CA}},
		{"client certificate of another CA", transport.TLSOptions{CertFile: other.ClientCert, KeyFile: other.ClientKey, CAFile: pki.CA}},
		{"server certificate not trusted", transport.TLSOptions{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, CAFile: other.CA}},
		{"plaintext", transport.TLSOptions{Insecure: true}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			creds, err := transport.ClientCredentials(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient(co.addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := kshardv1.NewCoordinatorClient(cc).Session(ctx)
			if err == nil {
				_ = stream.Send(&kshardv1.ShardMessage{Session: &kshardv1.Session{Incarnation: 1, Seq: 1},
					Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: "intruder"}}})
				_, err = stream.Recv()
			}
			if status.Code(err) != codes.Unavailable {
				t.Errorf("session ended with %v, want Unavailable (refused at the TLS handshake)", err)
			}
		})
	}
	if n := testutil.ToFloat64(co.metrics.Sessions); n != sessions {
		t.Errorf("sessions went from %v to %v: a refused peer got a session", sessions, n)
	}
	if ws := s.h.workingSet(); len(ws) != partitions {
		t.Errorf("the mutual-TLS shard works %d partitions, want %d", len(ws), partitions)
	}
}

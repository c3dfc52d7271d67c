package edgetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kshard/kshard/pkg/sharding/coordinatorrpc"
	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	"github.com/kshard/kshard/pkg/sharding/shardrpc"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// ---------------------------------------------------------------------------------------
// Raw protocol helpers: a hand-written shard that sends exactly what a test wants.

func openStream(t testing.TB, addr string) kshardv1.Coordinator_SessionClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(func() {
		cancel()
		_ = cc.Close()
	})
	stream, err := kshardv1.NewCoordinatorClient(cc).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func sess(inc, seq uint64) *kshardv1.Session { return &kshardv1.Session{Incarnation: inc, Seq: seq} }

func hello(shard string, inc uint64, held ...*kshardv1.Held) *kshardv1.ShardMessage {
	return &kshardv1.ShardMessage{Session: sess(inc, 1),
		Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: shard, BuildVersion: "raw", Held: held}}}
}

func heartbeat(inc, seq uint64) *kshardv1.ShardMessage {
	return &kshardv1.ShardMessage{Session: sess(inc, 1), Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{Seq: seq}}}
}

// loadHeartbeat is a heartbeat carrying a load report of four parallel lists.
func loadHeartbeat(inc, seq uint64, parts, loads, objects, ages []uint32) *kshardv1.ShardMessage {
	m := heartbeat(inc, seq)
	m.GetHeartbeat().Load = &kshardv1.LoadReport{Partitions: parts, LoadMilli: loads, Objects: objects, AgeSeconds: ages}
	return m
}

func acquired(p uint32, e handoff.Epoch) *kshardv1.Held {
	return &kshardv1.Held{Partition: p, Epoch: uint64(e), State: kshardv1.SlotState_SLOT_STATE_ACQUIRED}
}

// sendAll sends msgs and returns every message received until the stream ends, and how
// it ended.
func sendAll(t *testing.T, stream kshardv1.Coordinator_SessionClient, msgs ...*kshardv1.ShardMessage) ([]*kshardv1.CoordinatorMessage, error) {
	t.Helper()
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				break // the server ended the stream; Recv tells why
			}
			t.Fatalf("send: %v", err)
		}
	}
	var got []*kshardv1.CoordinatorMessage
	for {
		m, err := stream.Recv()
		if err != nil {
			return got, err
		}
		got = append(got, m)
	}
}

// ---------------------------------------------------------------------------------------

// TestFollowerRefusesSessions: a replica that does not lead refuses every session with
// FailedPrecondition, naming the leader in the kshard-leader trailer once it knows it; a
// shard with the follower first in its list reaches the leader; a replica whose leadership
// ends closes its streams at once and refuses again.
func TestFollowerRefusesSessions(t *testing.T) {
	w := newWorld(t)
	leader := startCoordinator(t, w, "leader", insecureServer(t), nil)
	leader.lead(t, 1)
	f := startCoordinator(t, w, "replica", insecureServer(t), nil)

	refused := func(t *testing.T, wantHint string) {
		t.Helper()
		stream := openStream(t, f.addr)
		got, err := sendAll(t, stream, hello("raw-shard", 1))
		if status.Code(err) != codes.FailedPrecondition || len(got) != 0 {
			t.Fatalf("got %d messages and %v, want FailedPrecondition and nothing else", len(got), err)
		}
		var hint []string
		if wantHint != "" {
			hint = []string{wantHint}
		}
		if tr := stream.Trailer().Get(protocol.LeaderMetadataKey); !slices.Equal(tr, hint) {
			t.Errorf("trailer %s = %q, want %q", protocol.LeaderMetadataKey, tr, hint)
		}
		if wantHint != "" && !strings.Contains(status.Convert(err).Message(), wantHint) {
			t.Errorf("refusal %q does not name the leader", status.Convert(err).Message())
		}
		if f.srv.Leading() {
			t.Error("Leading() is true")
		}
	}

	var open kshardv1.Coordinator_SessionClient
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"no leader known: refused without a hint", func(t *testing.T) { refused(t, "") }},
		{"leader known: refused naming it", func(t *testing.T) {
			f.srv.SetLeaderAddress(leader.addr)
			refused(t, leader.addr)
		}},
		{"a shard listing the follower first reaches the leader", func(t *testing.T) {
			s := startShard(t, w, "shard-a", insecureClient(t), []string{f.addr, leader.addr}, nil)
			waitFor(t, 10*time.Second, "the leader to welcome the shard", func() (bool, string) {
				a, _ := leader.assignments(t)
				return s.c.Welcomed() && len(a.Shards) == 1 && a.Shards[0].Shard == s.id && a.Shards[0].Connected,
					fmt.Sprintf("welcomed=%v leader members=%+v", s.c.Welcomed(), a.Shards)
			})
			if n := testutil.ToFloat64(f.metrics.Sessions); n != 0 {
				t.Errorf("the follower served %v sessions", n)
			}
			s.kill(t)
		}},
		{"leading: the same replica welcomes a hello", func(st *testing.T) {
			f.lead(st, 2)
			open = openStream(t, f.addr) // used by the next step too
			t := st
			if err := open.Send(hello("raw-shard", 7)); err != nil {
				t.Fatal(err)
			}
			m, err := open.Recv()
			if err != nil || m.GetWelcome() == nil {
				t.Fatalf("got %v, %v; want a Welcome", m, err)
			}
			if w := m.GetWelcome(); w.LeaderTerm != 2 || w.PartitionCount != partitions || w.Ttl.AsDuration() != testConfig().SessionTTL {
				t.Errorf("welcome %v: want term 2, %d partitions, TTL %v", w, partitions, testConfig().SessionTTL)
			}
			if n := testutil.ToFloat64(f.metrics.Leader); n != 1 {
				t.Errorf("leader gauge = %v", n)
			}
		}},
		{"leadership ends: open streams close, new ones are refused", func(t *testing.T) {
			f.stopLeading(t)
			if f.srv.Leading() {
				t.Fatal("still Leading() after Lead returned")
			}
			_, err := sendAll(t, open)
			if status.Code(err) != codes.Unavailable {
				t.Errorf("the open stream ended with %v, want Unavailable", err)
			}
			if n := testutil.ToFloat64(f.metrics.Leader); n != 0 {
				t.Errorf("leader gauge = %v after leadership ended", n)
			}
			refused(t, leader.addr)
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			break
		}
	}
}

// TestRejectedMessages: malformed messages close the stream with InvalidArgument and are
// counted with reason="malformed"; messages the state machine refuses are counted by
// their reason.
func TestRejectedMessages(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) {
		o.HelloTimeout = 500 * time.Millisecond
	})
	co.lead(t, 3)
	newer := handoff.MakeEpoch(9, 1)

	cases := []struct {
		name string
		// afterHello: the stream first opens a valid session (hello, welcome).
		afterHello   bool
		msgs         func(shard string) []*kshardv1.ShardMessage
		wantCode     codes.Code
		wantReason   string // "" means nothing is counted
		wantStepDown bool
	}{{
		name:       "heartbeat before hello",
		msgs:       func(string) []*kshardv1.ShardMessage { return []*kshardv1.ShardMessage{heartbeat(1, 1)} },
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "message without a kind",
		msgs: func(string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{{Session: sess(1, 1)}}
		},
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "hello with an invalid shard id",
		msgs: func(string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{hello("Not_A_DNS_Name", 1)}
		},
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "hello without a session",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			m := hello(shard, 1)
			m.Session = nil
			return []*kshardv1.ShardMessage{m}
		},
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "hello holding a partition out of range",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{hello(shard, 1, acquired(partitions, handoff.MakeEpoch(2, 1)))}
		},
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "hello listing a partition twice",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			e := handoff.MakeEpoch(2, 1)
			return []*kshardv1.ShardMessage{hello(shard, 1, acquired(5, e), acquired(5, e))}
		},
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "report of a partition out of range after the hello",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{{Session: sess(1, 1),
				Kind: &kshardv1.ShardMessage_Prepared{Prepared: &kshardv1.PartitionReport{Partition: 1000, Epoch: 1}}}}
		},
		afterHello: true,
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "heartbeat without seq after the hello",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{heartbeat(1, 0)}
		},
		afterHello: true,
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "heartbeat with a load report out of order",
		msgs: func(string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{loadHeartbeat(1, 1, []uint32{5, 3}, []uint32{1, 1}, []uint32{1, 1}, []uint32{1, 1})}
		},
		afterHello: true,
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "heartbeat with load lists of unequal lengths",
		msgs: func(string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{loadHeartbeat(1, 1, []uint32{3, 5}, []uint32{1}, []uint32{1, 1}, []uint32{1, 1})}
		},
		afterHello: true,
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "heartbeat with a load report of a partition out of range",
		msgs: func(string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{loadHeartbeat(1, 1, []uint32{partitions}, []uint32{1}, []uint32{1}, []uint32{1})}
		},
		afterHello: true,
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name: "hello of another shard on the stream",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{hello(shard+"-other", 1)}
		},
		afterHello: true,
		wantCode:   codes.InvalidArgument,
		wantReason: "malformed",
	}, {
		name:     "no hello in time",
		msgs:     func(string) []*kshardv1.ShardMessage { return nil },
		wantCode: codes.DeadlineExceeded,
	}, {
		// Valid on the wire, refused by the state machine: this leader is deposed.
		name: "hello holding an epoch of a newer term",
		msgs: func(shard string) []*kshardv1.ShardMessage {
			return []*kshardv1.ShardMessage{hello(shard, 1, acquired(3, newer))}
		},
		wantCode:     codes.FailedPrecondition,
		wantReason:   "newer_term",
		wantStepDown: true,
	}}
	const rejected = "kshard_coordinator_rejected_messages_total"
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			shard := fmt.Sprintf("raw-%d", i)
			total0 := co.metricSum(t, rejected)
			var reason0 float64
			if tc.wantReason != "" {
				reason0 = testutil.ToFloat64(co.metrics.Rejected.WithLabelValues(tc.wantReason))
			}
			stream := openStream(t, co.addr)
			if tc.afterHello {
				if err := stream.Send(hello(shard, 1)); err != nil {
					t.Fatal(err)
				}
				if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
					t.Fatalf("got %v, %v; want a Welcome", m, err)
				}
			}
			_, err := sendAll(t, stream, tc.msgs(shard)...)
			if status.Code(err) != tc.wantCode {
				t.Errorf("stream ended with %v, want %v", err, tc.wantCode)
			}
			wantTotal := total0
			if tc.wantReason != "" {
				wantTotal++
				if n := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues(tc.wantReason)); n != reason0+1 {
					t.Errorf("%s{reason=%q} went from %v to %v, want +1", rejected, tc.wantReason, reason0, n)
				}
			}
			if n := co.metricSum(t, rejected); n != wantTotal {
				t.Errorf("%s total went from %v to %v, want %v", rejected, total0, n, wantTotal)
			}
			if tc.wantStepDown {
				select {
				case reason := <-co.stepDowns:
					t.Logf("stepped down: %s", reason)
				case <-time.After(10 * time.Second):
					t.Error("did not step down after a shard reported a newer term")
				}
			}
		})
	}
	select {
	case reason := <-co.stepDowns:
		t.Errorf("stepped down once more: %s", reason)
	default:
	}
	if !co.srv.Leading() {
		t.Error("the coordinator stopped leading by itself: only StepDown's caller may end Lead")
	}
}

// TestLeadershipChange: when leadership ends, streams close and shards reconnect to the
// next leader (the same replica, or another one), which adopts what they report: no
// partition moves, no handler is told to stop or drop anything, epochs stay those of the
// old term.
func TestLeadershipChange(t *testing.T) {
	cases := []struct {
		name     string
		failover bool // another replica takes over; otherwise the same one leads again
	}{
		{name: "the same replica leads again"},
		{name: "another replica takes over", failover: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			old := startCoordinator(t, w, "old", insecureServer(t), nil)
			old.srv.SetLeaderAddress(old.addr)
			old.lead(t, 1)
			next, addrs := old, []string{old.addr}
			if tc.failover {
				next = startCoordinator(t, w, "new", insecureServer(t), nil)
				next.srv.SetLeaderAddress(old.addr)
				addrs = append(addrs, next.addr)
			}
			creds := insecureClient(t)
			shards := []*shard{
				startShard(t, w, "shard-a", creds, addrs, nil),
				startShard(t, w, "shard-b", creds, addrs, nil),
			}
			owners := old.waitSettled(t, w, shards...)

			before := map[string]map[string]int{}
			reconnects := map[string]float64{}
			for _, s := range shards {
				before[s.id] = s.h.countsCopy()
				reconnects[s.id] = testutil.ToFloat64(s.metrics.Reconnects)
			}
			moves0 := testutil.ToFloat64(next.metrics.MovesStarted)

			old.stopLeading(t)
			if old.srv.Leading() {
				t.Fatal("Leading() after Lead returned")
			}
			if code, _ := old.get(""); code != http.StatusServiceUnavailable {
				t.Errorf("GET /assignments = %d after leadership ended, want 503", code)
			}
			waitFor(t, 10*time.Second, "every shard's stream to close", func() (bool, string) {
				for _, s := range shards {
					if testutil.ToFloat64(s.metrics.Reconnects) == reconnects[s.id] {
						return false, s.id + " did not reconnect"
					}
				}
				return true, ""
			})
			if tc.failover {
				old.srv.SetLeaderAddress(next.addr)
			}
			next.lead(t, 2)
			if got := next.waitSettled(t, w, shards...); !mapsEqual(got, owners) {
				t.Errorf("owners changed across the leadership change:\nbefore %v\nafter  %v", byShard(owners), byShard(got))
			}
			a, _ := next.assignments(t)
			if a.Term != 2 {
				t.Errorf("term %d, want 2", a.Term)
			}
			if n := testutil.ToFloat64(next.metrics.MovesStarted) - moves0; n != 0 {
				t.Errorf("%v moves started in the new term, want 0", n)
			}
			for _, s := range shards {
				// Handler calls only; "synced" is a Warm of before completing late.
				after := s.h.countsCopy()
				delete(after, "synced")
				delete(before[s.id], "synced")
				if !mapsEqual(after, before[s.id]) {
					t.Errorf("%s: handler calls went from %v to %v; the new leader must adopt, not move", s.id, before[s.id], after)
				}
			}
			// Adopted: the new leader keeps the old term's epochs.
			for _, ns := range []string{"default", "kube-system", "team-a"} {
				var o coordinatorrpc.Owner
				code, body := next.get("?namespace=" + ns)
				if err := json.Unmarshal(body, &o); code != http.StatusOK || err != nil {
					t.Fatalf("GET ?namespace=%s: %d %s", ns, code, body)
				}
				if !strings.HasPrefix(o.Epoch, "1.") || o.State != "owned" {
					t.Errorf("namespace %s: %+v, want owned at an epoch of term 1", ns, o)
				}
			}
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// TestAssignmentsHTTP: GET /assignments answers the leader's view as JSON, per namespace
// with ?namespace=, with partition IDs with ?partitions=true, and 503 naming the leader
// while not leading.
func TestAssignmentsHTTP(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), nil)
	hs := httptest.NewServer(co.srv.AssignmentsHandler())
	t.Cleanup(hs.Close)
	get := func(t *testing.T, method, query string) (int, string, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+"/assignments"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), body
	}
	decode := func(t *testing.T, body []byte, v any) {
		t.Helper()
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("decoding %s: %v", body, err)
		}
	}
	notLeading := func(t *testing.T, leader string) {
		t.Helper()
		code, _, body := get(t, http.MethodGet, "")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "not the leader") ||
			(leader != "" && !strings.Contains(string(body), leader)) {
			t.Errorf("got %d %q, want 503 naming leader %q", code, body, leader)
		}
	}

	var shards []*shard
	var owners map[partition.ID]string
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"not leading, no leader known: 503", func(t *testing.T) { notLeading(t, "") }},
		{"not leading: 503 naming the leader", func(t *testing.T) {
			co.srv.SetLeaderAddress("10.0.0.9:9443")
			notLeading(t, "10.0.0.9:9443")
		}},
		{"leading: every shard with its partitions", func(st *testing.T) {
			co.lead(st, 5)
			creds := insecureClient(st)
			shards = []*shard{startShard(t, w, "shard-a", creds, []string{co.addr}, nil), startShard(t, w, "shard-b", creds, []string{co.addr}, nil)}
			owners = co.waitSettled(st, w, shards...)
			per := byShard(owners)
			// Namespaces come from the shards' stats on their heartbeats.
			var a coordinatorrpc.Assignments
			waitFor(st, 10*time.Second, "stats from the shards' heartbeats", func() (bool, string) {
				code, ctype, body := get(st, http.MethodGet, "")
				if code != http.StatusOK || ctype != "application/json" {
					st.Fatalf("got %d %s: %s", code, ctype, body)
				}
				a = coordinatorrpc.Assignments{}
				decode(st, body, &a)
				for _, v := range a.Shards {
					if v.Namespaces != uint64(v.Partitions) {
						return false, fmt.Sprintf("%+v", a.Shards)
					}
				}
				return true, ""
			})
			want := coordinatorrpc.Assignments{Term: 5, PartitionCount: partitions, Converged: true, Placement: "count",
				ByState: map[string]int{"unowned": 0, "acquiring": 0, "owned": partitions, "preparing": 0, "releasing": 0}}
			for _, s := range shards {
				n := len(per[s.id])
				want.Shards = append(want.Shards, coordinatorrpc.ShardView{Shard: s.id, Partitions: n, Namespaces: uint64(n),
					Connected: true, Version: "test"})
			}
			if ja, jw := mustJSON(st, a), mustJSON(st, want); ja != jw {
				st.Errorf("GET /assignments:\n got %s\nwant %s", ja, jw)
			}
			code, _, body := get(st, http.MethodGet, "?partitions=true")
			if code != http.StatusOK {
				st.Fatalf("?partitions=true: %d %s", code, body)
			}
			a = coordinatorrpc.Assignments{}
			decode(st, body, &a)
			for _, v := range a.Shards {
				var ids []uint32
				for _, p := range per[v.Shard] {
					ids = append(ids, uint32(p))
				}
				if !slices.Equal(v.PartitionIDs, ids) {
					st.Errorf("%s: partition IDs %v, handler works %v", v.Shard, v.PartitionIDs, ids)
				}
			}
			// The per-shard gauges follow (updated every second).
			waitFor(st, 10*time.Second, "the shard partition gauges", func() (bool, string) {
				for _, s := range shards {
					if n := testutil.ToFloat64(co.metrics.Partitions.WithLabelValues(s.id)); n != float64(len(per[s.id])) {
						return false, fmt.Sprintf("%s: %v", s.id, n)
					}
				}
				return true, ""
			})
		}},
		{"?namespace= names the owner", func(t *testing.T) {
			pmap, err := partition.NewMap(partitions)
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range []string{"default", "kube-system", "team-a", "team-b", "a-very-long-namespace-name-0123456789"} {
				code, _, body := get(t, http.MethodGet, "?namespace="+ns)
				if code != http.StatusOK {
					t.Fatalf("?namespace=%s: %d %s", ns, code, body)
				}
				var o coordinatorrpc.Owner
				decode(t, body, &o)
				p := pmap.For(ns)
				if co.srv.PartitionOf(ns) != p {
					t.Errorf("PartitionOf(%s) = %d, partition.Map says %d", ns, co.srv.PartitionOf(ns), p)
				}
				if o.Namespace != ns || o.Partition != uint32(p) || o.Shard != owners[p] || o.State != "owned" || !strings.HasPrefix(o.Epoch, "5.") {
					t.Errorf("?namespace=%s: %+v; want partition %d owned by %s at an epoch of term 5", ns, o, p, owners[p])
				}
			}
		}},
		{"only GET", func(t *testing.T) {
			if code, _, body := get(t, http.MethodPost, ""); code != http.StatusMethodNotAllowed {
				t.Errorf("POST: %d %s, want 405", code, body)
			}
		}},
		{"leadership ended: 503 again", func(t *testing.T) {
			co.stopLeading(t)
			notLeading(t, "10.0.0.9:9443")
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			break
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRejectedHelloKeepsCurrentSession: a hello the state machine refuses (an older
// process of the same shard ID, a duplicate of an old session) changes nothing about the
// shard's current session: its stream stays open, its version and stats stay.
func TestRejectedHelloKeepsCurrentSession(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), nil)
	co.lead(t, 1)
	const inc = 1_000_000
	s := startShard(t, w, "shard-a", insecureClient(t), []string{co.addr}, func(o *shardrpc.Options, _ *fakeHandler) {
		o.Incarnation = inc
	})
	waitFor(t, 10*time.Second, "the shard to be welcomed", func() (bool, string) { return s.c.Welcomed(), "not welcomed" })

	cases := []struct {
		name       string
		inc        uint64
		wantReason string
	}{
		{"an older process of the shard", inc - 1, "stale_incarnation"},
		{"a duplicate of the current session's hello", inc, "stale_session"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reconnects := testutil.ToFloat64(s.metrics.Reconnects)
			rejected := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues(tc.wantReason))
			_, err := sendAll(t, openStream(t, co.addr), hello(s.id, tc.inc))
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("stream ended with %v, want FailedPrecondition", err)
			}
			if n := testutil.ToFloat64(co.metrics.Rejected.WithLabelValues(tc.wantReason)); n != rejected+1 {
				t.Errorf("rejected{reason=%q} went from %v to %v", tc.wantReason, rejected, n)
			}
			// Two more acknowledged heartbeats: the current stream still works.
			acks := rttCount(t, s)
			waitFor(t, 10*time.Second, "two more acknowledged heartbeats", func() (bool, string) {
				n := rttCount(t, s)
				return n >= acks+2, fmt.Sprintf("%d acks, had %d", n, acks)
			})
			if n := testutil.ToFloat64(s.metrics.Reconnects); n != reconnects {
				t.Errorf("the shard reconnected (%v → %v): the rejected hello closed its stream", reconnects, n)
			}
			a, _ := co.assignments(t)
			if len(a.Shards) != 1 || a.Shards[0].Version != "test" || !a.Shards[0].Connected {
				t.Errorf("members %+v, want shard-a connected at version \"test\"", a.Shards)
			}
		})
	}
}

func rttCount(t *testing.T, s *shard) uint64 {
	t.Helper()
	var m dto.Metric
	if err := s.metrics.HeartbeatRTT.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestStepDownAsksAgain: a claim of a newer term that StepDown found no evidence for (it
// kept leading) does not use up StepDown: while the state machine still suggests stepping
// down, the server asks again after StepDownRecheck, so evidence that appears later (a
// real new leader) is acted on.
func TestStepDownAsksAgain(t *testing.T) {
	w := newWorld(t)
	co := startCoordinator(t, w, "coordinator", insecureServer(t), func(o *coordinatorrpc.Options) {
		o.StepDownRecheck = 300 * time.Millisecond
	})
	co.lead(t, 3)
	stream := openStream(t, co.addr)
	if _, err := sendAll(t, stream, hello("claimer", 1, acquired(3, handoff.MakeEpoch(9, 1)))); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("claim of a newer term ended with %v, want FailedPrecondition", err)
	}
	for i := 1; i <= 2; i++ {
		select {
		case reason := <-co.stepDowns:
			t.Logf("StepDown call %d: %s", i, reason)
		case <-time.After(10 * time.Second):
			t.Fatalf("StepDown called %d times, want it asked again while the claim stands", i-1)
		}
	}
}

// TestLapsedTenure: a leader whose Lease was not renewed within the renew deadline (a
// process stopped past its Lease and resumed, as in TestChaosShort's overlap) sends
// nothing, not even to a shard that restarted meanwhile and whose old lease has run out,
// until its tenure is valid again; then what it held goes out and the shard works.
func TestLapsedTenure(t *testing.T) {
	w := newWorld(t)
	c := startCoordinator(t, w, "leader", insecureServer(t), nil)
	c.srv.SetLeaderAddress(c.addr)
	c.lead(t, 1)
	creds := insecureClient(t)
	a := startShard(t, w, "shard-a", creds, []string{c.addr}, nil)
	c.waitSettled(t, w, a)

	c.tenure.lapsed.Store(true)
	a.kill(t)
	restarted := startShard(t, w, "shard-a", creds, []string{c.addr}, nil)
	// The old process's lease (TTL + Margin = 1.2s) runs out long before this: a leader
	// that did not check its tenure grants the restarted process everything meanwhile.
	time.Sleep(3 * time.Second)
	if n := len(restarted.h.workingSet()); n != 0 {
		t.Fatalf("the restarted shard works %d partitions granted while the leader's tenure had lapsed", n)
	}
	if held := testutil.ToFloat64(c.metrics.HeldCommands); held == 0 {
		t.Fatal("kshard_coordinator_held_commands is 0 while the tenure had lapsed")
	}

	c.tenure.lapsed.Store(false)
	waitFor(t, settleTimeout, "the restarted shard to work every partition", func() (bool, string) {
		n := len(restarted.h.workingSet())
		return n == partitions, fmt.Sprintf("%d of %d worked", n, partitions)
	})
	if held := testutil.ToFloat64(c.metrics.HeldCommands); held != 0 {
		t.Errorf("kshard_coordinator_held_commands is %v after the tenure was renewed", held)
	}
}

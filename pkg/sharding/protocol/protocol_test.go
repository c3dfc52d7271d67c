package protocol

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

var sess = handoff.Session{Incarnation: 7, Seq: 2}

func TestReportRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    handoff.Report
	}{
		{name: "hello", r: handoff.Report{Kind: handoff.ReportHello, Shard: "shard-0", Session: sess, Leaving: true,
			Held: []handoff.Held{{Partition: 3, Epoch: handoff.MakeEpoch(1, 4), State: handoff.SlotAcquired}}}},
		{name: "heartbeat", r: handoff.Report{Kind: handoff.ReportHeartbeat, Shard: "shard-0", Session: sess, Seq: 9}},
		{name: "prepared", r: handoff.Report{Kind: handoff.ReportPrepared, Shard: "shard-0", Session: sess, Partition: 15, Epoch: 5}},
		{name: "released", r: handoff.Report{Kind: handoff.ReportReleased, Shard: "shard-0", Session: sess, Partition: 0, Epoch: 5}},
		{name: "acquired", r: handoff.Report{Kind: handoff.ReportAcquired, Shard: "shard-0", Session: sess, Partition: 1, Epoch: 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stats := Stats{AcquiredPartitions: 2, CachedObjects: 10}
			w, err := ReportToWire(tc.r, stats, "v1")
			if err != nil {
				t.Fatal(err)
			}
			streamShard := "shard-0"
			if tc.r.Kind == handoff.ReportHello {
				streamShard = ""
			}
			got, err := ReportFromWire(w, streamShard, 16)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Report, tc.r) {
				t.Errorf("round trip = %+v, want %+v", got.Report, tc.r)
			}
			if tc.r.Kind == handoff.ReportHello || tc.r.Kind == handoff.ReportHeartbeat {
				if got.Stats == nil || *got.Stats != stats {
					t.Errorf("stats = %+v", got.Stats)
				}
			}
		})
	}
}

func TestReportFromWireRejects(t *testing.T) {
	s := &kshardv1.Session{Incarnation: 1, Seq: 1}
	hello := func(id string, held ...*kshardv1.Held) *kshardv1.ShardMessage {
		return &kshardv1.ShardMessage{Session: s, Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: id, Held: held}}}
	}
	acq := kshardv1.SlotState_SLOT_STATE_ACQUIRED
	tests := []struct {
		name   string
		m      *kshardv1.ShardMessage
		stream string
	}{
		{name: "nil", m: nil},
		{name: "no session", m: &kshardv1.ShardMessage{Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: "a"}}}},
		{name: "no kind", m: &kshardv1.ShardMessage{Session: s}},
		{name: "bad shard id", m: hello("Not_A_Name")},
		{name: "hello for another shard", m: hello("b"), stream: "a"},
		{name: "partition out of range", m: hello("a", &kshardv1.Held{Partition: 16, Epoch: 1, State: acq})},
		{name: "epoch zero", m: hello("a", &kshardv1.Held{Partition: 1, Epoch: 0, State: acq})},
		{name: "duplicate partition", m: hello("a", &kshardv1.Held{Partition: 1, Epoch: 1, State: acq}, &kshardv1.Held{Partition: 1, Epoch: 2, State: acq})},
		{name: "no state", m: hello("a", &kshardv1.Held{Partition: 1, Epoch: 1})},
		{name: "heartbeat before hello", m: &kshardv1.ShardMessage{Session: s, Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{Seq: 1}}}},
		{name: "released before hello", m: &kshardv1.ShardMessage{Session: s, Kind: &kshardv1.ShardMessage_Released{Released: &kshardv1.PartitionReport{Partition: 1, Epoch: 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ReportFromWire(tc.m, tc.stream, 16); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestCommandRoundTripAndWelcomeChecks(t *testing.T) {
	info := SessionInfo{PartitionCount: 16, Hasher: Hasher, LeaderTerm: 3}
	welcome := handoff.Command{Kind: handoff.CmdWelcome, To: "a", Session: sess, TTL: 10 * time.Second,
		HeartbeatInterval: 2 * time.Second, Keep: []handoff.Held{{Partition: 2, Epoch: 9}}}
	tests := []struct {
		name    string
		c       handoff.Command
		count   int
		wantErr bool
	}{
		{name: "welcome", c: welcome, count: 16},
		{name: "welcome with other partition count", c: welcome, count: 32, wantErr: true},
		{name: "ack", c: handoff.Command{Kind: handoff.CmdAck, To: "a", Session: sess, Seq: 4}, count: 16},
		{name: "acquire", c: handoff.Command{Kind: handoff.CmdAcquire, To: "a", Session: sess, Partition: 5, Epoch: 2}, count: 16},
		{name: "acquire with refresh", c: handoff.Command{Kind: handoff.CmdAcquire, To: "a", Session: sess, Partition: 5, Epoch: 2, Refresh: true}, count: 16},
		{name: "acquire out of range", c: handoff.Command{Kind: handoff.CmdAcquire, To: "a", Session: sess, Partition: 20, Epoch: 2}, count: 16, wantErr: true},
		{name: "farewell", c: handoff.Command{Kind: handoff.CmdFarewell, To: "a", Session: sess}, count: 16},
	}
	t.Run("prepare with refresh", func(t *testing.T) {
		w, err := CommandToWire(handoff.Command{Kind: handoff.CmdPrepare, To: "a", Session: sess, Partition: 5, Epoch: 2}, info)
		if err != nil {
			t.Fatal(err)
		}
		w.GetPrepare().Refresh = true // only an acquire carries it
		if _, err := CommandFromWire(w, "a", 16, Hasher); !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v, want ErrMalformed", err)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, err := CommandToWire(tc.c, info)
			if err != nil {
				t.Fatal(err)
			}
			got, err := CommandFromWire(w, "a", tc.count, Hasher)
			if tc.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.c) {
				t.Errorf("round trip = %+v, want %+v", got, tc.c)
			}
		})
	}
}

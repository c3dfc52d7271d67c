package protocol

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
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
		{name: "hello of a shard group", r: handoff.Report{Kind: handoff.ReportHello, Shard: "shard-0", Session: sess, Group: "hot", Held: []handoff.Held{}}},
		{name: "heartbeat", r: handoff.Report{Kind: handoff.ReportHeartbeat, Shard: "shard-0", Session: sess, Seq: 9}},
		{name: "heartbeat with a load report", r: handoff.Report{Kind: handoff.ReportHeartbeat, Shard: "shard-0", Session: sess, Seq: 10,
			Load: &LoadReport{LimiterWaitPermille: 1500, Partitions: []PartitionLoad{
				{Partition: 0, LoadMilli: 1, Objects: 0, AgeSeconds: 10},
				{Partition: 7, LoadMilli: 4_294_967_295, Objects: MaxLoadObjects, AgeSeconds: MaxLoadAgeSeconds},
				{Partition: 15, LoadMilli: 0, Objects: 3, AgeSeconds: 0},
			}}}},
		// Every held partition idle and empty: the report says so, and is not taken for none.
		{name: "heartbeat with an empty load report", r: handoff.Report{Kind: handoff.ReportHeartbeat, Shard: "shard-0", Session: sess, Seq: 11,
			Load: &LoadReport{}}},
		{name: "heartbeat with every partition's load", r: handoff.Report{Kind: handoff.ReportHeartbeat, Shard: "shard-0", Session: sess, Seq: 12,
			Load: &LoadReport{Partitions: everyPartition(16)}}},
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

// everyPartition is a load report entry for each of n partitions.
func everyPartition(n int) []PartitionLoad {
	out := make([]PartitionLoad, n)
	for i := range out {
		out[i] = PartitionLoad{Partition: partition.ID(i), LoadMilli: uint32(1000 * i), Objects: uint32(i), AgeSeconds: uint32(i)}
	}
	return out
}

// loadHeartbeat is a heartbeat carrying a load report of four parallel lists, as a shard
// (or anybody) could put it on the wire.
func loadHeartbeat(parts, loads, objects, ages []uint32) *kshardv1.ShardMessage {
	return &kshardv1.ShardMessage{Session: &kshardv1.Session{Incarnation: 1, Seq: 1}, Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{
		Seq: 3, Load: &kshardv1.LoadReport{Partitions: parts, LoadMilli: loads, Objects: objects, AgeSeconds: ages}}}}
}

// TestLoadReportFromWire: a heartbeat's load report is checked as §1.5 of
// docs/design-placement.md says, and a bad one makes the whole heartbeat malformed; the
// bounds themselves are accepted.
func TestLoadReportFromWire(t *testing.T) {
	const count = 16
	u := func(v ...uint32) []uint32 { return v }
	tests := []struct {
		name    string
		m       *kshardv1.ShardMessage
		wantErr bool
	}{
		{name: "one entry", m: loadHeartbeat(u(3), u(1500), u(20), u(60))},
		{name: "no entries", m: loadHeartbeat(nil, nil, nil, nil)},
		{name: "the last partition, the age cap and the object bound", m: loadHeartbeat(u(0, count-1), u(0, 1<<32-1), u(0, MaxLoadObjects), u(0, MaxLoadAgeSeconds))},
		{name: "an entry per partition", m: loadHeartbeat(u(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), make([]uint32, count), make([]uint32, count), make([]uint32, count))},
		{name: "fewer loads than partitions", m: loadHeartbeat(u(1, 2), u(1), u(1, 1), u(1, 1)), wantErr: true},
		{name: "more object counts than partitions", m: loadHeartbeat(u(1, 2), u(1, 1), u(1, 1, 1), u(1, 1)), wantErr: true},
		{name: "no ages", m: loadHeartbeat(u(1, 2), u(1, 1), u(1, 1), nil), wantErr: true},
		{name: "lists without partitions", m: loadHeartbeat(nil, u(1), u(1), u(1)), wantErr: true},
		{name: "more entries than partitions", m: loadHeartbeat(make([]uint32, count+1), make([]uint32, count+1), make([]uint32, count+1), make([]uint32, count+1)), wantErr: true},
		{name: "descending", m: loadHeartbeat(u(5, 4), u(1, 1), u(1, 1), u(1, 1)), wantErr: true},
		{name: "a partition twice", m: loadHeartbeat(u(4, 4), u(1, 2), u(1, 1), u(1, 1)), wantErr: true},
		{name: "partition out of range", m: loadHeartbeat(u(count), u(1), u(1), u(1)), wantErr: true},
		{name: "partition far out of range", m: loadHeartbeat(u(1<<32-1), u(1), u(1), u(1)), wantErr: true},
		{name: "age above the cap", m: loadHeartbeat(u(2), u(1), u(1), u(MaxLoadAgeSeconds+1)), wantErr: true},
		{name: "objects above the bound", m: loadHeartbeat(u(2), u(1), u(MaxLoadObjects+1), u(1)), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, err := ReportFromWire(tc.m, "shard-0", count)
			if tc.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.m.GetHeartbeat().GetLoad()
			if in.Report.Load == nil || len(in.Report.Load.Partitions) != len(w.Partitions) {
				t.Fatalf("load = %+v, want %d entries", in.Report.Load, len(w.Partitions))
			}
			for i, e := range in.Report.Load.Partitions {
				if want := (PartitionLoad{Partition: partition.ID(w.Partitions[i]), LoadMilli: w.LoadMilli[i], Objects: w.Objects[i], AgeSeconds: w.AgeSeconds[i]}); e != want {
					t.Errorf("entry %d = %+v, want %+v", i, e, want)
				}
			}
			if err := CheckLoadReport(*in.Report.Load, count); err != nil {
				t.Errorf("accepted report fails CheckLoadReport: %v", err)
			}
		})
	}
	t.Run("a heartbeat without a report has none", func(t *testing.T) {
		in, err := ReportFromWire(&kshardv1.ShardMessage{Session: &kshardv1.Session{Incarnation: 1, Seq: 1},
			Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{Seq: 3}}}, "shard-0", count)
		if err != nil || in.Report.Load != nil {
			t.Fatalf("load = %+v, err = %v; want none", in.Report.Load, err)
		}
	})
}

// TestCheckLoadReport: what a shard checks before it sends a report (the same rules).
func TestCheckLoadReport(t *testing.T) {
	tests := []struct {
		name    string
		r       LoadReport
		wantErr bool
	}{
		{name: "empty", r: LoadReport{}},
		{name: "every partition", r: LoadReport{Partitions: everyPartition(16)}},
		{name: "more than every partition", r: LoadReport{Partitions: everyPartition(17)}, wantErr: true},
		{name: "unsorted", r: LoadReport{Partitions: []PartitionLoad{{Partition: 2}, {Partition: 1}}}, wantErr: true},
		{name: "age not capped", r: LoadReport{Partitions: []PartitionLoad{{Partition: 2, AgeSeconds: 20000}}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckLoadReport(tc.r, 16); (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

func TestReportFromWireRejects(t *testing.T) {
	s := &kshardv1.Session{Incarnation: 1, Seq: 1}
	hello := func(id string, held ...*kshardv1.Held) *kshardv1.ShardMessage {
		return &kshardv1.ShardMessage{Session: s, Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: id, Held: held}}}
	}
	helloGroup := func(id, group string) *kshardv1.ShardMessage {
		return &kshardv1.ShardMessage{Session: s, Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{ShardId: id, Group: group}}}
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
		{name: "group not a DNS-1123 label", m: helloGroup("a", "Hot")},
		{name: "group with a dot", m: helloGroup("a", "hot.pool")},
		{name: "group longer than 63", m: helloGroup("a", "g"+strings.Repeat("x", 63))},
		{name: "group with a leading dash", m: helloGroup("a", "-hot")},
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
		{name: "welcome with load settings", c: withLoad(welcome, LoadSettings{ReportInterval: 10 * time.Second, HalfLife: 5 * time.Minute, ReconcileWeight: 0.1}), count: 16},
		{name: "welcome with reports off and a half-life", c: withLoad(welcome, LoadSettings{HalfLife: time.Minute}), count: 16},
		{name: "welcome with the settings' bounds", c: withLoad(welcome, LoadSettings{ReportInterval: handoff.MaxLoadReportInterval,
			HalfLife: handoff.MaxLoadHalfLife, ReconcileWeight: handoff.MaxReconcileWeight}), count: 16},
		{name: "welcome with reports and no half-life", c: withLoad(welcome, LoadSettings{ReportInterval: time.Second}), count: 16, wantErr: true},
		{name: "welcome with a negative report interval", c: withLoad(welcome, LoadSettings{ReportInterval: -time.Second, HalfLife: time.Minute}), count: 16, wantErr: true},
		{name: "welcome with a report interval above the bound", c: withLoad(welcome, LoadSettings{ReportInterval: handoff.MaxLoadReportInterval + 1, HalfLife: time.Minute}), count: 16, wantErr: true},
		{name: "welcome with a half-life above the bound", c: withLoad(welcome, LoadSettings{ReportInterval: time.Second, HalfLife: handoff.MaxLoadHalfLife + 1}), count: 16, wantErr: true},
		{name: "welcome with a negative reconcile weight", c: withLoad(welcome, LoadSettings{ReconcileWeight: -0.5}), count: 16, wantErr: true},
		{name: "welcome with a NaN reconcile weight", c: withLoad(welcome, LoadSettings{ReconcileWeight: math.NaN()}), count: 16, wantErr: true},
		{name: "welcome with an infinite reconcile weight", c: withLoad(welcome, LoadSettings{ReconcileWeight: math.Inf(1)}), count: 16, wantErr: true},
		{name: "ack", c: handoff.Command{Kind: handoff.CmdAck, To: "a", Session: sess, Seq: 4}, count: 16},
		{name: "acquire", c: handoff.Command{Kind: handoff.CmdAcquire, To: "a", Session: sess, Partition: 5, Epoch: 2}, count: 16},
		{name: "acquire with refresh", c: handoff.Command{Kind: handoff.CmdAcquire, To: "a", Session: sess, Partition: 5, Epoch: 2, Refresh: true}, count: 16},
		{name: "acquire out of range", c: handoff.Command{Kind: handoff.CmdAcquire, To: "a", Session: sess, Partition: 20, Epoch: 2}, count: 16, wantErr: true},
		{name: "farewell", c: handoff.Command{Kind: handoff.CmdFarewell, To: "a", Session: sess}, count: 16},
	}
	t.Run("welcome of a coordinator that predates load reports", func(t *testing.T) {
		w, err := CommandToWire(welcome, info)
		if err != nil {
			t.Fatal(err)
		}
		if ww := w.GetWelcome(); ww.LoadReportInterval != nil || ww.LoadHalfLife != nil || ww.ReconcileWeight != 0 {
			t.Fatalf("zero settings on the wire: %v", ww)
		}
		got, err := CommandFromWire(w, "a", 16, Hasher)
		if err != nil || got.Load != (LoadSettings{}) {
			t.Fatalf("load settings %+v, err %v; want none", got.Load, err)
		}
	})
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

func withLoad(c handoff.Command, l LoadSettings) handoff.Command {
	c.Load = l
	return c
}

// TestValidateGroup: a Hello's group is empty (the default group) or a DNS-1123 label, the
// value a shard pod's kshard.io/shard-group label can take.
func TestValidateGroup(t *testing.T) {
	tests := []struct {
		name    string
		group   string
		wantErr bool
	}{
		{name: "default group", group: ""},
		{name: "a label", group: "hot"},
		{name: "digits and dashes", group: "tenant-42"},
		{name: "63 characters", group: strings.Repeat("g", 63)},
		{name: "64 characters", group: strings.Repeat("g", 64), wantErr: true},
		{name: "upper case", group: "Hot", wantErr: true},
		{name: "a subdomain", group: "hot.pool", wantErr: true},
		{name: "trailing dash", group: "hot-", wantErr: true},
		{name: "underscore", group: "hot_pool", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateGroup(tc.group)
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrMalformed)) {
				t.Fatalf("ValidateGroup(%q) = %v, want error %v", tc.group, err, tc.wantErr)
			}
		})
	}
}

package protocol_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// Fuzz targets for the validation both gRPC edges apply to what they receive. The input
// is the protobuf wire form of one message, as a peer could send it. Invariants: no
// panic; an accepted message is within the limits the validation promises; and it
// converts back to a wire message that decodes and validates to the same value (so
// what one edge sends, the other accepts unchanged). `make fuzz` runs them; `go test`
// replays the seeds below and testdata/fuzz.

const fuzzShard = "shard-0"

// partitionCount maps a fuzzed number onto [1, partition.MaxCount], small counts first.
func partitionCount(n uint16) int { return int(n)%partition.MaxCount + 1 }

func FuzzProtocolReportFromWire(f *testing.F) {
	sess := handoff.Session{Incarnation: 7, Seq: 2}
	e := handoff.MakeEpoch(1, 4)
	for _, r := range []handoff.Report{
		{Kind: handoff.ReportHello, Shard: fuzzShard, Session: sess, Leaving: true, Held: []handoff.Held{
			{Partition: 3, Epoch: e, State: handoff.SlotAcquired}, {Partition: 0, Epoch: e + 1, State: handoff.SlotWarming},
			{Partition: 15, Epoch: 1, State: handoff.SlotPrepared}, {Partition: 7, Epoch: e, State: handoff.SlotReleasing}}},
		{Kind: handoff.ReportHello, Shard: fuzzShard, Session: sess},
		{Kind: handoff.ReportHello, Shard: fuzzShard, Session: sess, Group: "hot"},
		{Kind: handoff.ReportHeartbeat, Shard: fuzzShard, Session: sess, Seq: 9, Leaving: true},
		{Kind: handoff.ReportHeartbeat, Shard: fuzzShard, Session: sess, Seq: 10, Load: &protocol.LoadReport{LimiterWaitPermille: 250,
			Partitions: []protocol.PartitionLoad{{Partition: 0, LoadMilli: 1200, Objects: 40, AgeSeconds: 30},
				{Partition: 9, LoadMilli: 5, Objects: protocol.MaxLoadObjects, AgeSeconds: protocol.MaxLoadAgeSeconds},
				{Partition: 15, LoadMilli: 1<<32 - 1}}}},
		{Kind: handoff.ReportHeartbeat, Shard: fuzzShard, Session: sess, Seq: 11, Load: &protocol.LoadReport{}},
		{Kind: handoff.ReportPrepared, Shard: fuzzShard, Session: sess, Partition: 15, Epoch: e},
		{Kind: handoff.ReportReleased, Shard: fuzzShard, Session: sess, Partition: 0, Epoch: e},
		{Kind: handoff.ReportAcquired, Shard: fuzzShard, Session: sess, Partition: 1, Epoch: e},
	} {
		m, err := protocol.ReportToWire(r, protocol.Stats{AcquiredPartitions: 2, QueueDepth: 3, Fenced: true}, "v1.2.3")
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		stream := fuzzShard
		if r.Kind == handoff.ReportHello {
			f.Add(b, "", uint16(15))
		}
		f.Add(b, stream, uint16(15))
	}
	f.Fuzz(func(t *testing.T, wire []byte, stream string, n uint16) {
		count := partitionCount(n)
		m := &kshardv1.ShardMessage{}
		if proto.Unmarshal(wire, m) != nil {
			return
		}
		in, err := protocol.ReportFromWire(m, stream, count)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		checkReport(t, in, stream, count)

		// Round trip: what the shard edge would send for this value is accepted as is.
		var stats protocol.Stats
		if in.Stats != nil {
			stats = *in.Stats
		}
		out, err := protocol.ReportToWire(in.Report, stats, in.BuildVersion)
		if err != nil {
			t.Fatalf("accepted %v does not encode: %v", in.Report, err)
		}
		again := &kshardv1.ShardMessage{}
		if b, err := proto.Marshal(out); err != nil {
			t.Fatal(err)
		} else if err := proto.Unmarshal(b, again); err != nil {
			t.Fatal(err)
		}
		in2, err := protocol.ReportFromWire(again, stream, count)
		if err != nil {
			t.Fatalf("re-encoded %v refused: %v", in.Report, err)
		}
		if !reflect.DeepEqual(in, in2) {
			t.Fatalf("round trip changed the report:\n got %+v\nwant %+v", in2, in)
		}
	})
}

// checkReport asserts what ReportFromWire promises about a report it accepted.
func checkReport(t *testing.T, in protocol.Incoming, stream string, count int) {
	t.Helper()
	r := in.Report
	if r.Session.Incarnation == 0 || r.Session.Seq == 0 {
		t.Fatalf("accepted zero session %v", r.Session)
	}
	if stream != "" && r.Shard != stream {
		t.Fatalf("accepted a report of %q on the stream of %q", r.Shard, stream)
	}
	switch r.Kind {
	case handoff.ReportHello:
		if err := protocol.ValidateShardID(r.Shard); err != nil {
			t.Fatalf("accepted hello with bad shard id: %v", err)
		}
		if err := protocol.ValidateGroup(r.Group); err != nil {
			t.Fatalf("accepted hello with bad group: %v", err)
		}
		if in.Stats == nil || len(in.BuildVersion) > 256 || len(r.Held) > count {
			t.Fatalf("hello: stats %v, build version of %d bytes, %d held of %d", in.Stats, len(in.BuildVersion), len(r.Held), count)
		}
		seen := map[partition.ID]bool{}
		for _, h := range r.Held {
			if int(h.Partition) >= count || h.Epoch == 0 || seen[h.Partition] ||
				h.State < handoff.SlotWarming || h.State > handoff.SlotReleasing {
				t.Fatalf("hello: bad held entry %+v (count %d)", h, count)
			}
			seen[h.Partition] = true
		}
	case handoff.ReportHeartbeat:
		if stream == "" || r.Seq == 0 || in.Stats == nil {
			t.Fatalf("heartbeat: stream %q, seq %d, stats %v", stream, r.Seq, in.Stats)
		}
		if l := r.Load; l != nil {
			if len(l.Partitions) > count {
				t.Fatalf("heartbeat: load report of %d partitions of %d", len(l.Partitions), count)
			}
			for i, e := range l.Partitions {
				if int(e.Partition) >= count || (i > 0 && e.Partition <= l.Partitions[i-1].Partition) ||
					e.AgeSeconds > protocol.MaxLoadAgeSeconds || e.Objects > protocol.MaxLoadObjects {
					t.Fatalf("heartbeat: bad load entry %d %+v after %+v (count %d)", i, e, l.Partitions[max(i-1, 0)], count)
				}
			}
		}
	case handoff.ReportPrepared, handoff.ReportReleased, handoff.ReportAcquired:
		if stream == "" || int(r.Partition) >= count || r.Epoch == 0 || in.Stats != nil {
			t.Fatalf("%s: stream %q, partition %d of %d, epoch %v, stats %v", r.Kind, stream, r.Partition, count, r.Epoch, in.Stats)
		}
	default:
		t.Fatalf("accepted report of kind %v", r.Kind)
	}
	if r.Kind != handoff.ReportHello && (len(r.Held) > 0 || in.BuildVersion != "" || r.Group != "") {
		t.Fatalf("%s carries hello fields", r.Kind)
	}
	if r.Kind != handoff.ReportHeartbeat && r.Load != nil {
		t.Fatalf("%s carries a load report", r.Kind)
	}
}

func FuzzProtocolCommandFromWire(f *testing.F) {
	sess := handoff.Session{Incarnation: 7, Seq: 2}
	e := handoff.MakeEpoch(1, 4)
	for _, c := range []handoff.Command{
		{Kind: handoff.CmdWelcome, To: fuzzShard, Session: sess, TTL: 10 * time.Second, HeartbeatInterval: 3 * time.Second,
			Keep: []handoff.Held{{Partition: 2, Epoch: e}, {Partition: 5, Epoch: e + 1, State: handoff.SlotAcquired}}},
		{Kind: handoff.CmdWelcome, To: fuzzShard, Session: sess, TTL: time.Hour, HeartbeatInterval: time.Nanosecond},
		{Kind: handoff.CmdWelcome, To: fuzzShard, Session: sess, TTL: 28 * time.Second, HeartbeatInterval: time.Second,
			Load: protocol.LoadSettings{ReportInterval: 10 * time.Second, HalfLife: 5 * time.Minute, ReconcileWeight: 0.1}},
		{Kind: handoff.CmdAck, To: fuzzShard, Session: sess, Seq: 4},
		{Kind: handoff.CmdPrepare, To: fuzzShard, Session: sess, Partition: 15, Epoch: e},
		{Kind: handoff.CmdRelease, To: fuzzShard, Session: sess, Partition: 0, Epoch: e},
		{Kind: handoff.CmdAcquire, To: fuzzShard, Session: sess, Partition: 5, Epoch: e},
		{Kind: handoff.CmdCancel, To: fuzzShard, Session: sess, Partition: 6, Epoch: e},
		{Kind: handoff.CmdSessionEnded, To: fuzzShard, Session: sess},
		{Kind: handoff.CmdFarewell, To: fuzzShard, Session: sess},
	} {
		m, err := protocol.CommandToWire(c, protocol.SessionInfo{PartitionCount: 16, Hasher: protocol.Hasher, LeaderTerm: 1})
		if err != nil {
			f.Fatal(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(15))
	}
	f.Fuzz(func(t *testing.T, wire []byte, n uint16) {
		count := partitionCount(n)
		m := &kshardv1.CoordinatorMessage{}
		if proto.Unmarshal(wire, m) != nil {
			return
		}
		c, err := protocol.CommandFromWire(m, fuzzShard, count, protocol.Hasher)
		if err != nil {
			if !errors.Is(err, protocol.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		checkCommand(t, c, count)

		out, err := protocol.CommandToWire(c, protocol.SessionInfo{PartitionCount: count, Hasher: protocol.Hasher, LeaderTerm: m.GetWelcome().GetLeaderTerm()})
		if err != nil {
			t.Fatalf("accepted %v does not encode: %v", c, err)
		}
		again := &kshardv1.CoordinatorMessage{}
		if b, err := proto.Marshal(out); err != nil {
			t.Fatal(err)
		} else if err := proto.Unmarshal(b, again); err != nil {
			t.Fatal(err)
		}
		c2, err := protocol.CommandFromWire(again, fuzzShard, count, protocol.Hasher)
		if err != nil {
			t.Fatalf("re-encoded %v refused: %v", c, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the command:\n got %+v\nwant %+v", c2, c)
		}
	})
}

// checkCommand asserts what CommandFromWire promises about a command it accepted.
func checkCommand(t *testing.T, c handoff.Command, count int) {
	t.Helper()
	if c.To != fuzzShard || c.Session.Incarnation == 0 || c.Session.Seq == 0 {
		t.Fatalf("accepted command to %q of session %v", c.To, c.Session)
	}
	switch c.Kind {
	case handoff.CmdWelcome:
		if c.TTL <= 0 || c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.TTL || c.TTL > time.Hour || len(c.Keep) > count {
			t.Fatalf("welcome: TTL %v, heartbeat interval %v, %d kept of %d", c.TTL, c.HeartbeatInterval, len(c.Keep), count)
		}
		if l := c.Load; l.ReportInterval < 0 || l.ReportInterval > handoff.MaxLoadReportInterval || l.HalfLife < 0 || l.HalfLife > handoff.MaxLoadHalfLife ||
			(l.ReportInterval > 0 && l.HalfLife == 0) || !(l.ReconcileWeight >= 0 && l.ReconcileWeight <= handoff.MaxReconcileWeight) {
			t.Fatalf("welcome: load settings %+v", l)
		}
		seen := map[partition.ID]bool{}
		for _, h := range c.Keep {
			if int(h.Partition) >= count || h.Epoch == 0 || seen[h.Partition] || h.State > handoff.SlotReleasing {
				t.Fatalf("welcome: bad kept entry %+v (count %d)", h, count)
			}
			seen[h.Partition] = true
		}
	case handoff.CmdAck:
		if c.Seq == 0 {
			t.Fatal("accepted ack of seq 0")
		}
	case handoff.CmdPrepare, handoff.CmdRelease, handoff.CmdAcquire, handoff.CmdCancel:
		if int(c.Partition) >= count || c.Epoch == 0 {
			t.Fatalf("%s: partition %d of %d, epoch %v", c.Kind, c.Partition, count, c.Epoch)
		}
	case handoff.CmdSessionEnded, handoff.CmdFarewell:
	default:
		t.Fatalf("accepted command of kind %v", c.Kind)
	}
	if c.Kind != handoff.CmdWelcome && (len(c.Keep) > 0 || c.TTL != 0 || c.HeartbeatInterval != 0 || c.Load != (handoff.LoadSettings{})) {
		t.Fatalf("%s carries welcome fields", c.Kind)
	}
}

package coordinatorrpc

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// TestMaxMessageSizeFitsTheLargestHello: the largest hello a real shard can send (every
// partition held, each at the largest epoch, the longest shard ID and build version the
// protocol allows, every stat at its maximum) fits the limit, for any partition count.
func TestMaxMessageSizeFitsTheLargestHello(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
	}{
		{name: "one partition", count: 1},
		{name: "test size", count: 64},
		{name: "default", count: partition.DefaultCount},
		{name: "maximum", count: partition.MaxCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := make([]*kshardv1.Held, tc.count)
			for p := range held {
				held[p] = &kshardv1.Held{Partition: uint32(tc.count - 1), Epoch: math.MaxUint64, State: kshardv1.SlotState_SLOT_STATE_RELEASING}
			}
			m := &kshardv1.ShardMessage{
				Session: &kshardv1.Session{Incarnation: math.MaxUint64, Seq: math.MaxUint64},
				Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{
					ShardId: strings.Repeat("s", 253), BuildVersion: strings.Repeat("v", 256), Leaving: true, Held: held,
					Stats: &kshardv1.ShardStats{AcquiredPartitions: math.MaxUint32, PreparedPartitions: math.MaxUint32,
						Namespaces: math.MaxUint64, CachedObjects: math.MaxUint64, QueueDepth: math.MaxUint64, Fenced: true},
				}},
			}
			size, limit := proto.Size(m), MaxMessageSize(tc.count)
			if size > limit {
				t.Errorf("the largest hello of %d partitions is %d bytes, above the limit %d", tc.count, size, limit)
			}
			t.Logf("%d partitions: largest hello %d bytes, limit %d", tc.count, size, limit)
		})
	}
}

// TestMaxMessageSizeFitsTheLargestLoadReport: the largest heartbeat a real shard can send
// (a load report entry for every partition, each field at the largest value validation
// accepts, every stat at its maximum) is accepted by validation and fits the limit, for
// any partition count: a shard's load report is never refused for its size.
func TestMaxMessageSizeFitsTheLargestLoadReport(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
	}{
		{name: "one partition", count: 1},
		{name: "test size", count: 64},
		{name: "default", count: partition.DefaultCount},
		{name: "maximum", count: partition.MaxCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			load := &kshardv1.LoadReport{LimiterWaitPermille: math.MaxUint32}
			for p := range tc.count {
				load.Partitions = append(load.Partitions, uint32(p))
				load.LoadMilli = append(load.LoadMilli, math.MaxUint32)
				load.Objects = append(load.Objects, protocol.MaxLoadObjects)
				load.AgeSeconds = append(load.AgeSeconds, protocol.MaxLoadAgeSeconds)
			}
			m := &kshardv1.ShardMessage{
				Session: &kshardv1.Session{Incarnation: math.MaxUint64, Seq: math.MaxUint64},
				Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{Seq: math.MaxUint64, Leaving: true, Load: load,
					Stats: &kshardv1.ShardStats{AcquiredPartitions: math.MaxUint32, PreparedPartitions: math.MaxUint32,
						Namespaces: math.MaxUint64, CachedObjects: math.MaxUint64, QueueDepth: math.MaxUint64, Fenced: true},
				}},
			}
			in, err := protocol.ReportFromWire(m, "shard-0", tc.count)
			if err != nil || in.Report.Load == nil || len(in.Report.Load.Partitions) != tc.count {
				t.Fatalf("the largest load report of %d partitions is refused or changed: %v", tc.count, err)
			}
			size, limit := proto.Size(m), MaxMessageSize(tc.count)
			if size > limit {
				t.Errorf("the largest heartbeat of %d partitions is %d bytes, above the limit %d", tc.count, size, limit)
			}
			t.Logf("%d partitions: largest heartbeat with a load report %d bytes (%.1f per partition), limit %d", tc.count, size, float64(size)/float64(tc.count), limit)
		})
	}
}

// TestHelloLimiterBounded: the per-identity table never grows past its bound; buckets that
// have refilled make room, buckets still in use do not.
func TestHelloLimiterBounded(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name       string
		later      time.Duration // when the new identity arrives
		wantOK     bool
		wantReason string
	}{
		{name: "all buckets in use", later: 100 * time.Millisecond, wantReason: "hello_rate_table_full"},
		{name: "idle buckets are dropped", later: 10 * time.Second, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newHelloLimiter(1, 2, 3)
			for _, id := range []string{"a", "b", "c"} {
				if ok, _ := l.allow(id, start); !ok {
					t.Fatalf("first hello of %s refused", id)
				}
			}
			ok, reason := l.allow("d", start.Add(tc.later))
			if ok != tc.wantOK || reason != tc.wantReason {
				t.Errorf("allow(d) = %t, %q; want %t, %q", ok, reason, tc.wantOK, tc.wantReason)
			}
			if n := len(l.buckets); n > 3 {
				t.Errorf("%d buckets, bound 3", n)
			}
		})
	}
}

func TestSessionsForShards(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxShards int
		want      int
	}{
		{name: "default", maxShards: DefaultMaxShards, want: 2016},
		{name: "one", maxShards: 1, want: 18},
		{name: "no overflow", maxShards: math.MaxInt, want: math.MaxInt32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SessionsForShards(tc.maxShards); got != tc.want {
				t.Errorf("SessionsForShards(%d) = %d, want %d", tc.maxShards, got, tc.want)
			}
		})
	}
}

// TestStreamLimiter: each kind of message has its own bucket, sized from the ring and the
// heartbeat interval; hellos pass (their limiter is per identity).
func TestStreamLimiter(t *testing.T) {
	const partitions = 16
	interval := time.Second
	heartbeat := &kshardv1.ShardMessage{Kind: &kshardv1.ShardMessage_Heartbeat{Heartbeat: &kshardv1.Heartbeat{}}}
	report := &kshardv1.ShardMessage{Kind: &kshardv1.ShardMessage_Acquired{Acquired: &kshardv1.PartitionReport{}}}
	hello := &kshardv1.ShardMessage{Kind: &kshardv1.ShardMessage_Hello{Hello: &kshardv1.Hello{}}}
	reportBurst := PartitionReportBurstPerPartition*partitions + PartitionReportBurstExtra
	type send struct {
		m     *kshardv1.ShardMessage
		n     int
		after time.Duration // since the start
	}
	tests := []struct {
		name     string
		sends    []send
		want     string // the reason of the last message
		wantSent int    // messages allowed before it
	}{
		{name: "a burst of heartbeats", sends: []send{{m: heartbeat, n: HeartbeatBurst}}, wantSent: HeartbeatBurst},
		{name: "one heartbeat past the burst", sends: []send{{m: heartbeat, n: HeartbeatBurst + 1}}, want: reasonHeartbeatRate, wantSent: HeartbeatBurst},
		{name: "heartbeats refill per interval", sends: []send{{m: heartbeat, n: HeartbeatBurst}, {m: heartbeat, n: HeartbeatsPerInterval, after: interval}},
			wantSent: HeartbeatBurst + HeartbeatsPerInterval},
		{name: "a cold start's reports, twice", sends: []send{{m: report, n: reportBurst}}, wantSent: reportBurst},
		{name: "reports past the burst", sends: []send{{m: report, n: reportBurst + 1}}, want: reasonReportRate, wantSent: reportBurst},
		{name: "reports do not spend heartbeats", sends: []send{{m: report, n: reportBurst}, {m: heartbeat, n: HeartbeatBurst}},
			wantSent: reportBurst + HeartbeatBurst},
		{name: "hellos are not counted here", sends: []send{{m: hello, n: 10 * reportBurst}}, wantSent: 10 * reportBurst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newStreamLimiter(partitions, interval)
			start := time.Unix(1000, 0)
			sent, got := 0, ""
			for _, s := range tt.sends {
				for range s.n {
					if got = l.allow(s.m, start.Add(s.after)); got != "" {
						break
					}
					sent++
				}
				if got != "" {
					break
				}
			}
			if got != tt.want || sent != tt.wantSent {
				t.Errorf("allowed %d then %q, want %d then %q", sent, got, tt.wantSent, tt.want)
			}
		})
	}
}

package handoff_test

import (
	"flag"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// The state-machine fuzz targets (FuzzCoordinator, FuzzShard) read their input as a
// sequence of operations. opReader is the one decoder both use: every field is one byte,
// and an exhausted input reads as zeros, so any byte string is a valid program.
//
// Messages are built as wire messages (kshardv1) from those bytes, marshalled,
// unmarshalled and validated by package protocol exactly as the gRPC edges do before
// they step a state machine; what validation refuses is counted and dropped.

// fuzzTrace logs every operation of the state-machine targets, to read what a failing
// input does: go test ./pkg/sharding/handoff -run 'FuzzCoordinator/<id>' -fuzz.trace -v
var fuzzTrace = flag.Bool("fuzz.trace", false, "log every operation of FuzzCoordinator and FuzzShard")

// tracer returns t.Logf under -fuzz.trace, else nil.
func tracer(t *testing.T) func(string, ...any) {
	if *fuzzTrace {
		return t.Logf
	}
	return nil
}

// maxOps bounds one input's program so a single execution stays fast.
const maxOps = 256

var fuzzT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type opReader struct{ b []byte }

func (r *opReader) more() bool { return len(r.b) > 0 }

func (r *opReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// n returns a byte modulo k.
func (r *opReader) n(k int) int { return int(r.next()) % k }

// bytes returns up to n raw bytes (a length byte, then that much input).
func (r *opReader) bytes(limit int) []byte {
	n := min(r.n(limit+1), len(r.b))
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// partition returns a partition of count, or count itself (out of range) one time in count+1.
func (r *opReader) partition(count int) uint32 { return uint32(r.n(count + 1)) }

// rawEpoch is one of a few epochs of terms 0..3 (epoch 0, which validation refuses, included).
func rawEpoch(b byte) uint64 { return uint64(handoff.MakeEpoch(uint32(b>>4)&3, uint32(b&15))) }

// session picks a session relative to cur: the current one most of the time, else an
// older, a newer or a raw one.
func (r *opReader) session(cur handoff.Session) *kshardv1.Session {
	switch r.n(8) {
	case 5:
		return &kshardv1.Session{Incarnation: cur.Incarnation, Seq: cur.Seq - 1}
	case 6:
		return &kshardv1.Session{Incarnation: cur.Incarnation + 1, Seq: 1}
	case 7:
		return &kshardv1.Session{Incarnation: uint64(r.n(4)), Seq: uint64(r.n(4))}
	}
	return &kshardv1.Session{Incarnation: cur.Incarnation, Seq: cur.Seq}
}

// held reads up to 5 held entries (partition, epoch byte, state).
func (r *opReader) held(count int, epoch func(p uint32, b byte) uint64) []*kshardv1.Held {
	n := r.n(6)
	out := make([]*kshardv1.Held, 0, n)
	for range n {
		p := r.partition(count)
		out = append(out, &kshardv1.Held{Partition: p, Epoch: epoch(p, r.next()), State: kshardv1.SlotState(r.n(5))})
	}
	return out
}

// wire marshals m and unmarshals it into a fresh message of the same type, as the
// receiving edge sees it.
func wire[M proto.Message](m M, fresh M) (M, bool) {
	b, err := proto.Marshal(m)
	if err != nil {
		return fresh, false
	}
	if proto.Unmarshal(b, fresh) != nil {
		return fresh, false
	}
	return fresh, true
}

// fuzzConfig is a small coordinator configuration: 16 partitions, short timings.
func fuzzConfig() handoff.Config {
	return handoff.Config{
		PartitionCount:     16,
		SessionTTL:         10 * time.Second,
		HeartbeatInterval:  3 * time.Second,
		Margin:             2 * time.Second,
		Debounce:           time.Second,
		MaxDebounce:        5 * time.Second,
		PrepareTimeout:     3 * time.Second,
		ReleaseTimeout:     4 * time.Second, // short, so that fence-outs are reachable
		RetryInterval:      time.Second,
		MaxConcurrentMoves: 3,
		// Only carried in the Welcome so far: its round trip through the wire is checked.
		Load: handoff.LoadSettings{ReportInterval: 6 * time.Second, HalfLife: time.Minute, ReconcileWeight: 0.1},
	}
}

// holder is one shard process: (shard ID, incarnation).
type holder struct {
	shard string
	inc   uint64
}

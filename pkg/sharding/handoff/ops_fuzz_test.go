package handoff_test

import (
	"cmp"
	"flag"
	"slices"
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

// loadReport reads a load report of up to 7 entries (partition, load byte, objects
// byte, age byte) for count partitions. Loads run from 0 to 255 req/s in steps of
// 1 req/s, above the fuzz configuration's bounds at the top (absurd entries and sums);
// an age byte reads as 0 to 255 minutes, past the wire's cap at the top (invalid). The
// entries are sorted and deduplicated one time in 8 less, so that validation refuses
// some reports.
func (r *opReader) loadReport(count int) *kshardv1.LoadReport {
	n := r.n(8)
	w := &kshardv1.LoadReport{LimiterWaitPermille: uint32(r.next())}
	seen := map[uint32]bool{}
	for range n {
		p := r.partition(count)
		if seen[p] {
			continue
		}
		seen[p] = true
		w.Partitions = append(w.Partitions, p)
		w.LoadMilli = append(w.LoadMilli, uint32(r.next())*1000)
		w.Objects = append(w.Objects, uint32(r.next()))
		w.AgeSeconds = append(w.AgeSeconds, uint32(r.next())*60)
	}
	if r.n(8) != 0 {
		sortLoad(w)
	}
	return w
}

// sortLoad sorts a wire load report's entries by partition.
func sortLoad(w *kshardv1.LoadReport) {
	idx := make([]int, len(w.Partitions))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(w.Partitions[a], w.Partitions[b]) })
	perm := func(v []uint32) []uint32 {
		out := make([]uint32, len(v))
		for i, j := range idx {
			out[i] = v[j]
		}
		return out
	}
	w.Partitions, w.LoadMilli, w.Objects, w.AgeSeconds = perm(w.Partitions), perm(w.LoadMilli), perm(w.Objects), perm(w.AgeSeconds)
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
		// Carried in the Welcome (its round trip through the wire is checked) and, with
		// load placement, the completeness window of load rounds.
		Load: handoff.LoadSettings{ReportInterval: 6 * time.Second, HalfLife: time.Minute, ReconcileWeight: 0.1},
	}
}

// fuzzLoadConfig is fuzzConfig with load placement and load rounds, timed so that a
// program of a few hundred operations reaches several rounds: every 12s after a 15s
// warmup, a 20s cooldown, and load bounds the reports' bytes can exceed.
func fuzzLoadConfig() handoff.Config {
	cfg := fuzzConfig()
	cfg.Balance = handoff.BalanceConfig{Placement: handoff.PlacementLoad, Enabled: true,
		Interval: 12 * time.Second, Warmup: 15 * time.Second, Cooldown: 20 * time.Second,
		MaxPartitionLoad: 200, MaxShardLoad: 600}
	return cfg
}

// holder is one shard process: (shard ID, incarnation).
type holder struct {
	shard string
	inc   uint64
}

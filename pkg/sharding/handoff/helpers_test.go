package handoff

import (
	"testing"
	"time"

	"github.com/kshard/kshard/pkg/sharding/partition"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testConfig is a small, fast configuration for unit tests.
func testConfig(p int) Config {
	return Config{
		PartitionCount:     p,
		SessionTTL:         10 * time.Second,
		HeartbeatInterval:  3 * time.Second,
		Margin:             2 * time.Second,
		Debounce:           time.Second,
		MaxDebounce:        5 * time.Second,
		PrepareTimeout:     5 * time.Second,
		ReleaseTimeout:     30 * time.Second,
		RetryInterval:      time.Second,
		MaxConcurrentMoves: 64,
	}
}

// cluster wires one coordinator and shards with a perfect, synchronous
// network and instant caches/drains unless told otherwise. One clock.
type cluster struct {
	t         *testing.T
	now       time.Time
	c         *Coordinator
	shards    map[string]*Shard
	down      map[string]bool // network to this shard is cut
	slowSync  bool            // do not sync caches automatically
	holdDrain bool            // do not finish drains automatically
	sent      []Command       // every command delivered, in order
	rejects   []error
	// groups names the shard group each shard's hellos carry (the shard's --shard-group,
	// which the edge adds to the state machine's hello); nil or absent: the default group.
	groups map[string]string
	// waits is the rate-limiter wait (‰) each shard's load reports carry (report); absent: 0.
	waits map[string]uint32

	// The owner record as the API server enforces it (Config.OwnerRecord):
	// pump applies each request at once unless holdRecord; recordErr fails it.
	record     map[partition.ID]string
	holdRecord bool
	recordErr  error
	recordOut  *RecordRequest
	// acquiredUnrecorded collects Acquires delivered while the record named
	// somebody else.
	acquiredUnrecorded []Command
}

func newCluster(t *testing.T, cfg Config, term uint32) *cluster {
	t.Helper()
	c, err := New(cfg, term, t0)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, now: t0, c: c, shards: map[string]*Shard{}, down: map[string]bool{}, record: map[partition.ID]string{}}
}

func (k *cluster) addShard(id string, inc uint64) *Shard {
	s := NewShard(id, inc)
	k.shards[id] = s
	s.Connect(k.now)
	k.pump()
	return s
}

// pump delivers messages and finishes syncs/drains until nothing moves.
func (k *cluster) pump() {
	for range 1000 {
		moved := k.pumpRecord()
		for _, cmd := range k.c.Outbox() {
			moved = true
			s := k.shards[cmd.To]
			if s == nil || k.down[cmd.To] {
				continue
			}
			if cmd.Kind == CmdAcquire && k.c.cfg.OwnerRecord && k.record[cmd.Partition] != cmd.To {
				k.acquiredUnrecorded = append(k.acquiredUnrecorded, cmd)
			}
			k.sent = append(k.sent, cmd)
			if err := s.Step(k.now, cmd); err != nil {
				k.rejects = append(k.rejects, err)
			}
		}
		for id, s := range k.shards {
			for _, a := range s.Actions() {
				moved = true
				switch {
				case a.Kind == ActionWarm && !k.slowSync:
					s.Synced(k.now, a.Partition, a.Epoch)
				case a.Kind == ActionDrain && !k.holdDrain:
					s.Drained(k.now, a.Partition)
				}
			}
			for _, r := range s.Outbox() {
				moved = true
				if k.down[id] {
					continue
				}
				if r.Kind == ReportHello {
					r.Group = k.groups[id]
				}
				if err := k.c.Step(k.now, r); err != nil {
					k.rejects = append(k.rejects, err)
				}
			}
			if s.NeedsHello() && !k.down[id] {
				moved = true
				s.Connect(k.now)
			}
		}
		if !moved {
			return
		}
	}
	k.t.Fatal("cluster did not quiesce")
}

// pumpRecord takes the coordinator's record request and, unless held,
// applies it to k.record and answers it.
func (k *cluster) pumpRecord() bool {
	if k.recordOut == nil {
		req, ok := k.c.TakeRecordRequest()
		if !ok {
			return false
		}
		k.recordOut = &req
	}
	if k.holdRecord {
		return false
	}
	req := *k.recordOut
	k.recordOut = nil
	if k.recordErr == nil {
		for p, s := range req.Owners {
			k.record[p] = s
		}
	}
	k.c.RecordApplied(k.now, req.Gen, k.recordErr)
	return true
}

// run advances time in steps of d, with heartbeats and ticks, for total.
func (k *cluster) run(total, d time.Duration) {
	for end := k.now.Add(total); k.now.Before(end); {
		k.now = k.now.Add(d)
		for _, s := range k.shards {
			if int(k.now.Sub(t0)/d)%int(3*time.Second/d) == 0 {
				s.Heartbeat(k.now)
			}
		}
		k.c.Tick(k.now)
		k.pump()
	}
}

// workers returns, per partition, the shards working it now.
func (k *cluster) workers() map[partition.ID][]string {
	out := map[partition.ID][]string{}
	for id, s := range k.shards {
		s.ForEachWorking(k.now, func(p partition.ID) { out[p] = append(out[p], id) })
	}
	return out
}

func (k *cluster) checkSafe() {
	k.t.Helper()
	for p, w := range k.workers() {
		if len(w) > 1 {
			k.t.Fatalf("partition %d worked by %v", p, w)
		}
	}
}

// checkFenced: with the owner record, at most one shard works each partition
// and is named by the record (the only one whose writes the API server
// accepts), and no Acquire ever reached a shard the record did not name.
func (k *cluster) checkFenced() {
	k.t.Helper()
	for p, w := range k.workers() {
		n := 0
		for _, id := range w {
			if k.record[p] == id {
				n++
			}
		}
		if n > 1 {
			k.t.Fatalf("partition %d worked by %v, record names %q", p, w, k.record[p])
		}
	}
	if len(k.acquiredUnrecorded) > 0 {
		k.t.Fatalf("Acquire delivered while the record named another shard: %+v", k.acquiredUnrecorded)
	}
}

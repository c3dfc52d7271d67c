package sim

import (
	"fmt"
	"time"
)

// Fault kinds injected by the Chaos scenario.
const (
	faultCrash        = "crash"         // process dies, pod stays down
	faultCrashRestart = "crash-restart" // process dies, restarts with a new incarnation and empty state
	faultPause        = "pause"         // process stops (GC pause) for up to 3×TTL
	faultCut          = "cut"           // the shard's stream breaks for a while
	faultAdd          = "add"           // a new shard pod
	faultLeave        = "leave"         // graceful leave (SIGTERM)
	faultLeader       = "leader"        // the coordinator leader is replaced
)

var faultWeights = []struct {
	name   string
	weight int
}{
	{faultCrash, 5}, {faultCrashRestart, 12}, {faultPause, 12}, {faultCut, 14},
	{faultAdd, 6}, {faultLeave, 6}, {faultLeader, 7},
}

func (w *world) pickFault() string {
	total := 0
	for _, f := range faultWeights {
		total += f.weight
	}
	n := w.rng.IntN(total)
	for _, f := range faultWeights {
		if n < f.weight {
			return f.name
		}
		n -= f.weight
	}
	return faultCut
}

// randomLive returns a live, not-leaving shard, or nil.
func (w *world) randomLive() *shardNode {
	var live []*shardNode
	for _, s := range w.shards {
		if s.alive && !s.sh.Leaving() {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return live[w.rng.IntN(len(live))]
}

func (w *world) liveCount() int {
	n := 0
	for _, s := range w.shards {
		if s.alive && !s.sh.Leaving() {
			n++
		}
	}
	return n
}

// inject applies one random fault.
func (w *world) inject() {
	f := w.pickFault()
	s := w.randomLive()
	switch f {
	case faultCrash, faultCrashRestart:
		if s == nil || (f == faultCrash && w.liveCount() <= w.minShards) {
			return
		}
		w.tracef("FAULT %s %s", f, s.id)
		w.stop(s, false)
		if f == faultCrashRestart {
			d := w.dur(200*time.Millisecond, 5*time.Second)
			w.after(d, &event{kind: evRestart, shard: s.idx})
			w.settle(w.now + d)
		} else {
			s.gone = true
		}
	case faultPause:
		if s == nil {
			return
		}
		d := w.dur(200*time.Millisecond, 3*ttl)
		w.tracef("FAULT pause %s for %v", s.id, d)
		// A pause of a paused process extends it, never shortens it: events
		// already parked until the first pause's end stay parked.
		s.pausedUntil = max(s.pausedUntil, w.now+d)
		w.settle(s.pausedUntil)
	case faultCut:
		if s == nil {
			return
		}
		d := w.dur(100*time.Millisecond, 2*ttl)
		w.tracef("FAULT cut %s for %v", s.id, d)
		s.cutUntil = w.now + d
		if w.leader != nil && s.leaderGen == w.leader.gen && w.chance(0.8) {
			w.after(w.dur(0, time.Second), &event{kind: evDisconnected, gen: s.leaderGen, name: s.id, sess: s.sh.Session()})
		}
		w.after(d+w.dur(0, 300*time.Millisecond), &event{kind: evReconnect, shard: s.idx, inc: s.inc})
		w.settle(w.now + d + 300*time.Millisecond)
	case faultAdd:
		if len(w.shards) >= w.maxShards {
			return
		}
		n := w.addShard()
		w.tracef("FAULT add %s", n.id)
	case faultLeave:
		if s == nil || w.liveCount() <= w.minShards {
			return
		}
		w.leave(s)
	case faultLeader:
		w.depose(w.dur(200*time.Millisecond, maxElection))
	}
	w.res.Faults[f]++
}

func (w *world) leave(s *shardNode) {
	w.tracef("FAULT leave %s", s.id)
	s.leaveStart = w.now
	s.sh.Leave(s.clk.at(w.now))
	w.after(leaveDeadline, &event{kind: evLeaveDeadline, shard: s.idx, inc: s.inc})
	w.settle(w.now + leaveDeadline)
	w.flushShard(s)
}

func (w *world) addShard() *shardNode {
	s := &shardNode{idx: len(w.shards), id: fmt.Sprintf("shard-%02d", len(w.shards)), clk: w.newClock()}
	w.shards = append(w.shards, s)
	w.start(s)
	return s
}

// quiesce ends fault injection: crashed pods that may restart do, and at
// least minShards shards are up.
func (w *world) quiesce() {
	w.faulty = false
	w.tracef("faults stop")
	for _, s := range w.shards {
		if !s.alive && !s.gone {
			w.start(s)
		}
	}
	for w.liveCount() < w.minShards {
		w.addShard()
	}
	if w.leader == nil && !w.electing {
		w.depose(0)
	}
	// Acknowledgements lost just before now may still let a lease run out
	// until every shard has had a heartbeat acknowledged over the healed
	// network: that self-fencing is correct, and part of the faults.
	w.settle(w.now + 2*hbInterval)
}

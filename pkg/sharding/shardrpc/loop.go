package shardrpc

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/status"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kshard/kshard/pkg/sharding/handoff"
	"github.com/kshard/kshard/pkg/sharding/protocol"
	kshardv1 "github.com/kshard/kshard/proto/kshard/v1"
)

// Run keeps the session until ctx ends or the coordinator says Farewell after Leave: it
// waits for one input (a message, a timer, a Handler's callback, Leave), hands it to its
// step, and then settles what the step changed.
func (c *Client) Run(ctx context.Context) error {
	l := c.newLoop()
	defer l.close()
	for {
		switch l.next(ctx) {
		case stop:
			return nil
		case settle:
			l.settle()
		case skipSettle:
		}
	}
}

// result is what Run does after a step.
type result int

const (
	// settle: publish Welcomed, arm the lease deadline and renew a session that lost its
	// lease.
	settle result = iota
	// skipSettle: the step gave the state machine nothing (a failed dial, a malformed
	// message); the next input settles.
	skipSettle
	// stop: Run returns (ctx ended, or the coordinator said farewell).
	stop
)

// loop is Run's state, owned by Run's goroutine: the open stream, where and when to
// reconnect, and the heartbeat and lease timers.
type loop struct {
	c   *Client
	cur *conn // the open stream; nil while reconnecting

	targets *targetQueue
	// unreachable holds addresses that could not be reached lately: they are passed over
	// while others are left, so that a failover's retries go to the replicas that answer:
	// for 2 connect timeouts after one failure, doubling while they go on failing, up to 8.
	unreachable *flowcontrol.Backoff
	hint        string        // leader address named by a follower
	backoff     time.Duration // the current reconnect delay
	retry       *time.Timer   // fires the next dial while cur is nil

	hb       *time.Ticker
	hbEvery  time.Duration // the heartbeat interval hb ticks at
	deadline *time.Timer
	armed    time.Time // the lease deadline the timer is set for

	leaving <-chan struct{} // Client.leave until Leave was handled, then nil
}

func (c *Client) newLoop() *loop {
	return &loop{
		c: c,
		targets: &targetQueue{addrs: c.opts.Addresses, lookup: c.opts.LookupHost, leader: c.opts.LeaderAddress,
			now: c.opts.Now, timeout: c.opts.ConnectTimeout, log: c.log},
		unreachable: flowcontrol.NewBackOff(2*c.opts.ConnectTimeout, 8*c.opts.ConnectTimeout),
		retry:       time.NewTimer(0),
		hb:          time.NewTicker(time.Hour),
		deadline:    time.NewTimer(time.Hour),
		leaving:     c.leave,
	}
}

// close closes the stream and stops the timers.
func (l *loop) close() {
	if l.cur != nil {
		l.cur.close()
	}
	l.deadline.Stop()
	l.hb.Stop()
}

// next waits for one input and hands it to its step: a stream's messages and end while
// one is open, the retry timer while none is.
func (l *loop) next(ctx context.Context) result {
	var recv chan *kshardv1.CoordinatorMessage
	var errs chan streamError
	var retry <-chan time.Time
	if l.cur != nil {
		recv, errs = l.cur.recv, l.cur.err
	} else {
		retry = l.retry.C
	}
	select {
	case <-ctx.Done():
		return stop
	case <-retry:
		return l.connect(ctx)
	case m := <-recv:
		return l.receive(m)
	case serr := <-errs:
		return l.streamEnded(serr)
	case <-l.hb.C:
		return l.heartbeat()
	case <-l.deadline.C:
		return l.leaseDeadline()
	case ev := <-l.c.events:
		ev(l.c.opts.Now())
		l.step()
		return settle
	case <-l.leaving:
		return l.leave()
	}
}

// connect dials the leader a follower named, else the next address not passed over, and
// opens a session on the new stream; a failed dial retries after a growing backoff.
func (l *loop) connect(ctx context.Context) result {
	c := l.c
	now := c.opts.Now()
	tgt := target{addr: l.hint}
	if l.hint == "" || l.unreachable.IsInBackOffSinceUpdate(l.hint, now) {
		// A follower names the Lease holder, which during a failover is the dead or
		// frozen old leader: not worth another attempt so soon.
		tgt = l.targets.next(ctx, func(a string) bool { return l.unreachable.IsInBackOffSinceUpdate(a, now) })
	}
	l.hint = ""
	addr := tgt.addr
	k, err := c.dial(ctx, tgt)
	if err != nil {
		l.unreachable.Next(addr, c.opts.Now())
		l.unreachable.GC() // forget addresses of replicas long gone (replaced pods)
		l.backoff = c.nextBackoff(l.backoff)
		c.log.Info("cannot reach coordinator; retrying", "address", addr, "err", err.Error(), "retryIn", l.backoff.String())
		l.retry.Reset(l.backoff)
		return skipSettle
	}
	l.cur = k
	l.unreachable.Reset(addr)
	if c.opts.Metrics != nil {
		c.opts.Metrics.Reconnects.Inc()
	}
	c.dropOutbox()
	c.core.Connect(c.opts.Now())
	c.rtt.reset()
	c.loadEvery = 0 // until this session's Welcome says
	c.log.Info("session opened", "address", addr, "session", c.core.Session().String(), "held", len(c.core.Held()))
	l.step()
	return settle
}

// receive steps the state machine with a coordinator's message; a malformed one drops
// the stream. It stops Run when the coordinator said farewell.
func (l *loop) receive(m *kshardv1.CoordinatorMessage) result {
	c := l.c
	now := c.opts.Now()
	cmd, err := protocol.CommandFromWire(m, c.opts.ShardID, c.opts.PartitionCount, protocol.Hasher)
	if err != nil {
		c.log.Error(err, "invalid message from coordinator; reconnecting")
		c.countRejected("malformed")
		l.backoff = c.nextBackoff(l.backoff)
		l.dropStream(l.backoff)
		return skipSettle
	}
	if cmd.Kind == handoff.CmdAck {
		c.rtt.acked(cmd.Seq, now, c.opts.Metrics)
	}
	err = c.core.Step(now, cmd)
	if err != nil {
		var rej *handoff.Rejection
		reason := "other"
		if errors.As(err, &rej) {
			reason = rej.Reason.String()
		}
		c.countRejected(reason)
		c.log.V(1).Info("rejected coordinator command", "command", cmd.String(), "err", err.Error())
	}
	if cmd.Kind == handoff.CmdWelcome && c.core.Welcomed() {
		l.backoff = 0
		c.log.Info("session welcomed", "session", c.core.Session().String(), "kept", len(cmd.Keep),
			"ttl", cmd.TTL.String(), "heartbeatInterval", cmd.HeartbeatInterval.String(),
			"loadReportInterval", cmd.Load.ReportInterval.String())
	}
	if cmd.Kind == handoff.CmdWelcome && err == nil {
		// Only the current session's Welcome: the state machine refuses another's.
		c.welcomeLoad(cmd.Load, cmd.HeartbeatInterval)
	}
	if iv := c.core.HeartbeatInterval(); iv > 0 && iv != l.hbEvery {
		l.hbEvery = iv
		l.hb.Reset(iv)
	}
	l.step()
	if c.core.Done() {
		c.log.Info("coordinator said farewell: every partition was handed over")
		close(c.done)
		return stop
	}
	return settle
}

// streamEnded reconnects: at once (MinBackoff) to the leader a refusing follower named,
// else after a growing backoff.
func (l *loop) streamEnded(serr streamError) result {
	c := l.c
	l.hint = serr.leader
	code := status.Code(serr.err)
	c.log.Info("session stream ended", "err", serr.err.Error(), "code", code.String(), "leaderHint", l.hint)
	if l.hint == "" {
		l.backoff = c.nextBackoff(l.backoff)
	} else {
		l.backoff = c.opts.MinBackoff
	}
	l.dropStream(l.backoff)
	return settle
}

// heartbeat sends a heartbeat when the state machine has one to send.
func (l *loop) heartbeat() result {
	now := l.c.opts.Now()
	if l.c.core.Heartbeat(now) {
		l.c.rtt.sentAt(now)
	}
	l.step()
	return settle
}

// leaseDeadline lets the state machine demote what it holds when the lease ran out (or
// is about to). Workers already stopped: the Handler's deadline is checked per key.
func (l *loop) leaseDeadline() result {
	l.c.core.Heartbeat(l.c.opts.Now())
	l.step()
	return settle
}

// leave asks the coordinator, once, to move every partition away.
func (l *loop) leave() result {
	l.leaving = nil
	l.c.log.Info("leaving: asking the coordinator to move every partition away")
	l.c.core.Leave(l.c.opts.Now())
	l.step()
	return settle
}

// settle follows up a step: it publishes whether the shard may work, arms the deadline
// timer for a new lease deadline, and opens a new session when the lease ran out.
func (l *loop) settle() {
	c := l.c
	c.welcomed.Store(l.cur != nil && c.core.Welcomed() && c.core.CanWork(c.opts.Now()))
	// Wake up once when the lease deadline passes, so the state machine demotes what it
	// holds even if nothing else happens. Only a new deadline re-arms the timer.
	if d := c.core.Deadline(); !d.Equal(l.armed) && d.After(c.opts.Now()) {
		l.armed = d
		l.deadline.Reset(d.Sub(c.opts.Now()) + time.Millisecond)
	}
	if l.cur != nil && c.core.NeedsHello() {
		// The lease ran out or the coordinator ended the session: a new session (a new
		// stream, so commands of the old one cannot arrive on it) says Hello.
		c.log.Info("session lost its lease; opening a new session")
		l.dropStream(c.opts.MinBackoff)
	}
}

// step applies the state machine's output after an input; a send failure drops the
// stream and reconnects after a growing backoff.
func (l *loop) step() {
	c := l.c
	if l.cur == nil {
		c.applyLocal()
		c.dropOutbox()
		return
	}
	if err := c.apply(l.cur); err != nil {
		if errors.Is(err, io.EOF) {
			// The coordinator ended the stream (e.g. a follower refused it before the
			// hello went out). Its status, with the leader a follower names in the
			// trailer, only Recv reports: the stream's error channel delivers it and
			// reconnects. Closing here would lose the leader hint.
			c.log.V(1).Info("the coordinator ended the stream; waiting for its status")
			return
		}
		c.log.Info("sending to the coordinator failed; reconnecting", "err", err.Error())
		l.backoff = c.nextBackoff(l.backoff)
		l.dropStream(l.backoff)
	}
}

// dropStream closes the open stream and dials again after retryIn.
func (l *loop) dropStream(retryIn time.Duration) {
	l.cur.close()
	l.cur = nil
	l.retry.Reset(retryIn)
}

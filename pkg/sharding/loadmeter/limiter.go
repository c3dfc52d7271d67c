package loadmeter

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/flowcontrol"

	"github.com/kshard/kshard/pkg/sharding/gate"
)

// Limiter wraps a controller client's rate limiter so that the time each request waits
// for a token is counted: as controller's (kshard_controller_rate_limiter_wait_seconds_total),
// and as the load meter's wait of the partition the request's context is marked with
// (gate.PartitionFrom: client-go calls Wait with the request's context, and a
// reconcile's requests run under its Queue.KeyContext), or of the shard as a whole when
// it names none (the event broadcaster's sends, Accept without a context). Clients that
// share inner must share the returned limiter too, so that they keep sharing one bucket.
func Limiter(m *Meter, controller string, inner flowcontrol.RateLimiter) flowcontrol.RateLimiter {
	if m == nil || inner == nil {
		panic("loadmeter: Limiter needs a Meter and a rate limiter to wrap")
	}
	return &limiter{RateLimiter: inner, m: m, controller: m.controllerWait(controller)}
}

type limiter struct {
	flowcontrol.RateLimiter
	m          *Meter
	controller *atomic.Uint64
}

// Wait takes a token as the wrapped limiter does and counts the time it took.
func (l *limiter) Wait(ctx context.Context) error {
	start := time.Now()
	err := l.RateLimiter.Wait(ctx)
	if d := time.Since(start); d > 0 {
		l.controller.Add(uint64(d))
		p, ok := gate.PartitionFrom(ctx)
		l.m.addWait(p, ok, d)
	}
	return err
}

// Accept takes a token as the wrapped limiter does and counts the time it took as the
// shard's (it has no context to tell the partition by).
func (l *limiter) Accept() {
	start := time.Now()
	l.RateLimiter.Accept()
	if d := time.Since(start); d > 0 {
		l.controller.Add(uint64(d))
		l.m.addWait(0, false, d)
	}
}

package shardcache

// One watch call of the reflector (filteredWatch). It keeps:
//   - Its goroutine is the only writer of the result channel, and drains the feed's queue
//     before it reads the next upstream event, so an injected batch is never interleaved
//     with live events.
//   - It holds no state of its own: an upstream event is accounted for by the feed the
//     moment it is read, so whatever the instance leaves is delivered by the next one.
//   - With several streams, an upstream that ends after living minReopenAge is reopened
//     alone from its stream's position; otherwise the call ends, and the reflector watches
//     again, every stream from its position.

import (
	"context"
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// filteredWatch is one watch call of the reflector. It merges the feed's upstream
// watches, one per stream (streams.go), into one result channel. Its goroutine is the
// only writer of the result channel: it first drains the feed's output queue (synthetic
// events and filtered upstream events, in order) and reads the next upstream event only
// when the queue is empty, so an injected batch is never interleaved with live events.
// It reads the upstreams directly (one select over all of them), so an upstream event is
// either accounted for by the feed or still unread.
//
// Upstream events pass through feed.accept; the instance itself holds no state, so when
// the reflector stops it (or a newer watch or relist retires it) whatever is still queued
// is delivered by the next instance.
//
// In ModeServerFilter, when a slice of the feed's selector changes, the instance replaces
// that slice's upstream watch by one opened from its stream's high-water mark with the
// new selector, without ending the reflector's watch; when the selector gets more slices,
// it replaces all of them.
type filteredWatch struct {
	f    *feed
	gen  uint64
	ctx  context.Context
	base metav1.ListOptions // the reflector's options, from which reopened watches start
	bits int
	ups  []*upstreamWatch
	// gens are the ups' slice generations (upstreamSpec.covGen), for the feed's checks.
	gens []uint64
	// cases: stopCh, wake, then each upstream's result channel.
	cases    []reflect.SelectCase
	result   chan watch.Event
	wake     chan struct{}
	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when run returns
}

// upstreamWatch is one open upstream watch of a stream.
type upstreamWatch struct {
	w watch.Interface
	upstreamSpec
	opened time.Time
}

// minReopenAge is how long an upstream must have lived for its end to be mended in place
// (reopened alone from its stream's high-water mark) rather than end the whole watch,
// leaving the retry and its backoff to the reflector. (A variable for tests.)
var minReopenAge = time.Second

// The first select cases of filteredWatch.cases; the upstreams follow.
const (
	caseStop = iota
	caseWake
	caseUpstreams
)

var _ watch.Interface = &filteredWatch{}

func newFilteredWatch(ctx context.Context, f *feed, gen uint64, bits int, base metav1.ListOptions) *filteredWatch {
	w := &filteredWatch{
		f:      f,
		gen:    gen,
		ctx:    ctx,
		base:   base,
		result: make(chan watch.Event),
		wake:   make(chan struct{}, 1),
		stopCh: make(chan struct{}),
		done:   make(chan struct{}),
	}
	w.resize(bits)
	return w
}

// resize makes room for the upstreams of 2^bits streams.
func (w *filteredWatch) resize(bits int) {
	n := 1 << bits
	w.bits, w.ups, w.gens = bits, make([]*upstreamWatch, n), make([]uint64, n)
	w.cases = make([]reflect.SelectCase, caseUpstreams+n)
	w.cases[caseStop] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.stopCh)}
	w.cases[caseWake] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.wake)}
	for i := caseUpstreams; i < len(w.cases); i++ {
		w.cases[i] = reflect.SelectCase{Dir: reflect.SelectRecv} // nil channel: never ready
	}
}

// ResultChan implements watch.Interface.
func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface. The upstream watches are stopped by the goroutine on
// its way out.
func (w *filteredWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stopCh) })
}

// attach makes up stream k's upstream.
func (w *filteredWatch) attach(k int, up watch.Interface, spec upstreamSpec) {
	w.ups[k], w.gens[k] = &upstreamWatch{w: up, upstreamSpec: spec, opened: time.Now()}, spec.covGen
	w.cases[caseUpstreams+k].Chan = reflect.ValueOf(up.ResultChan())
}

func (w *filteredWatch) stopUpstreams() {
	for _, u := range w.ups {
		if u != nil {
			u.w.Stop()
		}
	}
}

func (w *filteredWatch) run() {
	defer close(w.done)
	defer close(w.result)
	defer w.stopUpstreams()
	for {
		stale, bits, alive := w.f.staleUpstreams(w.gen, w.bits, w.gens)
		if !alive {
			return
		}
		if len(stale) > 0 {
			if !w.reopen(stale, bits, true) {
				return
			}
			continue
		}
		ev, seq, ok, alive := w.f.next(w.gen)
		if !alive {
			return
		}
		if ok {
			select {
			case w.result <- ev:
				w.f.markDelivered(seq)
			case <-w.stopCh:
				return
			}
			continue
		}
		chosen, recv, open := reflect.Select(w.cases)
		switch chosen {
		case caseStop:
			return
		case caseWake:
			continue
		}
		k := chosen - caseUpstreams
		if !open {
			// An upstream ended (its timeout, a connection lost). With several streams,
			// one that lived reopens alone, so that the others keep going; otherwise the
			// reflector watches again, every stream from its high-water mark.
			if w.bits == 0 || time.Since(w.ups[k].opened) < minReopenAge || !w.reopen([]int{k}, w.bits, false) {
				return
			}
			continue
		}
		in, _ := recv.Interface().(watch.Event)
		direct, alive, reopen := w.f.accept(w.gen, k, w.bits, w.gens[k], in)
		if !alive {
			return
		}
		if reopen {
			continue // the loop's check reopens
		}
		if direct != nil {
			select {
			case w.result <- *direct:
			case <-w.stopCh:
				return
			}
		}
	}
}

// reopen replaces the upstream watches of streams stale (every stream, when the selector
// now has bits slice bits) by ones from their high-water marks with the feed's current
// selector. It returns false if the instance must end instead (retired, stopped, or a
// new watch failed: the reflector then watches again, from the same high-water marks and
// with the same selector, or relists). selectorChanged tells why: a change of the
// selector, or an upstream that ended.
func (w *filteredWatch) reopen(stale []int, bits int, selectorChanged bool) bool {
	reason := "its upstream watch ended"
	if selectorChanged {
		reason = "the shard selector changed"
	}
	if bits != w.bits {
		w.stopUpstreams()
		w.resize(bits)
	}
	for _, k := range stale {
		spec, ok := w.f.reopenSpec(w.gen, k, w.base)
		if !ok {
			return false
		}
		if u := w.ups[k]; u != nil {
			u.w.Stop()
			w.ups[k] = nil
			w.cases[caseUpstreams+k].Chan = reflect.Value{}
		}
		select {
		case <-w.stopCh:
			return false
		default:
		}
		up, err := w.f.rt.Watch(w.ctx, w.f.client, "", spec.opts)
		w.f.counters.watches.Add(1)
		if err != nil {
			w.f.logger.Error(err, "Reopening a slice's watch failed; the reflector will watch again", "slice", k, "reason", reason)
			return false
		}
		if selectorChanged {
			w.f.counters.selectorRestarts.Add(1)
		}
		w.f.logger.V(2).Info("Reopened a slice's watch", "reason", reason, "slice", k, "slices", len(w.ups),
			"resourceVersion", spec.opts.ResourceVersion, "selectorLength", len(spec.opts.ShardSelector))
		w.attach(k, up, spec)
	}
	return true
}

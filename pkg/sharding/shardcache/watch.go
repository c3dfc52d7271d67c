package shardcache

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// filteredWatch is one watch call of the reflector. Its goroutine is the only writer of
// the result channel: it first drains the feed's output queue (synthetic events and
// filtered upstream events, in order) and reads the next upstream event only when the
// queue is empty, so an injected batch is never interleaved with live events.
//
// Upstream events pass through feed.accept; the instance itself holds no state, so when
// the reflector stops it (or a newer watch or relist retires it) whatever is still queued
// is delivered by the next instance.
//
// In ModeServerFilter, when the feed's selector changes, the instance replaces its
// upstream watch by one opened from the feed's high-water mark with the new selector,
// without ending the reflector's watch.
type filteredWatch struct {
	f        *feed
	gen      uint64
	ctx      context.Context
	opts     metav1.ListOptions // of the upstream watch
	covGen   uint64             // generation of the selector the upstream uses
	upstream watch.Interface
	result   chan watch.Event
	wake     chan struct{}
	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when run returns
}

var _ watch.Interface = &filteredWatch{}

func newFilteredWatch(ctx context.Context, f *feed, gen uint64, upstream watch.Interface, opts metav1.ListOptions, covGen uint64) *filteredWatch {
	return &filteredWatch{
		f:        f,
		gen:      gen,
		ctx:      ctx,
		opts:     opts,
		covGen:   covGen,
		upstream: upstream,
		result:   make(chan watch.Event),
		wake:     make(chan struct{}, 1),
		stopCh:   make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// ResultChan implements watch.Interface.
func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop implements watch.Interface. The upstream watch is stopped by the goroutine on its
// way out.
func (w *filteredWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stopCh) })
}

func (w *filteredWatch) run() {
	defer close(w.done)
	defer close(w.result)
	defer func() { w.upstream.Stop() }()
	upstream := w.upstream.ResultChan()
	for {
		if w.f.needsReopen(w.gen, w.covGen) {
			if !w.reopen() {
				return
			}
			upstream = w.upstream.ResultChan()
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
		select {
		case in, open := <-upstream:
			if !open {
				return
			}
			direct, alive, reopen := w.f.accept(w.gen, w.covGen, in)
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
		case <-w.wake:
		case <-w.stopCh:
			return
		}
	}
}

// reopen replaces the upstream watch by one from the feed's high-water mark with the
// feed's current selector. It returns false if the instance must end instead (retired,
// stopped, or the new watch failed: the reflector then watches again, from the same
// high-water mark and with the same selector, or relists).
func (w *filteredWatch) reopen() bool {
	opts, covGen, ok := w.f.reopenOpts(w.gen, w.opts)
	if !ok {
		return false
	}
	w.upstream.Stop()
	select {
	case <-w.stopCh:
		return false
	default:
	}
	up, err := w.f.rt.Watch(w.ctx, w.f.client, "", opts)
	w.f.counters.watches.Add(1)
	if err != nil {
		w.f.logger.Error(err, "Reopening the watch with a new shard selector failed; the reflector will watch again")
		w.upstream = watch.NewEmptyWatch()
		return false
	}
	w.f.counters.selectorRestarts.Add(1)
	w.f.logger.V(2).Info("Reopened the watch with a new shard selector", "resourceVersion", opts.ResourceVersion, "selectorLength", len(opts.ShardSelector))
	w.upstream, w.opts, w.covGen = up, opts, covGen
	return true
}

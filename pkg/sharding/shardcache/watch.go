package shardcache

import (
	"sync"

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
type filteredWatch struct {
	f        *feed
	gen      uint64
	upstream watch.Interface
	result   chan watch.Event
	wake     chan struct{}
	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when run returns
}

var _ watch.Interface = &filteredWatch{}

func newFilteredWatch(f *feed, gen uint64, upstream watch.Interface) *filteredWatch {
	return &filteredWatch{
		f:        f,
		gen:      gen,
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
	defer w.upstream.Stop()
	upstream := w.upstream.ResultChan()
	for {
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
			direct, alive := w.f.accept(w.gen, in)
			if !alive {
				return
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

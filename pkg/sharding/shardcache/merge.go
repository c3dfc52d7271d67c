package shardcache

// Watch and merge: a watch call of the reflector opens one upstream watch per stream, and
// its filteredWatch (watch.go) reads them; every upstream event is accounted for here
// (accept), under f.mu, and what the reflector receives comes out of one output queue
// (next, markDelivered). It keeps:
//   - One queue that outlasts watch calls: a watch that ends leaves what it did not deliver
//     to the next one, and only a relist discards it (list.go). Each queued event is
//     delivered once, by sequence number (len(outq) == appended - delivered), whichever
//     instance runs.
//   - Only the instance of the current generation (gen) takes events from the queue or
//     accounts for upstream events. Every watch call and relist retires the previous
//     instance and waits for its goroutine (retireActive), so two never deliver at once.
//   - An upstream event is accounted for by its own stream: at or below the stream's
//     high-water mark it is a duplicate of a restarted watch and is dropped, above it moves
//     the mark (initial events of a watch-list, in no order, do not). Then it is dropped if
//     its namespace is not admitted, buffered if the namespace is being warmed (nssync.go),
//     dropped at or below the namespace's floor (inject.go), and queued otherwise.
//   - Pending warm-ups are merged (inject.go) only between relists, when the instance
//     looks for its next event, so a merge is never interleaved with live events.
//   - A watch-list relist ends with one initial-events-end bookmark, sent once every stream
//     has sent its own, at the oldest stream's position.

import (
	"cmp"
	"context"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// mergeState is the watch and queue part of a feed's state (guarded by feed.mu).
type mergeState struct {
	// gen identifies the watch instance allowed to deliver; every Watch call and every
	// relist bumps it, which retires the previous instance.
	gen    uint64
	active *filteredWatch
	// outq holds events not yet handed to the reflector; appended and delivered count
	// events ever queued and delivered (len(outq) == appended-delivered).
	outq      []watch.Event
	appended  uint64
	delivered uint64
}

// WatchWithContext starts the upstream watches, one per stream, and merges them. A
// watch-list request (SendInitialEvents) is a relist and starts a new epoch. A plain watch
// resumes each stream from its high-water mark, not from the resourceVersion the reflector
// asks for: the reflector's value may be one of an injected (older, or newer than the
// stream) object, or another stream's, while the feed knows exactly which upstream events
// of each stream it has accounted for.
func (f *feed) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	f.retireActive()
	if initial {
		f.mu.Lock()
		f.resetLocked()
		f.mu.Unlock()
		if _, err := f.freshCoverage(ctx); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	if initial {
		f.initial = true
		f.resetStreamsLocked(f.cov)
	} else if !f.listing {
		f.splitStreamsLocked()
	}
	f.gen++
	gen := f.gen
	ups := make([]upstreamSpec, len(f.streams))
	for k, st := range f.streams {
		o := opts
		if !initial && st.hwm > 0 && !f.listing {
			if len(f.streams) == 1 && o.ResourceVersion != strconv.FormatUint(st.hwm, 10) {
				f.logger.V(5).Info("Resuming watch from the feed's high-water mark",
					"requested", o.ResourceVersion, "resourceVersion", st.hwm)
			}
			o.ResourceVersion = strconv.FormatUint(st.hwm, 10)
		}
		ups[k].opts = o
		if f.cov != nil {
			ups[k].opts.ShardSelector, ups[k].covGen = f.cov.sels[k], f.cov.gens[k]
		}
	}
	bits := f.bits
	f.mu.Unlock()

	w := newFilteredWatch(ctx, f, gen, bits, opts)
	// The streams' watches are opened side by side: each waits for the apiserver's watch
	// cache to be fresh (and, streaming, sends its initial events), so one after another
	// they would add up.
	opened := make([]watch.Interface, len(ups))
	errs := make([]error, len(ups))
	var wg sync.WaitGroup
	for k, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opened[k], errs[k] = f.rt.Watch(ctx, f.client, "", u.opts)
			f.counters.watches.Add(1)
		}()
	}
	wg.Wait()
	if err := cmp.Or(errs...); err != nil {
		for _, up := range opened {
			if up != nil {
				up.Stop()
			}
		}
		return nil, err
	}
	for k, u := range ups {
		w.attach(k, opened[k], u)
	}
	f.mu.Lock()
	if f.gen == gen {
		f.active = w
	}
	f.mu.Unlock()
	go w.run()
	return w, nil
}

// upstreamSpec is how one stream's upstream watch is opened: its options (selector and
// resourceVersion included) and the generation of its slice of the selector.
type upstreamSpec struct {
	opts   metav1.ListOptions
	covGen uint64
}

// accept processes one upstream event of stream k of watch instance gen, whose upstream
// was opened for bits slice bits and slice generation covGen. It returns the event to hand
// over directly (errors, which must not be queued), alive=false once the instance has
// been retired, and reopen=true if the stream's upstream is stale (the event is then not
// accounted for: the reopened watch delivers it again if it matches).
func (f *feed) accept(gen uint64, k, bits int, covGen uint64, ev watch.Event) (direct *watch.Event, alive, reopen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen {
		return nil, false, false
	}
	if f.staleLocked(k, bits, covGen) {
		return nil, true, true
	}
	direct, alive = f.acceptLocked(k, ev)
	return direct, alive, false
}

func (f *feed) acceptLocked(k int, ev watch.Event) (direct *watch.Event, alive bool) {
	if k >= len(f.streams) {
		return nil, true
	}
	st := &f.streams[k]
	switch ev.Type {
	case watch.Error:
		return &ev, true
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return nil, true
		}
		rv, ok := parseRV(m.GetResourceVersion())
		if f.initial && !st.initialDone {
			if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
				// End of this stream's part of the streamed list.
				st.initialDone = true
				st.hwm = rv
				if f.allInitialDoneLocked() {
					f.endInitialLocked(ev)
				}
				return nil, true
			}
			if len(f.streams) == 1 {
				f.appendLocked(ev)
			}
			return nil, true
		}
		if ok {
			if rv <= st.hwm {
				return nil, true
			}
			st.hwm = rv
			f.sweepFloorsLocked()
		}
		if !f.initial {
			f.appendLocked(ev)
		}
		return nil, true
	case watch.Added, watch.Modified, watch.Deleted:
		key, _, ok := objectKeys(ev.Object)
		if !ok {
			return nil, true
		}
		rv, rvOK := objectRV(ev.Object)
		if !(f.initial && !st.initialDone) && rvOK {
			// Initial events of a watch-list carry the objects' own (unordered)
			// resourceVersions; every later event is in stream order.
			if st.hwm > 0 && rv <= st.hwm {
				return nil, true // already accounted for before a watch restart
			}
			st.hwm = rv
		}
		if !f.adm.namespaceAdmitted(key) {
			f.counters.dropped.Add(1)
			return nil, true
		}
		_, _ = StripManagedFields(ev.Object)
		if s := f.syncs[key]; s != nil {
			s.buffer = append(s.buffer, ev)
			return nil, true
		}
		if floor, has := f.floors[key]; has {
			if rvOK && rv <= floor {
				return nil, true
			}
			delete(f.floors, key)
		}
		f.appendLocked(ev)
		return nil, true
	default:
		return nil, true
	}
}

// endInitialLocked completes a watch-list relist once every stream has sent its
// initial-events-end bookmark (last, a bookmark of the last stream): the reflector gets
// one such bookmark, at the oldest stream's position.
func (f *feed) endInitialLocked(last watch.Event) {
	f.initial = false
	f.listing = false
	oldest := f.oldestLocked()
	f.relistRV = strconv.FormatUint(oldest, 10)
	f.listedAt = f.positionsLocked()
	if len(f.streams) > 1 {
		obj := last.Object.DeepCopyObject()
		if m, err := meta.Accessor(obj); err == nil {
			m.SetResourceVersion(f.relistRV)
		}
		last = watch.Event{Type: watch.Bookmark, Object: obj}
	}
	f.appendLocked(last)
	f.logger.V(4).Info("Watch-list initial events complete", "resourceVersion", f.relistRV, "epoch", f.epoch, "streams", len(f.streams))
}

// next returns the event instance gen should deliver next and its sequence number,
// merging pending warm-ups into the queue first. ok is false if there is nothing to
// deliver; alive is false once the instance has been retired.
func (f *feed) next(gen uint64) (ev watch.Event, seq uint64, ok, alive bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if gen != f.gen {
		return watch.Event{}, 0, false, false
	}
	if !f.initial && !f.listing && len(f.pending) > 0 {
		var held []*nsSync
		for _, s := range f.pending {
			if s.state == syncPending {
				if s.hold {
					held = append(held, s)
					continue
				}
				f.injectLocked(s)
			}
		}
		f.pending = held
	}
	if len(f.outq) == 0 {
		return watch.Event{}, 0, false, true
	}
	return f.outq[0], f.delivered + 1, true, true
}

// markDelivered records that event seq, the head of the queue, reached the reflector.
// It goes by sequence number, not by watch instance: the reflector may already be
// opening the next watch, and the event must not be delivered twice. (A relist cleared
// the queue if the head is no longer seq.)
func (f *feed) markDelivered(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.outq) == 0 || f.delivered+1 != seq {
		return
	}
	f.outq[0] = watch.Event{}
	f.outq = f.outq[1:]
	f.delivered++
}

// retireActive stops the current watch instance and waits for its goroutine to finish,
// so that an event it handed over is accounted for before another instance reads the
// queue. The reflector has normally stopped it already.
func (f *feed) retireActive() {
	f.mu.Lock()
	prev := f.active
	f.active = nil
	f.mu.Unlock()
	if prev != nil {
		prev.Stop()
		<-prev.done
	}
}

func (f *feed) wakeLocked() {
	if f.active != nil {
		select {
		case f.active.wake <- struct{}{}:
		default:
		}
	}
}

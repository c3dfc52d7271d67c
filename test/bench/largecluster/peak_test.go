package largecluster

import (
	"context"
	"sync"
	"testing"
	"time"
)

// heapPeak follows the heap goal of every controller process (go_memstats_next_gc_bytes,
// twice the live heap the last collection left at GOGC 100) while a run lasts, and saves
// a heap profile of a process each time its goal passes its highest so far by 5 %
// (<run>-<process>.heap-peak; the last one saved is the live heap behind the highest
// goal, which the peak RSS follows). The settled and Ready profiles miss that moment.
// Only with KSHARD_BENCH_PROFILE_DIR.
type heapPeak struct {
	stop func()
	done chan struct{}
	mu   sync.Mutex
	seen map[*proc]peakSample
}

// peakSample is a process's highest heap goal and when it was seen.
type peakSample struct {
	goal  float64
	at    time.Duration
	saved float64 // the goal when the last heap-peak profile was saved
}

// watchHeapPeak starts following procs (those with a pprof URL and metrics) from start.
func watchHeapPeak(b *testing.B, run string, procs []*proc, start time.Time) *heapPeak {
	ctx, cancel := context.WithCancel(context.Background())
	h := &heapPeak{stop: cancel, done: make(chan struct{}), seen: map[*proc]peakSample{}}
	if profileDir == "" {
		close(h.done)
		return h
	}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			var wg sync.WaitGroup
			for _, p := range procs {
				if p.pprofURL == "" || p.metrics == nil {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.sample(ctx, b, run, p, time.Since(start))
				}()
			}
			wg.Wait()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapPeak) sample(ctx context.Context, b *testing.B, run string, p *proc, at time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := p.metrics(sctx)
	if err != nil {
		return
	}
	goal := m.Value("go_memstats_next_gc_bytes")
	h.mu.Lock()
	s := h.seen[p]
	if goal <= s.goal {
		h.mu.Unlock()
		return
	}
	s.goal, s.at = goal, at
	save := goal > 1.05*s.saved
	if save {
		s.saved = goal
	}
	h.seen[p] = s
	h.mu.Unlock()
	if save {
		saveProfile(b, run, p, "heap-peak", "/debug/pprof/heap", 30*time.Second)
	}
}

// finish stops following and logs each process's highest goal.
func (h *heapPeak) finish(b *testing.B, procs []*proc) {
	h.stop()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range procs {
		if s, ok := h.seen[p]; ok {
			b.Logf("heap goal of %s: highest %.0f MiB, %s after the start", p.name, s.goal/mib, s.at.Round(100*time.Millisecond))
		}
	}
}

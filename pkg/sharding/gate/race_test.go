package gate

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestReleaseUnderLoad races Release against busy workers and producers on two queues.
// It checks the handoff invariant directly: when Release returns, no key of the
// partition is being worked, and no worker starts one afterwards, while the partition
// that stays acquired keeps being worked.
func TestReleaseUnderLoad(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		rounds  int
		work    time.Duration
	}{
		{name: "short work, many rounds", workers: 4, rounds: 40, work: 0},
		{name: "slow work", workers: 3, rounds: 10, work: 2 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for round := range tt.rounds {
				releaseUnderLoad(t, round, tt.workers, tt.work)
			}
		})
	}
}

func releaseUnderLoad(t *testing.T, round, workers int, work time.Duration) {
	const released, kept = 1, 2
	g := New(testPartition)
	g.Acquire(released)
	g.Acquire(kept)
	queues := []*Queue{g.NewQueue(QueueConfig{Name: "a"}), g.NewQueue(QueueConfig{Name: "b"})}

	var (
		running     atomic.Int32 // workers inside a key of the released partition
		after       atomic.Bool  // set once Release has returned
		violations  atomic.Int32
		keptStarted atomic.Int32
		wg          sync.WaitGroup
	)
	for _, q := range queues {
		for range workers {
			wg.Go(func() {
				for {
					k, shutdown := q.Get()
					if shutdown {
						return
					}
					if p, _ := testPartition(k); p == released {
						if after.Load() {
							violations.Add(1)
						}
						running.Add(1)
						time.Sleep(work)
						running.Add(-1)
					} else {
						keptStarted.Add(1)
					}
					if len(k)%2 == 0 {
						q.AddRateLimited(k) // retries race with Release too
					} else {
						q.Forget(k)
					}
					q.Done(k)
				}
			})
		}
	}
	stop := make(chan struct{})
	var producers sync.WaitGroup
	for i, q := range queues {
		producers.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				q.Add("ns" + strconv.Itoa(released) + "/k" + strconv.Itoa(n%16))
				q.AddAfter("ns"+strconv.Itoa(kept)+"/k"+strconv.Itoa(n%16), time.Duration(i)*time.Millisecond)
				if n%8 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
			}
		})
	}

	time.Sleep(time.Duration(1+round%3) * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := g.Release(ctx, released)
	cancel()
	if err != nil {
		t.Fatalf("round %d: Release: %v", round, err)
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("round %d: %d workers still inside a released key when Release returned", round, n)
	}
	if n := g.Stats().InFlightPartitions[released]; n != 0 {
		t.Fatalf("round %d: InFlightPartition = %d after Release", round, n)
	}
	after.Store(true)
	keptBefore := keptStarted.Load()
	deadline := time.Now().Add(5 * time.Second)
	for keptStarted.Load() < keptBefore+10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	producers.Wait()
	for _, q := range queues {
		q.ShutDown()
	}
	wg.Wait()

	if n := violations.Load(); n != 0 {
		t.Fatalf("round %d: %d keys of the released partition started after Release returned", round, n)
	}
	if keptStarted.Load() < keptBefore+10 {
		t.Fatalf("round %d: kept partition stalled after Release", round)
	}
	for _, q := range queues {
		for _, k := range []string{"ns1/k1", "ns1/k10"} {
			if n := q.NumRequeues(k); n != 0 {
				t.Fatalf("round %d: queue %s: released key %s kept rate-limiter state (%d)", round, q.Name(), k, n)
			}
		}
	}
}

// TestFenceUnderLoad fences busy workers: after WaitIdle returns, nothing may start until
// Unfence, and work resumes afterwards.
func TestFenceUnderLoad(t *testing.T) {
	g, q := newTestQueue(t, 1)
	var (
		fenced     atomic.Bool // true between WaitIdle returning and Unfence
		violations atomic.Int32
		started    atomic.Int32
		wg         sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for {
				k, shutdown := q.Get()
				if shutdown {
					return
				}
				if fenced.Load() {
					violations.Add(1)
				}
				started.Add(1)
				time.Sleep(200 * time.Microsecond)
				q.Done(k)
				q.Add(k) // keep the queue full
			}
		})
	}
	for i := range 32 {
		q.Add("ns1/k" + strconv.Itoa(i))
	}
	for range 5 {
		time.Sleep(5 * time.Millisecond)
		fence(g)
		if err := waitIdle(context.Background(), g); err != nil {
			t.Fatalf("WaitIdle: %v", err)
		}
		fenced.Store(true)
		n := started.Load()
		time.Sleep(10 * time.Millisecond)
		if started.Load() != n {
			t.Fatalf("work started while fenced")
		}
		fenced.Store(false)
		unfence(g)
	}
	deadline := time.Now().Add(5 * time.Second)
	n := started.Load()
	for started.Load() == n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	q.ShutDown()
	wg.Wait()
	if violations.Load() != 0 {
		t.Fatalf("%d keys started while fenced", violations.Load())
	}
	if started.Load() == n {
		t.Fatalf("no work after the last Unfence")
	}
}

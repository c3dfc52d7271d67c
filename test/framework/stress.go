package framework

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The shard-set helpers of the stress tests (test/batchstress, test/workloadstress,
// test/endpointstress), which change kshard's membership while a workload churns.

// ScaleIn scales a shard in: SIGTERM, a clean exit, every partition owned again.
func (k *KShard) ScaleIn(t testing.TB, name string) {
	t.Helper()
	s := k.Shards[name]
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exited, err := s.Wait(90 * time.Second); !exited || err != nil {
		t.Errorf("%s after SIGTERM: exited %v, %v", name, exited, err)
	}
	k.WaitAllOwned(t, 90*time.Second)
}

// LogOwners logs how many of nss each shard owns.
func (k *KShard) LogOwners(t testing.TB, nss []string, when string) {
	t.Helper()
	by := map[string]int{}
	for _, ns := range nss {
		o, err := k.NamespaceOwner(context.Background(), ns)
		if err != nil {
			t.Logf("owner of %s: %v", ns, err)
			return
		}
		by[o.Shard]++
	}
	var parts []string
	for s, n := range by {
		parts = append(parts, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(parts)
	t.Logf("namespaces per shard %s: %s", when, strings.Join(parts, ", "))
}

// SuperviseCoordinators starts two coordinators and restarts one that exits at its
// address (as its Deployment would: on a loaded machine the leader can miss its Lease
// renewal and then exits on purpose). stop ends the supervision and logs the restarts.
func (k *KShard) SuperviseCoordinators(t testing.TB) (stop func()) {
	coordinators := []*Coordinator{k.StartCoordinator("coordinator-a"), k.StartCoordinator("coordinator-b")}
	quit := make(chan struct{})
	restarts := make(chan int)
	go func() {
		n := 0
		defer func() { restarts <- n }()
		for {
			select {
			case <-quit:
				return
			case <-time.After(time.Second):
			}
			for i, c := range coordinators {
				if c.Exited() {
					n++
					t.Logf("%s exited (see its log); restarting it at %s", c.Name, c.GRPCAddr)
					coordinators[i] = k.StartCoordinatorAt(fmt.Sprintf("%s-r%d", c.Name, n), c.GRPCAddr)
				}
			}
		}
	}()
	return func() {
		close(quit)
		if n := <-restarts; n > 0 {
			t.Logf("coordinator restarts after an exit: %d", n)
		}
	}
}

// WatchStalls measures the longest the test process went without running a 1s ticker (a
// stall of the shared machine freezes the control plane and kshard alike); report logs it.
func WatchStalls(t testing.TB) (report func()) {
	quit := make(chan struct{})
	var mu sync.Mutex
	var longest time.Duration
	var at time.Time
	go func() {
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-time.After(time.Second):
				mu.Lock()
				if d := now.Sub(last) - time.Second; d > longest {
					longest, at = d, last
				}
				mu.Unlock()
				last = now
			}
		}
	}()
	t.Cleanup(func() { close(quit) })
	return func() {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("longest stall of the test process: %s (from %s)", longest.Round(time.Millisecond), at.Format("15:04:05"))
	}
}

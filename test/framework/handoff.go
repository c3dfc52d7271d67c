package framework

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// spares numbers the spare shards of a test binary, so that two never share a name.
var spares atomic.Int32

// JoinSpare starts one more shard of k and waits until the assignment has converged with
// every live shard owning partitions and the new shard is Ready. A handoff test calls it
// before it stops a namespace's owner, so that the set keeps its size for the tests after
// it (the spare lives as long as k, not as long as t).
func (k *KShard) JoinSpare(t testing.TB) *Shard {
	t.Helper()
	s := k.StartShard(fmt.Sprintf("shard-spare-%d-%d", spares.Add(1), time.Now().UnixNano()%1e4))
	k.WaitAllOwned(t, 90*time.Second)
	WaitHTTP(t, s.HTTPURL+"/readyz", 60*time.Second)
	return s
}

// WaitMoved waits until ns is owned (state "owned") by a live shard of k other than old,
// and returns that shard and when the test saw it: the handoff tests' end of a move.
func (k *KShard) WaitMoved(t testing.TB, ns string, old *Shard, timeout time.Duration) (*Shard, time.Time) {
	t.Helper()
	var to *Shard
	var at time.Time
	Eventually(t, timeout, "namespace "+ns+" owned by a live shard other than "+old.Name, func(ctx context.Context) (bool, error) {
		o, err := k.NamespaceOwner(ctx, ns)
		if err != nil {
			return false, err
		}
		k.mu.Lock()
		s := k.Shards[o.Shard]
		k.mu.Unlock()
		if o.Shard == old.Name || o.State != "owned" || s == nil || s.Exited() {
			return false, fmt.Errorf("owner %+v", o)
		}
		to, at = s, time.Now()
		return true, nil
	})
	return to, at
}

// WaitOwnsNothing waits until the leading coordinator's converged assignment gives the
// (dead) shard name no partition.
func (k *KShard) WaitOwnsNothing(t *testing.T, name string) {
	t.Helper()
	Eventually(t, 90*time.Second, name+"'s partitions owned by live shards", func(ctx context.Context) (bool, error) {
		l, err := k.Leader(ctx)
		if err != nil {
			return false, err
		}
		a, err := l.Assignments(ctx)
		if err != nil {
			return false, err
		}
		for _, s := range a.Shards {
			if s.Shard == name && s.Partitions > 0 {
				return false, fmt.Errorf("%s still owns %d partitions", name, s.Partitions)
			}
		}
		if !a.Converged {
			return false, fmt.Errorf("not converged: %v", a.ByState)
		}
		return true, nil
	})
}

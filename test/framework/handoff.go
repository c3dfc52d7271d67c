package framework

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// spares numbers the spare shards of a test binary, so that two never share a name.
var spares atomic.Int32

// JoinSpare starts one more shard of k and waits until the assignment has converged with
// every live shard owning partitions and the new shard is Ready. A handoff test calls it
// before it stops a namespace's owner, so that the set keeps its size for the tests after
// it (the spare lives as long as k, not as long as t).
func (k *KShard) JoinSpare(t testing.TB) *Shard {
	t.Helper()
	return k.JoinSpares(t, 1)[0]
}

// JoinSpares starts n more shards of k at once and waits, as JoinSpare does, until the
// assignment has converged with each of them owning partitions and Ready: one
// rebalance for all of them (a join moves partitions from every shard to the new one).
func (k *KShard) JoinSpares(t testing.TB, n int) []*Shard {
	t.Helper()
	out := make([]*Shard, n)
	for i := range out {
		out[i] = k.StartShard(fmt.Sprintf("shard-spare-%d-%d", spares.Add(1), time.Now().UnixNano()%1e4))
	}
	k.WaitAllOwned(t, 90*time.Second)
	for _, s := range out {
		WaitHTTP(t, s.HTTPURL+"/readyz", 60*time.Second)
	}
	return out
}

// NamespaceOn creates a namespace for t, as Framework.Namespace does (named after the
// test, labelled, deleted when it ends), whose partition s owns: a handoff test that
// stops s then moves its own namespace for certain, while a shard it does not stop
// keeps it. The name is drawn again until the leading coordinator maps it to a
// partition s owns (state "owned"); with s one of n shards that takes n draws on
// average. Only a join (which moves partitions from every shard to the new one) or a
// stop of s moves it afterwards: a stop of another shard moves only that shard's
// partitions.
func (k *KShard) NamespaceOn(t testing.TB, s *Shard, labels map[string]string) *corev1.Namespace {
	t.Helper()
	const draws = 500
	var last string
	for range draws {
		name := namePrefix(t.Name()) + rand.String(5)
		o, err := k.NamespaceOwner(context.Background(), name)
		if err != nil {
			t.Fatalf("owner of namespace %s: %v", name, err)
		}
		if o.Shard != s.Name || o.State != "owned" {
			last = fmt.Sprintf("%s in partition %d: %s %s", name, o.Partition, o.Shard, o.State)
			continue
		}
		ns, err := k.f.createNamespace(t, metav1.ObjectMeta{Name: name}, labels)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			t.Fatalf("creating namespace: %v", err)
		}
		return ns
	}
	t.Fatalf("no namespace name of %d drawn falls in a partition %s owns (last: %s)", draws, s.Name, last)
	return nil
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

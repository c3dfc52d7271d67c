package namespace

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/test/framework"
)

var spareShards atomic.Int32

// TestDeletionFinishesAfterHandoff and TestDeletionFinishesAfterShardKill: a namespace
// is deleted while a held pod keeps its other content (pods go first); its owner is then
// taken away, gracefully (SIGTERM: its partitions are handed over) or not (SIGKILL: the
// coordinator gives them away once its session lapses). When the pod is released, the
// new owner must delete the rest and finish the namespace, past the server-side fence
// that lets only the namespace's owner write there.
func TestDeletionFinishesAfterHandoff(t *testing.T) {
	testDeletionFinishesOnNewOwner(t, func(t *testing.T, owner *framework.Shard) {
		if err := owner.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDeletionFinishesAfterShardKill(t *testing.T) {
	testDeletionFinishesOnNewOwner(t, func(t *testing.T, owner *framework.Shard) { owner.Kill() })
}

func testDeletionFinishesOnNewOwner(t *testing.T, stop func(*testing.T, *framework.Shard)) {
	c := framework.RunningControllers(t)
	if c.KShard == nil {
		t.Skip("the cluster's kube-controller-manager runs the namespace controller: no shards to move a namespace between")
	}
	k := c.KShard
	// A spare shard first, so that the set keeps its size when the owner goes.
	spare := k.StartShard(fmt.Sprintf("shard-spare-%d-%d", spareShards.Add(1), time.Now().UnixNano()%1e4))
	k.WaitAllOwned(t, 90*time.Second)
	framework.WaitHTTP(t, spare.HTTPURL+"/readyz", 60*time.Second)

	e := newEnv(t)
	e.content("pod")
	owner := k.StableOwner(t, e.ns)
	e.deleteNamespace()
	framework.Eventually(t, 60*time.Second, "the held pod being deleted by "+owner.Name, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, "pod", metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, err
	})
	if got := e.names(configMaps); !slices.Equal(got, []string{"cm-a", "cm-b"}) {
		t.Fatalf("ConfigMaps %v while the pod remains, want both", got)
	}
	at := time.Now()
	stop(t, owner)
	to := waitNewOwner(t, k, e.ns, owner)
	t.Logf("namespace %s moved %s → %s in %s", e.ns, owner.Name, to, time.Since(at).Round(100*time.Millisecond))
	e.release(pods, "pod")
	e.waitGone(90 * time.Second)
	t.Logf("namespace gone %s after its owner was stopped", time.Since(at).Round(100*time.Millisecond))
}

// waitNewOwner waits until ns is owned by a live shard other than old.
func waitNewOwner(t *testing.T, k *framework.KShard, ns string, old *framework.Shard) string {
	t.Helper()
	var to string
	framework.Eventually(t, 90*time.Second, "namespace "+ns+" owned by a shard other than "+old.Name, func(ctx context.Context) (bool, error) {
		o, err := k.NamespaceOwner(ctx, ns)
		if err != nil {
			return false, err
		}
		if s := k.Shards[o.Shard]; o.Shard == old.Name || o.State != "owned" || s == nil || s.Exited() {
			return false, fmt.Errorf("owner %+v", o)
		}
		to = o.Shard
		return true, nil
	})
	return to
}

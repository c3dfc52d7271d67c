package contract

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
	"github.com/kshard/kshard/test/integration/contract/stamp"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	namespaces = 24
	partitions = 64
	// stampInterval is how often the controller stamps each ConfigMap again; a shard that
	// kept working a namespace it lost would overwrite the new owner's stamp within it.
	stampInterval = 300 * time.Millisecond
	// quiet is how long the stamps must stay with the owners once they match.
	quiet = 10 * stampInterval
)

// TestControllerFollowsHandoff runs the stamp controller in one shard, then two (a
// scale-out moves partitions), then one again (a graceful scale-in moves them back), and
// checks after each step that every ConfigMap is stamped by the owner of its namespace's
// partition, and stays so.
func TestControllerFollowsHandoff(t *testing.T) {
	f := framework.Get(t)
	bin := framework.BuildShard(t, "github.com/kshard/kshard/test/integration/contract/cmd/contract-shard")
	pmap, err := partition.NewMap(partitions)
	if err != nil {
		t.Fatal(err)
	}

	// The objects exist before any shard: the controller has no event handler, so only
	// the shard's enqueue on acquire can hand them to it.
	var nss []string
	for i := 0; i < namespaces; i++ {
		ns := f.Namespace(t, nil).Name
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "subject", Labels: map[string]string{stamp.Label: "true"}}}
		if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}

	k := f.NewKShard(t, framework.KShardOptions{
		Partitions: partitions, ShardBinary: bin,
		ShardArgs: []string{"--controllers=" + stamp.Name, "--stamp-interval=" + stampInterval.String()},
	})
	k.GuardAlone(t)
	k.StartCoordinator("coordinator-a")

	// stampsFollowOwners waits until every ConfigMap is stamped by its namespace's owner
	// (one of want), then checks that the stamps stay for quiet.
	stampsFollowOwners := func(step string, want ...string) {
		t.Helper()
		var owners map[uint32]string
		framework.Eventually(t, 90*time.Second, step+": every ConfigMap stamped by its namespace's owner", func(ctx context.Context) (bool, error) {
			l, err := k.Leader(ctx)
			if err != nil {
				return false, err
			}
			a, err := l.Assignments(ctx)
			if err != nil {
				return false, err
			}
			if !a.Converged {
				return false, fmt.Errorf("assignment not converged: %v", a.ByState)
			}
			owners = framework.Owners(a)
			seen := map[string]bool{}
			for _, o := range owners {
				seen[o] = true
			}
			if len(seen) != len(want) {
				return false, fmt.Errorf("owners %v, want exactly %v", seen, want)
			}
			for _, w := range want {
				if !seen[w] {
					return false, fmt.Errorf("%s owns no partition yet (owners %v)", w, seen)
				}
			}
			return stampsMatch(ctx, f, pmap, nss, owners)
		})
		deadline := time.Now().Add(quiet)
		for time.Now().Before(deadline) {
			if ok, err := stampsMatch(context.Background(), f, pmap, nss, owners); !ok {
				t.Fatalf("%s: a stamp left its owner after it matched: %v (the previous owner still works a namespace it lost)", step, err)
			}
			time.Sleep(stampInterval / 2)
		}
	}

	k.StartShard("shard-a")
	stampsFollowOwners("one shard", "shard-a")

	k.StartShard("shard-b")
	stampsFollowOwners("scale-out to two shards", "shard-a", "shard-b")

	if err := k.Shards["shard-b"].Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exited, err := k.Shards["shard-b"].Wait(60 * time.Second); !exited {
		t.Fatalf("shard-b did not exit after SIGTERM: %v", err)
	}
	stampsFollowOwners("graceful scale-in to one shard", "shard-a")
}

// stampsMatch reports whether every namespace's ConfigMap carries its owner's stamp.
func stampsMatch(ctx context.Context, f *framework.Framework, pmap partition.Map, nss []string, owners map[uint32]string) (bool, error) {
	for _, ns := range nss {
		cm, err := f.Client.CoreV1().ConfigMaps(ns).Get(ctx, "subject", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p := uint32(pmap.For(ns))
		if got, want := cm.Annotations[stamp.Annotation], owners[p]; got != want {
			return false, fmt.Errorf("namespace %s (partition %d): stamped by %q, owner %q", ns, p, got, want)
		}
	}
	return true, nil
}

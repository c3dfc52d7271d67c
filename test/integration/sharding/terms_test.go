package sharding

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kshard/kshard/pkg/sharding/leader"
	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/test/framework"
)

// TestTermsOutliveTheirRecord: terms that outlive their record never stop kshard. One
// set of coordinators and shards (fence on) goes through four faults, and after each every
// test namespace's partition must be granted to a live shard by the owner Roles and be
// worked (a Deployment's scale change acted on) within the bound:
//
//   - at start, an owner Role of a shard that does not exist grants one namespace's
//     partition with a forged term near 2³², and another a stale term above the recorded
//     one (the term Lease says 500: an earlier election Lease was deleted);
//   - while leading, a forged owner Role with a forged term grants a namespace's
//     partition (written as the coordinators' identity: the record guard refuses
//     everybody else);
//   - the term Lease is deleted while the shards run, then the leader is killed: its
//     successor's election Lease count is far below the terms on the owner Roles and in
//     the shards' epochs;
//   - everything is uninstalled (processes gone, the election and term Leases deleted with
//     the release namespace) and installed again with the namespaces kept.
//
// Before the term fixes each of them wedged the leader: it found a record of a newer
// term, refused to lead (ErrDeposed) and held the Lease without serving.
func TestTermsOutliveTheirRecord(t *testing.T) {
	f := framework.Get(t)
	ctx := context.Background()
	k := f.NewKShard(t, framework.KShardOptions{PodIdentity: true, Fence: true, SessionTTL: ttl, Margin: margin})
	fence := k.FenceParams()
	leases := f.Client.CoordinationV1().Leases("kube-system")
	termLease := leader.TermLeaseName(k.LeaseName())

	nss, uids := webNamespaces(t, f, 8)
	// The record guard lets only the coordinators' identity change the owner record: the
	// forger (a deposed leader's late write, a restored backup) writes as it.
	forger, err := kubernetes.NewForConfig(k.CoordinatorRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// forge writes an owner Role of owner granting ns's partition, at term.
	forge := func(ns, owner, term string) {
		t.Helper()
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: ownerrecord.OwnerRoleName(owner), Namespace: fence.Namespace,
				Labels: map[string]string{ownerrecord.RecordLabel: "true"}, Annotations: map[string]string{ownerrecord.TermAnnotation: term}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{ownerrecord.PartitionsGroup}, Resources: []string{ownerrecord.PartitionsResource},
				Verbs: []string{ownerrecord.OwnVerb}, ResourceNames: []string{k.PartitionOf(ns)}}},
		}
		roles := forger.RbacV1().Roles(fence.Namespace)
		_, err := roles.Create(ctx, role, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var got *rbacv1.Role
			if got, err = roles.Get(ctx, role.Name, metav1.GetOptions{}); err == nil {
				role.ResourceVersion = got.ResourceVersion
				_, err = roles.Update(ctx, role, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			t.Fatalf("forging the owner record of %s: %v", ns, err)
		}
	}
	replicas := int32(1)
	// worked waits until a leader of a term above the last one serves every partition to
	// the live shards, then until a scale change in every namespace was acted on, all
	// within bound of since, and checks that every namespace is owned by a live shard. It
	// returns the leader's term. (Shards keep working while no coordinator leads, until
	// their leases run out: only a leader that serves shows that kshard goes on.)
	worked := func(t *testing.T, step string, since time.Time, after uint64) uint64 {
		t.Helper()
		var (
			l    *framework.Coordinator
			term float64
		)
		framework.Eventually(t, bound-time.Since(since), step+": a leader above term "+strconv.FormatUint(after, 10)+" serves the live shards", func(ctx context.Context) (bool, error) {
			var err error
			if l, err = k.Leader(ctx); err != nil {
				return false, err
			}
			if term, err = framework.Metric(ctx, l.HTTPURL, "kshard_coordinator_term"); err != nil || uint64(term) <= after {
				return false, fmt.Errorf("leader %s at term %v (%v)", l.Name, term, err)
			}
			a, err := l.Assignments(ctx)
			if err != nil {
				return false, err
			}
			live, owners := k.Live(), framework.Owners(a)
			for _, s := range owners {
				if !live[s] {
					return false, fmt.Errorf("partitions owned by %s, not a live shard", s)
				}
			}
			if len(owners) != a.PartitionCount {
				return false, fmt.Errorf("%d of %d partitions owned", len(owners), a.PartitionCount)
			}
			return true, nil
		})
		replicas++
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
		var wg sync.WaitGroup
		for i, ns := range nss {
			if _, err := f.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() { defer wg.Done(); waitReplicas(t, f.Client, ns, uids[i], replicas, bound-time.Since(since)) }()
		}
		wg.Wait()
		if t.Failed() {
			t.Fatalf("%s: not every namespace was worked within %s", step, bound)
		}
		live := k.Live()
		for _, ns := range nss {
			owners, err := framework.RecordOwners(ctx, f.Client, fence.Namespace, k.PartitionOf(ns))
			if err != nil {
				t.Fatal(err)
			}
			if len(owners) != 1 || !live[owners[0]] {
				t.Fatalf("%s: the owner Roles grant namespace %s's partition to %v, not to one live shard (%v)", step, ns, owners, live)
			}
		}
		t.Logf("%s: every namespace owned by a live shard and worked %s after the fault; leader %s at term %v",
			step, time.Since(since).Round(time.Millisecond), l.Name, term)
		return uint64(term)
	}

	// An earlier election Lease was deleted: the term record is far ahead of its count.
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: termLease,
		Annotations: map[string]string{leader.TermAnnotation: "500"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = leases.Delete(context.Background(), termLease, metav1.DeleteOptions{})
		_ = leases.Delete(context.Background(), k.LeaseName(), metav1.DeleteOptions{})
	})
	forge(nss[0], "mallory", "4294967295")
	forge(nss[1], "shard-1", "1000")

	var term uint64
	ok := t.Run("forged and stale terms at start", func(t *testing.T) {
		start := time.Now()
		k.StartCoordinator("coordinator-a")
		k.StartCoordinator("coordinator-b")
		k.StartShard("shard-1")
		k.StartShard("shard-2")
		term = worked(t, "forged and stale terms at start", start, 1000) // above the stale term on nss[1]
	})
	if !ok {
		t.FailNow()
	}

	t.Run("forged term while leading", func(t *testing.T) {
		at := time.Now()
		forge(nss[2], "mallory", "4294967295")
		framework.Eventually(t, bound, "the forged owner Role removed", func(ctx context.Context) (bool, error) {
			_, err := f.Client.RbacV1().Roles(fence.Namespace).Get(ctx, ownerrecord.OwnerRoleName("mallory"), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		worked(t, "forged term while leading", at, term-1)
	})

	t.Run("term Lease deleted while the shards run", func(t *testing.T) {
		if err := leases.Delete(ctx, termLease, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		l, err := k.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		l.Kill()
		// Above the term on the owner Roles and in the shards' epochs.
		term = worked(t, "term Lease deleted, then the leader killed", at, term)
	})

	t.Run("uninstall and install again with the namespaces kept", func(t *testing.T) {
		k.KillAll()
		for _, name := range []string{k.LeaseName(), termLease} {
			if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		at := time.Now()
		k.StartCoordinator("coordinator-c")
		k.StartCoordinator("coordinator-d")
		k.StartShard("shard-3")
		k.StartShard("shard-4")
		worked(t, "installed again", at, term) // above the term found on the owner Roles
	})
}

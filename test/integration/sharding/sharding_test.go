// Package sharding tests the sharding core end to end: real coordinator and shard
// processes (mutual TLS between them) against the local control plane, with the
// test-only kshard-audit controller recording every reconcile. After every membership or
// fault step the audit logs must show that no two shards reconciled one namespace at
// overlapping times, and that every namespace is reconciled by a live shard again.
package sharding

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kshard/kshard/pkg/controllers/testing/audit"
	auditlog "github.com/kshard/kshard/test/audit"
	"github.com/kshard/kshard/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

const (
	namespaces = 200
	ttl        = 9 * time.Second // the framework\'s default: above its failover budget (8.2s)
	margin     = time.Second
	// bound is how soon after a step every namespace must be reconciled by a live shard
	// again: TTL + margin (a dead owner's lease) + debounce + warm-up and slack.
	bound = 40 * time.Second
)

type harness struct {
	t     *testing.T
	k     *framework.KShard
	audit string
	nss   []string
	n     int
}

func createNamespaces(t *testing.T, f *framework.Framework) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		out []string
		wg  sync.WaitGroup
		sem = make(chan struct{}, 16)
	)
	for i := 0; i < namespaces; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ns := f.Namespace(t, nil).Name
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{audit.Label: "true"}}}
			if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating configmap: %v", err)
			}
			mu.Lock()
			out = append(out, ns)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Strings(out)
	return out
}

func (h *harness) startShard() *framework.Shard {
	h.n++
	return h.k.StartShard(fmt.Sprintf("shard-%d", h.n))
}

// converge waits until the leader reports every partition owned by exactly the live
// shards, with nothing in flight.
func (h *harness) converge(what string) *framework.Coordinator {
	h.t.Helper()
	var leader *framework.Coordinator
	framework.Eventually(h.t, 90*time.Second, what+": assignment converged on the live shards", func(ctx context.Context) (bool, error) {
		l, err := h.k.Leader(ctx)
		if err != nil {
			return false, err
		}
		a, err := l.Assignments(ctx)
		if err != nil {
			return false, err
		}
		live := h.k.Live()
		if !a.Converged {
			return false, fmt.Errorf("not converged: %+v", a.ByState)
		}
		owners := map[string]bool{}
		for _, s := range a.Shards {
			if s.Partitions > 0 {
				owners[s.Shard] = true
			}
			if s.Partitions > 0 && !live[s.Shard] {
				return false, fmt.Errorf("dead shard %s still owns %d partitions", s.Shard, s.Partitions)
			}
		}
		if len(owners) != len(live) {
			return false, fmt.Errorf("owners %v, live %v", owners, live)
		}
		leader = l
		return true, nil
	})
	return leader
}

// check asserts the invariants on the audit logs: no overlap ever, and every namespace
// reconciled by a live shard after since. It returns how long after since the last
// namespace was first reconciled.
func (h *harness) check(step string, since time.Time) time.Duration {
	h.t.Helper()
	live := h.k.Live()
	var worst time.Duration
	framework.Eventually(h.t, bound, step+": every namespace reconciled by a live shard", func(context.Context) (bool, error) {
		recs, err := auditlog.ReadDir(h.audit)
		if err != nil {
			return false, err
		}
		first := auditlog.FirstReconcileAfter(recs, since, live)
		worst = 0
		var missing []string
		for _, ns := range h.nss {
			at, ok := first[ns]
			if !ok {
				missing = append(missing, ns)
				continue
			}
			worst = max(worst, at.Sub(since))
		}
		if len(missing) > 0 {
			return false, fmt.Errorf("%d namespaces not reconciled since %s, e.g. %v", len(missing), since.Format(time.RFC3339Nano), missing[:min(3, len(missing))])
		}
		return true, nil
	})
	recs, err := auditlog.ReadDir(h.audit)
	if err != nil {
		h.t.Fatal(err)
	}
	if ov := auditlog.Overlaps(recs); len(ov) > 0 {
		for _, o := range ov[:min(10, len(ov))] {
			h.t.Errorf("%s: %s", step, o)
		}
		h.t.Fatalf("%s: %d overlapping reconciles by two shards (of %d records)", step, len(ov), len(recs))
	}
	h.t.Logf("%s: %d reconciles audited, no overlap; every namespace reconciled by a live shard within %s", step, len(recs), worst.Round(time.Millisecond))
	return worst
}

func TestShardsShareNamespacesWithoutOverlap(t *testing.T) {
	f := framework.Get(t)
	auditDir := framework.AuditDir(t)
	h := &harness{t: t, audit: auditDir}
	h.k = f.NewKShard(t, framework.KShardOptions{
		SessionTTL: ttl, Margin: margin, Audit: true,
		ShardArgs: []string{"--controllers", "*,kshard-audit", "--audit-resync-interval", "1s", "--audit-work-duration", "10ms"},
	})
	// Each shard appends to its own file; the checker reads them all.
	h.k.SetShardArgs(func(name string) []string {
		return []string{"--audit-log-file", filepath.Join(auditDir, name+".jsonl")}
	})
	h.nss = createNamespaces(t, f)

	h.k.StartCoordinator("coordinator-a")
	h.k.StartCoordinator("coordinator-b")
	for i := 0; i < 3; i++ {
		h.startShard()
	}
	start := time.Now()
	h.converge("3 shards")
	h.check("3 shards", start)

	t.Run("scale out to 5", func(t *testing.T) {
		at := time.Now()
		h.startShard()
		h.startShard()
		h.converge("5 shards")
		h.check("scale out to 5", at)
	})

	t.Run("graceful scale in to 2", func(t *testing.T) {
		at := time.Now()
		var leaving []*framework.Shard
		for _, name := range []string{"shard-1", "shard-2", "shard-3"} {
			s := h.k.Shards[name]
			if err := s.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			leaving = append(leaving, s)
		}
		for _, s := range leaving {
			exited, err := s.Wait(90 * time.Second)
			if !exited {
				t.Fatalf("%s did not exit within 90s of SIGTERM", s.Name)
			}
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM; want a clean exit", s.Name, err)
			}
		}
		h.converge("2 shards")
		h.check("graceful scale in to 2", at)
	})

	t.Run("SIGKILL a shard", func(t *testing.T) {
		victim := h.k.Shards["shard-4"]
		replacement := h.startShard()
		h.converge("replacement joined")
		at := time.Now()
		if err := victim.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = victim.Wait(10 * time.Second)
		h.converge("after SIGKILL")
		took := h.check("SIGKILL a shard", at)
		t.Logf("namespaces of the killed shard were reconciled elsewhere within %s (TTL %s + margin %s)", took.Round(time.Millisecond), ttl, margin)
		_ = replacement
	})

	t.Run("kill the coordinator leader", func(t *testing.T) {
		ctx := context.Background()
		old := h.converge("before leader kill")
		before, err := old.Assignments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		if err := old.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = old.Wait(10 * time.Second)
		leader := h.converge("new leader")
		if leader == old {
			t.Fatal("the killed coordinator still leads")
		}
		after, err := leader.Assignments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b, a := framework.Owners(before), framework.Owners(after); !equalOwners(b, a) {
			t.Errorf("the leader change moved partitions: %d owners before, %d after, %d differ", len(b), len(a), diffOwners(b, a))
		}
		moves, err := framework.Metric(ctx, leader.HTTPURL, "kshard_coordinator_moves_started_total")
		if err != nil {
			t.Fatal(err)
		}
		if moves != 0 {
			t.Errorf("new leader started %v moves; a leader change must move nothing", moves)
		}
		// Load reports (issue 31, docs/design-placement.md §1.4): a new leader has every
		// shard's load from the first heartbeat after its Welcome, and the shards, which
		// have held namespaces for longer than the meter's minimum age, report entries.
		framework.Eventually(t, 30*time.Second, "every shard's load reported to the new leader", func(ctx context.Context) (bool, error) {
			a, err := leader.Assignments(ctx)
			if err != nil {
				return false, err
			}
			var missing []string
			entries := 0
			for _, s := range a.Shards {
				if s.Connected && s.LoadReports == 0 {
					missing = append(missing, s.Shard)
				}
				entries += s.LoadEntries
			}
			switch {
			case len(missing) > 0:
				return false, fmt.Errorf("no load report from %v", missing)
			case entries == 0:
				return false, fmt.Errorf("every load report empty, though the shards hold namespaces")
			}
			return true, nil
		})
		h.check("kill the coordinator leader", at)
		// A replacement at the dead replica's address (a restarted pod): the shards know
		// only the addresses they were started with, so later steps have two reachable
		// coordinators again.
		h.k.StartCoordinatorAt("coordinator-c", old.GRPCAddr)
	})

	// The Lease's transition count starts over when the Lease is deleted; the term must not
	// go backwards with it. Before the term record, the next leader got term 1, refused every
	// shard holding an epoch of the terms before, stepped down and exited, in a loop.
	t.Run("delete the coordinator Lease and kill the leader", func(t *testing.T) {
		ctx := context.Background()
		old := h.converge("before the Lease is deleted")
		before, err := old.Assignments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		oldTerm, err := framework.Metric(ctx, old.HTTPURL, "kshard_coordinator_term")
		if err != nil {
			t.Fatal(err)
		}
		// The election Lease is the one the leader holds (its identity is name@addr#suffix).
		leases, err := f.Client.CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lease := ""
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, old.Name+"@"+old.GRPCAddr+"#") {
				lease = l.Name
			}
		}
		if lease == "" {
			t.Fatalf("no Lease in %s is held by the leader %s", metav1.NamespaceSystem, old.Name)
		}
		at := time.Now()
		// Killed first, so it cannot renew (create) the Lease again; deleted before a
		// standby could take it over (lease duration 4s).
		if err := old.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := f.Client.CoordinationV1().Leases(metav1.NamespaceSystem).Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		_, _ = old.Wait(10 * time.Second)
		leader := h.converge("new leader after the Lease was deleted")
		newTerm, err := framework.Metric(ctx, leader.HTTPURL, "kshard_coordinator_term")
		if err != nil {
			t.Fatal(err)
		}
		if newTerm <= oldTerm {
			t.Fatalf("new leader %s has term %v, not above the previous leader's %v", leader.Name, newTerm, oldTerm)
		}
		after, err := leader.Assignments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b, a := framework.Owners(before), framework.Owners(after); !equalOwners(b, a) {
			t.Errorf("the leader change moved partitions: %d owners before, %d after, %d differ", len(b), len(a), diffOwners(b, a))
		}
		h.check("delete the coordinator Lease and kill the leader", at)
		// No shard was refused for holding a newer term, and the leader did not step down.
		time.Sleep(2 * ttl)
		if leader.Exited() {
			t.Fatalf("the new leader %s exited", leader.Name)
		}
		if l, err := h.k.Leader(ctx); err != nil || l != leader {
			t.Fatalf("leader after %s: %v, %v; want %s still leading", 2*ttl, l, err, leader.Name)
		}
		newer, err := framework.Metric(ctx, leader.HTTPURL, "kshard_coordinator_rejected_messages_total", `reason="newer_term"`)
		if err != nil {
			t.Fatal(err)
		}
		if newer != 0 {
			t.Errorf("the new leader refused %v messages for a newer term", newer)
		}
		t.Logf("term %v → %v across the deletion of Lease %s", oldTerm, newTerm, lease)
		h.k.StartCoordinatorAt("coordinator-d", old.GRPCAddr)
	})

	t.Run("pause a shard past its TTL", func(t *testing.T) {
		victim := h.k.Shards["shard-5"]
		at := time.Now()
		if err := victim.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// Long enough for the coordinator to expire it and move its partitions away.
		time.Sleep(ttl + margin + 6*time.Second)
		if err := victim.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		h.converge("after SIGCONT")
		h.check("pause a shard past its TTL", at)
	})
}

func equalOwners(a, b map[uint32]string) bool { return diffOwners(a, b) == 0 && len(a) == len(b) }

func diffOwners(a, b map[uint32]string) int {
	n := 0
	for p, o := range a {
		if b[p] != o {
			n++
		}
	}
	return n
}

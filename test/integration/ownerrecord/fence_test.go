package ownerrecord

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

// fences numbers the fences the tests install: each test has its own policy, so one
// test's policy going away (which the API server learns a moment later) cannot meet the
// next test's.
var fences atomic.Int64

// env is one installed fence: its policy, its record, a Labeler, and clients acting as
// shards and as other users.
type env struct {
	f       *framework.Framework
	params  ownerrecord.PolicyParams
	pm      partition.Map
	labeler *ownerrecord.Labeler
	fence   *ownerrecord.Fence
	prober  ownerrecord.Prober
	// as: "shard-a", "shard-b" (the shard ServiceAccount with that pod name),
	// "no-pod-name" (the shard ServiceAccount without the extra), "other-sa" (another
	// ServiceAccount with a pod-name extra), "coordinator" (the coordinator's
	// ServiceAccount, CoordinatorUser), "probe-a" (the probe user as shard-a, as the
	// coordinator's Prober sends it), "admin".
	as map[string]kubernetes.Interface
	// Namespaces in three different partitions: a owned by shard-a, b by shard-b, and
	// unowned in a partition the record does not name.
	nsA, nsB, nsUnowned string
}

func (e *env) partitionOf(ns string) partition.ID { return e.pm.For(ns) }

// setup installs the fence for a fresh shard ServiceAccount and the namespaces of a test.
func setup(t *testing.T) *env {
	t.Helper()
	f := framework.Get(t)
	ctx := context.Background()
	home := f.Namespace(t, nil).Name // kshard's namespace: its ServiceAccounts and record
	e := &env{
		f:  f,
		pm: partition.Map{Count: partition.DefaultCount},
		params: ownerrecord.PolicyParams{
			Name:             fmt.Sprintf("kshard-shard-fence-e2e-%s-%d", f.RunID, fences.Add(1)),
			Namespace:        home,
			ServiceAccount:   "kshard-shard",
			ClusterPartition: ownerrecord.ClusterPartitionOf(partition.Map{Count: partition.DefaultCount}),
			CoordinatorUser:  ownerrecord.ServiceAccountUser(home, "kshard-coordinator"),
		},
		as: map[string]kubernetes.Interface{"admin": f.Client},
	}
	// A partition label of this test's own: nothing else in the shared cluster reads it.
	e.params.PartitionLabel = e.params.Name + ".kshard.io/partition"
	e.prober = ownerrecord.Prober{PolicyName: e.params.Name, Interval: time.Millisecond}

	// ServiceAccounts, and what a shard's controllers might do in any namespace: write
	// ConfigMaps (standing in for workload objects) and create events; what the
	// namespace controller may do (update namespaces/status and namespaces/finalize,
	// delete anything); and what the coordinator does (patch namespaces). Every one of
	// them also gets what the record guard and the shard limits must refuse although
	// RBAC allows it: updates of Namespaces and deletes of cluster-scoped objects.
	for _, sa := range []string{e.params.ServiceAccount, "other", "kshard-coordinator"} {
		if _, err := f.Client.CoreV1().ServiceAccounts(home).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	roleName := "kshard-fence-e2e-" + f.RunID
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: roleName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "update", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces/status", "namespaces/finalize"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}, Verbs: []string{"delete", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: roleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: e.params.ServiceAccount},
			{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "other"},
			{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "kshard-coordinator"},
		},
	}
	if _, err := f.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), roleName, metav1.DeleteOptions{})
		_ = f.Client.RbacV1().ClusterRoles().Delete(context.Background(), roleName, metav1.DeleteOptions{})
	})

	for _, shard := range []string{"shard-a", "shard-b"} {
		c, err := ownerrecord.ShardClient(f.Config, e.params, shard)
		if err != nil {
			t.Fatal(err)
		}
		e.as[shard] = c
	}
	probe, err := ownerrecord.ProbeClient(f.Config, e.params, "shard-a")
	if err != nil {
		t.Fatal(err)
	}
	e.as["probe-a"] = probe
	e.as["coordinator"] = impersonate(t, f.Config, rest.ImpersonationConfig{UserName: e.params.CoordinatorUser})
	e.as["no-pod-name"] = impersonate(t, f.Config, rest.ImpersonationConfig{UserName: e.params.Username()})
	e.as["other-sa"] = impersonate(t, f.Config, rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + home + ":other",
		Extra:    map[string][]string{ownerrecord.PodNameExtra: {"shard-a"}},
	})

	// The policy, as the code builds it (the chart test checks the chart renders the same).
	if err := ownerrecord.Install(ctx, f.Client, e.params); err != nil {
		t.Fatalf("installing the fence: %v", err)
	}
	t.Cleanup(func() {
		if err := ownerrecord.Uninstall(context.Background(), f.Client, e.params); err != nil {
			t.Errorf("uninstalling the fence: %v", err)
		}
	})
	for _, p := range ownerrecord.Policies(e.params) {
		checkTypeChecking(t, f, p.Name)
	}

	// Namespaces in three different partitions, none the cluster partition.
	seen := map[partition.ID]bool{e.pm.For(partition.ClusterKey): true}
	var nss []string
	for len(nss) < 3 {
		ns := f.Namespace(t, nil).Name
		if p := e.pm.For(ns); !seen[p] {
			seen[p] = true
			nss = append(nss, ns)
		}
	}
	e.nsA, e.nsB, e.nsUnowned = nss[0], nss[1], nss[2]

	// The Labeler writes as the coordinator's ServiceAccount: the record guard lets no
	// one else change the partition label or the owner Roles.
	coordinator := rest.CopyConfig(f.Config)
	coordinator.Impersonate = rest.ImpersonationConfig{UserName: e.params.CoordinatorUser}
	e.labeler, err = ownerrecord.NewLabeler(metadata.NewForConfigOrDie(coordinator), kubernetes.NewForConfigOrDie(coordinator), e.pm, e.params,
		ownerrecord.LabelerOptions{RoleResync: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.labeler.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	framework.Eventually(t, 30*time.Second, "the Labeler sees the test's namespaces", func(context.Context) (bool, error) {
		for _, ns := range nss {
			if !slices.Contains(e.labeler.NamespacesOf(e.pm.For(ns)), ns) {
				return false, fmt.Errorf("%s not seen yet", ns)
			}
		}
		return true, nil
	})
	if _, err := e.labeler.Activate(ctx, 1, framework.CertainTenure{}); err != nil {
		t.Fatal(err)
	}
	e.fence, err = ownerrecord.NewFence(e.labeler, ownerrecord.FenceOptions{Params: e.params, Base: f.Config, ProbeTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The record: a's partition and the cluster partition to shard-a, b's to shard-b,
	// enforced (the policy itself also takes a moment to become active: Apply waits for
	// both).
	a, err := e.fence.Apply(ctx, map[partition.ID]string{e.partitionOf(e.nsA): "shard-a", e.partitionOf(e.nsB): "shard-b",
		e.pm.For(partition.ClusterKey): "shard-a"})
	if err != nil {
		t.Fatalf("the first owner record was not enforced: %v", err)
	}
	t.Logf("first record: %d Role writes in %s, enforced %s later (%d probe rounds)", a.Writes, a.Write.Round(time.Microsecond), a.Enforce.Round(time.Microsecond), a.Probes)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	for ns, owner := range map[string]string{e.nsA: "shard-a", e.nsB: "shard-b"} {
		if _, _, err := e.prober.WaitAllowed(wctx, e.as[owner], ns); err != nil {
			t.Fatalf("%s never allowed in %s: %v", owner, ns, err)
		}
	}
	// Apply proves only the fence in force. The API server loads policies on a timer (each
	// second in 1.37), one policy at a time, so the record guard and the shard limits,
	// installed after the fence, can still be missing here: wait until each refuses a
	// dry-run it must refuse.
	waitRefusing(t, e.params.RecordPolicyName(), func(ctx context.Context) error {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "record-guard-",
			Labels: map[string]string{e.params.PartitionLabel: "1"}}}
		_, err := e.as["other-sa"].CoreV1().Namespaces().Create(ctx, ns, dryRun)
		return err
	})
	waitRefusing(t, e.params.LimitsPolicyName(), func(ctx context.Context) error {
		return e.as["shard-a"].RbacV1().ClusterRoles().Delete(ctx, roleName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})
	return e
}

// waitRefusing sends request until policy refuses it.
func waitRefusing(t *testing.T, policy string, request func(context.Context) error) {
	t.Helper()
	start, tries := time.Now(), 0
	framework.Eventually(t, 30*time.Second, "policy "+policy+" in force", func(ctx context.Context) (bool, error) {
		tries++
		err := request(ctx)
		if ownerrecord.IsRefusal(err, policy) {
			return true, nil
		}
		return false, fmt.Errorf("not refused by %s yet: %v", policy, err)
	})
	if tries > 1 {
		t.Logf("policy %s in force after %d tries (%s): it was not when the fence was", policy, tries, time.Since(start).Round(time.Millisecond))
	}
}

func impersonate(t *testing.T, base *rest.Config, imp rest.ImpersonationConfig) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = imp
	return kubernetes.NewForConfigOrDie(cfg)
}

// checkTypeChecking waits for the API server's type check of the policy and fails on any
// warning (a misspelt field would make every request fail open or closed).
func checkTypeChecking(t *testing.T, f *framework.Framework, name string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "the policy's type check", func(ctx context.Context) (bool, error) {
		p, err := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
			return false, fmt.Errorf("status %+v", p.Status)
		}
		for _, w := range p.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("type check warning at %s: %s", w.FieldRef, w.Warning)
		}
		return true, nil
	})
}

// write makes one write as client: create a new ConfigMap, or update or delete one the
// admin created first.
func write(ctx context.Context, t *testing.T, e *env, client kubernetes.Interface, op, ns string) error {
	t.Helper()
	cms := client.CoreV1().ConfigMaps(ns)
	name := fmt.Sprintf("w-%d", time.Now().UnixNano())
	if op != "create" {
		if _, err := e.f.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("admin create %s/%s: %v", ns, name, err)
		}
	}
	switch op {
	case "create":
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
		return err
	case "update":
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["v"] = "1"
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	case "delete":
		return cms.Delete(ctx, name, metav1.DeleteOptions{})
	case "event", "event-dry-run":
		var opts metav1.CreateOptions
		if op == "event-dry-run" {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := client.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "late-", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "x"},
			Reason:         "Late", Message: "an event sent after the reconcile", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "kshard-e2e"},
		}, opts)
		return err
	}
	t.Fatalf("unknown op %q", op)
	return nil
}

// writeCase is one write and what the fence must answer.
type writeCase struct {
	name    string
	as      string
	op      string
	ns      func(*env) string
	refused bool
	// message parts a refusal must contain (besides the policy's prefix).
	message func(*env) []string
}

func runWrites(t *testing.T, e *env, cases []writeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.ns(e)
			err := write(context.Background(), t, e, e.as[tc.as], tc.op, ns)
			if !tc.refused {
				if err != nil {
					t.Fatalf("%s %s in %s (partition %d): %v", tc.as, tc.op, ns, e.partitionOf(ns), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("%s %s in %s (partition %d) was accepted; the fence must refuse it", tc.as, tc.op, ns, e.partitionOf(ns))
			}
			if !ownerrecord.IsRefusal(err, e.params.Name) || !apierrors.IsForbidden(err) {
				t.Fatalf("%s %s in %s: %v; want a Forbidden refusal of policy %s", tc.as, tc.op, ns, err, e.params.Name)
			}
			want := []string{ownerrecord.MessagePrefix, "in namespace " + ns}
			if tc.message != nil {
				want = append(want, tc.message(e)...)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q lacks %q", err.Error(), w)
				}
			}
			t.Logf("refused as expected: %v", err)
		})
	}
}

func nsA(e *env) string       { return e.nsA }
func nsB(e *env) string       { return e.nsB }
func nsUnowned(e *env) string { return e.nsUnowned }

// notOwned is the message of a refusal of shard's write in namespace ns(e), whose
// partition it does not own.
func notOwned(shard string, ns func(*env) string) func(*env) []string {
	return func(e *env) []string {
		return []string{"shard " + shard, fmt.Sprintf("it does not own the namespace's partition %d", e.partitionOf(ns(e)))}
	}
}

// TestFence checks who may write where under one record: a's partition owned by shard-a,
// b's by shard-b, the third namespace's by nobody (no label). Every other user is let
// through everywhere, although the policy fails closed (failurePolicy Fail).
func TestFence(t *testing.T) {
	e := setup(t)
	cases := []writeCase{
		{name: "owner creates", as: "shard-a", op: "create", ns: nsA},
		{name: "owner updates", as: "shard-a", op: "update", ns: nsA},
		{name: "owner deletes", as: "shard-a", op: "delete", ns: nsA},
		{name: "second owner writes its own", as: "shard-b", op: "update", ns: nsB},
		{name: "other shard create refused", as: "shard-b", op: "create", ns: nsA, refused: true, message: notOwned("shard-b", nsA)},
		{name: "other shard update refused", as: "shard-b", op: "update", ns: nsA, refused: true, message: notOwned("shard-b", nsA)},
		{name: "other shard delete refused", as: "shard-b", op: "delete", ns: nsA, refused: true, message: notOwned("shard-b", nsA)},
		{name: "owner of a refused in b", as: "shard-a", op: "update", ns: nsB, refused: true, message: notOwned("shard-a", nsB)},
		{name: "namespace without owner refused", as: "shard-a", op: "create", ns: nsUnowned, refused: true, message: notOwned("shard-a", nsUnowned)},
		{name: "probe user judged as the shard it names", as: "probe-a", op: "event-dry-run", ns: nsB, refused: true, message: notOwned("shard-a", nsB)},
		{name: "shard token without pod name refused", as: "no-pod-name", op: "create", ns: nsA, refused: true,
			message: func(*env) []string { return []string{"<unknown: no " + ownerrecord.PodNameExtra + " extra>"} }},
		{name: "late event of a non-owner accepted", as: "shard-b", op: "event", ns: nsA},
		{name: "admin untouched", as: "admin", op: "update", ns: nsA},
		{name: "admin untouched in unowned namespace", as: "admin", op: "create", ns: nsUnowned},
		{name: "other ServiceAccount untouched", as: "other-sa", op: "update", ns: nsB},
		{name: "other ServiceAccount untouched in unowned namespace", as: "other-sa", op: "create", ns: nsUnowned},
	}
	refusals := 0
	for _, c := range cases {
		if c.refused {
			refusals++
		}
	}
	before, err := e.f.FenceDenials(context.Background(), e.params.Name)
	if err != nil {
		t.Fatal(err)
	}
	runWrites(t, e, cases)
	after, err := e.f.FenceDenials(context.Background(), e.params.Name)
	if err != nil {
		t.Fatal(err)
	}
	denied := after - before
	t.Logf("apiserver_validating_admission_policy_check_total{policy=%q,enforcement_action=\"deny\"} rose by %.0f for %d refused writes",
		e.params.Name, denied, refusals)
	if denied != float64(refusals) {
		t.Errorf("the API server counted %.0f refusals of the fence, want %d", denied, refusals)
	}
}

// TestMove moves the owner record and checks the old owner is refused and the new one
// accepted, that a batch writes a few Roles whatever the namespaces (and nothing when
// nothing changes), and measures how long the API server takes to enforce a new owner
// Role after the write returned.
func TestMove(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pa, pb := e.partitionOf(e.nsA), e.partitionOf(e.nsB)

	t.Run("a few Role writes per batch, one wait", func(t *testing.T) {
		// Swap both partitions in one batch: a handoff round's moves go out together.
		// Each shard's Role is written at most twice (without what it loses, then with
		// what it gains), plus a RoleBinding it lacks.
		a, err := e.fence.Apply(ctx, map[partition.ID]string{pa: "shard-b", pb: "shard-a"})
		if err != nil {
			t.Fatal(err)
		}
		if a.Writes == 0 || a.Writes > 4 {
			t.Errorf("swapping 2 partitions between 2 shards made %d record writes, want 1-4", a.Writes)
		}
		if a.Reviews < 4 {
			t.Errorf("the swap was enforced after %d access reviews, want at least 4 (each new owner allowed, the sentinel refused)", a.Reviews)
		}
		t.Logf("2-partition swap: %d Role writes in %s, enforced %s later (%d reviews, %d probe rounds in %s)",
			a.Writes, a.Write.Round(time.Microsecond), a.Enforce.Round(time.Microsecond), a.Reviews, a.Probes, a.ProbeNamespace)
		a, err = e.fence.Apply(ctx, map[partition.ID]string{pa: "shard-b", pb: "shard-a"})
		if err != nil {
			t.Fatal(err)
		}
		if a.Writes != 0 {
			t.Errorf("a batch that changes nothing wrote %d times, want 0", a.Writes)
		}
	})
	t.Run("after the move", func(t *testing.T) {
		runWrites(t, e, []writeCase{
			{name: "old owner of a refused", as: "shard-a", op: "update", ns: nsA, refused: true, message: notOwned("shard-a", nsA)},
			{name: "new owner of a accepted", as: "shard-b", op: "update", ns: nsA},
			{name: "old owner of b refused", as: "shard-b", op: "delete", ns: nsB, refused: true, message: notOwned("shard-b", nsB)},
			{name: "new owner of b accepted", as: "shard-a", op: "create", ns: nsB},
		})
	})
	t.Run("owner removed", func(t *testing.T) {
		if _, err := e.fence.Apply(ctx, map[partition.ID]string{pa: ""}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 10*time.Second, "the former owner refused", func(ctx context.Context) (bool, error) {
			ok, err := e.prober.Allowed(ctx, e.as["shard-b"], e.nsA)
			return !ok, err
		})
		runWrites(t, e, []writeCase{
			{name: "former owner refused", as: "shard-b", op: "create", ns: nsA, refused: true, message: notOwned("shard-b", nsA)},
		})
	})

	owner := ""
	t.Run("propagation", func(t *testing.T) {
		const moves = 30
		var write, enforce, total []time.Duration
		probes, firstProbe := 0, 0
		owner = "shard-a"
		for i := range moves {
			prev := owner
			owner = map[string]string{"shard-a": "shard-b", "shard-b": "shard-a"}[owner]
			if i == 0 {
				prev = ""
			}
			start := time.Now()
			res, err := e.labeler.Set(ctx, map[partition.ID]string{pa: owner})
			if err != nil {
				t.Fatal(err)
			}
			wrote := time.Since(start)
			if res.Writes > 4 {
				t.Fatalf("move %d: %d writes, want at most 4 (two Roles, each at most twice)", i, res.Writes)
			}
			if got := e.ownerOf(ctx, t, pa); got != owner {
				t.Fatalf("move %d: after Set the owner Roles grant partition %d to %q, want %s", i, pa, got, owner)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			d, n, err := e.prober.WaitAllowed(wctx, e.as[owner], e.nsA)
			cancel()
			if err != nil {
				t.Fatalf("move %d to %s: %v", i, owner, err)
			}
			// Once the new owner passes, that API server has the new Role, and the
			// removal from the old owner's Role, written before it: the old owner must be
			// refused by the very next request.
			if prev != "" {
				ok, err := e.prober.Allowed(ctx, e.as[prev], e.nsA)
				if err != nil || ok {
					t.Fatalf("move %d: the old owner %s still allowed (%v) after the new one was", i, prev, err)
				}
			}
			probes += n
			if n == 1 {
				firstProbe++
			}
			write, enforce, total = append(write, wrote), append(enforce, d), append(total, wrote+d)
		}
		// A probe's own round trip, for reading the figures below: a record already
		// enforced at the first probe still counts one round trip.
		var rtt []time.Duration
		for range 20 {
			start := time.Now()
			if ok, err := e.prober.Allowed(ctx, e.as[owner], e.nsA); err != nil || !ok {
				t.Fatalf("probe of the owner %s: allowed %t, %v", owner, ok, err)
			}
			rtt = append(rtt, time.Since(start))
		}
		t.Logf("owner record moved %d times (%d probes in all, %d moves enforced at the first probe):", moves, probes, firstProbe)
		t.Logf("  write returned          p50 %s  max %s", pct(write, 50), pct(write, 100))
		t.Logf("  write→enforced (probe)  p50 %s  max %s  (time from Set returning to the new owner's dry-run passing; one probe round trip is included)",
			pct(enforce, 50), pct(enforce, 100))
		t.Logf("  move total              p50 %s  max %s", pct(total, 50), pct(total, 100))
		t.Logf("  one probe round trip    p50 %s  max %s", pct(rtt, 50), pct(rtt, 100))
	})

	// The same, bracketed finer: probes run back to back from before the write, so the
	// moment admission switched lies after the last refused probe was sent and before
	// the first allowed one returned. Both are given relative to the write returning
	// (negative: admission had switched before the writer got its answer).
	t.Run("propagation bracket", func(t *testing.T) {
		if owner == "" {
			t.Skip("propagation did not run")
		}
		const moves = 30
		var after, before []time.Duration
		for i := range moves {
			next := map[string]string{"shard-a": "shard-b", "shard-b": "shard-a"}[owner]
			type sample struct {
				sent, got time.Time
				allowed   bool
			}
			samples := make(chan []sample, 1)
			started := make(chan struct{})
			go func() {
				var out []sample
				defer func() { samples <- out }()
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				for first := true; pctx.Err() == nil; first = false {
					sent := time.Now()
					ok, err := e.prober.Allowed(pctx, e.as[next], e.nsA)
					if first {
						close(started)
					}
					if err != nil {
						return
					}
					out = append(out, sample{sent, time.Now(), ok})
					if ok {
						return
					}
				}
			}()
			<-started
			if _, err := e.labeler.Set(ctx, map[partition.ID]string{pa: next}); err != nil {
				t.Fatal(err)
			}
			returned := time.Now()
			got := <-samples
			if len(got) == 0 || !got[len(got)-1].allowed {
				t.Fatalf("move %d: the new owner %s never passed (%d probes)", i, next, len(got))
			}
			lastRefused := time.Time{}
			for _, s := range got {
				if !s.allowed {
					lastRefused = s.sent
				}
			}
			if lastRefused.IsZero() {
				t.Fatalf("move %d: the first probe, sent before the write, already passed", i)
			}
			before = append(before, lastRefused.Sub(returned))
			after = append(after, got[len(got)-1].got.Sub(returned))
			owner = next
		}
		t.Logf("owner record moved %d times with probes running throughout; admission switched, relative to the write returning:", moves)
		t.Logf("  no earlier than (last refused probe sent)    p50 %s  max %s", pct(before, 50), pct(before, 100))
		t.Logf("  no later than (first allowed probe returned) p50 %s  max %s", pct(after, 50), pct(after, 100))
	})
}

// ownerOf returns the shard whose owner Role grants partition p, read from the API
// server ("" when none does, "<several>" when more than one does).
func (e *env) ownerOf(ctx context.Context, t *testing.T, p partition.ID) string {
	t.Helper()
	owners, err := framework.RecordOwners(ctx, e.f.Client, e.params.Namespace, strconv.FormatUint(uint64(p), 10))
	switch {
	case err != nil:
		t.Fatal(err)
	case len(owners) > 1:
		return "<several>"
	case len(owners) == 1:
		return owners[0]
	}
	return ""
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Round(10 * time.Microsecond)
}

// TestRecordTampered changes the record behind the Labeler's back, as only the
// coordinator's identity still can (a stale replica, say), and checks that the Labeler
// puts it back: the partition label of a namespace (its namespace loop), and an owner's
// RoleBinding (its Role resync), after which the owner writes again, the non-owner is
// refused and other users are untouched. While either is gone the fence refuses every
// shard there.
func TestRecordTampered(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		tamper  func() error
		visible func(context.Context) (bool, error)
	}{
		{
			name: "partition label removed",
			tamper: func() error {
				patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, e.params.PartitionLabel)
				_, err := e.as["coordinator"].CoreV1().Namespaces().Patch(ctx, e.nsA, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			},
			visible: func(ctx context.Context) (bool, error) {
				ns, err := e.f.Client.CoreV1().Namespaces().Get(ctx, e.nsA, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				return ns.Labels[e.params.PartitionLabel] == strconv.FormatUint(uint64(e.partitionOf(e.nsA)), 10), nil
			},
		},
		{
			name: "owner RoleBinding deleted",
			tamper: func() error {
				return e.as["coordinator"].RbacV1().RoleBindings(e.params.Namespace).Delete(ctx, ownerrecord.OwnerRoleName("shard-a"), metav1.DeleteOptions{})
			},
			visible: func(ctx context.Context) (bool, error) {
				_, err := e.f.Client.RbacV1().RoleBindings(e.params.Namespace).Get(ctx, ownerrecord.OwnerRoleName("shard-a"), metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return err == nil, err
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.tamper(); err != nil {
				t.Fatal(err)
			}
			// The Labeler puts it back (etcd shows it), then admission follows. A probe
			// alone cannot tell the API server's view from before the change from the
			// restored one, so the owner must pass probes for a while after etcd shows it.
			start := time.Now()
			framework.Eventually(t, 30*time.Second, "the Labeler restores the record", tc.visible)
			restored := time.Since(start)
			framework.Eventually(t, 30*time.Second, "admission lets the owner write again, steadily", func(ctx context.Context) (bool, error) {
				for range 20 {
					ok, err := e.prober.Allowed(ctx, e.as["shard-a"], e.nsA)
					if err != nil || !ok {
						return false, err
					}
					time.Sleep(10 * time.Millisecond)
				}
				return true, nil
			})
			t.Logf("%s by hand: the Labeler put it back within %s", tc.name, restored.Round(time.Millisecond))
			runWrites(t, e, []writeCase{
				{name: "owner writes again", as: "shard-a", op: "create", ns: nsA},
				{name: "non-owner refused", as: "shard-b", op: "create", ns: nsA, refused: true, message: notOwned("shard-b", nsA)},
				{name: "admin untouched", as: "admin", op: "create", ns: nsA},
			})
		})
	}
}

package ownerrecord

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	writer  *ownerrecord.Writer
	labeler *ownerrecord.Labeler
	prober  ownerrecord.Prober
	// as: "shard-a", "shard-b" (the shard ServiceAccount with that pod name),
	// "no-pod-name" (the shard ServiceAccount without the extra), "other-sa" (another
	// ServiceAccount with a pod-name extra), "admin".
	as map[string]kubernetes.Interface
	// Namespaces: a and b labelled (different partitions), unowned labelled but absent
	// from the record, unlabelled outside the Labeler's selector.
	nsA, nsB, nsUnowned, nsUnlabelled string
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
			Name:           fmt.Sprintf("kshard-shard-fence-e2e-%s-%d", f.RunID, fences.Add(1)),
			Namespace:      home,
			ServiceAccount: "kshard-shard",
			ConfigMap:      ownerrecord.DefaultConfigMapName,
		},
		as: map[string]kubernetes.Interface{"admin": f.Client},
	}
	e.prober = ownerrecord.Prober{PolicyName: e.params.Name, Interval: time.Millisecond}

	// ServiceAccounts, and what a shard's controllers might do in any namespace: write
	// ConfigMaps (standing in for workload objects) and create events (the probe).
	for _, sa := range []string{e.params.ServiceAccount, "other"} {
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
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: roleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: e.params.ServiceAccount},
			{Kind: rbacv1.ServiceAccountKind, Namespace: home, Name: "other"},
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
	checkTypeChecking(t, f, e.params.Name)

	// Namespaces: three the Labeler sees (in three different partitions) and one it
	// does not.
	mark := map[string]string{"kshard.io/fence-e2e": f.RunID}
	seen := map[partition.ID]bool{}
	var labelled []string
	for len(labelled) < 3 {
		ns := f.Namespace(t, mark).Name
		if p := e.pm.For(ns); !seen[p] {
			seen[p] = true
			labelled = append(labelled, ns)
		}
	}
	e.nsA, e.nsB, e.nsUnowned = labelled[0], labelled[1], labelled[2]
	e.nsUnlabelled = f.Namespace(t, nil).Name

	var err error
	e.labeler, err = ownerrecord.NewLabeler(metadata.NewForConfigOrDie(f.Config), e.pm, ownerrecord.LabelerOptions{Selector: "kshard.io/fence-e2e=" + f.RunID})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.labeler.Run(lctx) }()
	t.Cleanup(func() { cancel(); <-done })
	framework.Eventually(t, 30*time.Second, "the Labeler labels the test's namespaces", func(ctx context.Context) (bool, error) {
		for _, ns := range labelled {
			got, err := f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if want := ownerrecord.Key(e.pm.For(ns)); got.Labels[ownerrecord.PartitionLabel] != want {
				return false, fmt.Errorf("%s: label %q, want %q", ns, got.Labels[ownerrecord.PartitionLabel], want)
			}
		}
		return true, nil
	})
	if got, err := f.Client.CoreV1().Namespaces().Get(ctx, e.nsUnlabelled, metav1.GetOptions{}); err != nil || got.Labels[ownerrecord.PartitionLabel] != "" {
		t.Fatalf("namespace %s outside the Labeler's selector: %v, labels %v", e.nsUnlabelled, err, got.Labels)
	}
	t.Logf("Labeler: %d patches for %d namespaces", e.labeler.Patches(), len(labelled))

	e.writer, err = ownerrecord.NewWriter(f.Client, home, e.params.ConfigMap, e.pm)
	if err != nil {
		t.Fatal(err)
	}
	// The record: a's partition to shard-a, b's to shard-b; then wait until admission
	// enforces it (the policy itself also takes a moment to become active).
	if err := e.writer.Set(ctx, map[partition.ID]string{e.partitionOf(e.nsA): "shard-a", e.partitionOf(e.nsB): "shard-b"}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, _, err := e.prober.WaitAllowed(wctx, e.as["shard-a"], e.nsA); err != nil {
		t.Fatalf("shard-a never allowed in %s: %v", e.nsA, err)
	}
	if _, _, err := e.prober.WaitRefused(wctx, e.as["shard-b"], e.nsA); err != nil {
		t.Fatalf("shard-b never refused in %s: %v", e.nsA, err)
	}
	return e
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
	case "event":
		_, err := client.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "late-", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "x"},
			Reason:         "Late", Message: "an event sent after the reconcile", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "kshard-e2e"},
		}, metav1.CreateOptions{})
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

func nsA(e *env) string          { return e.nsA }
func nsB(e *env) string          { return e.nsB }
func nsUnowned(e *env) string    { return e.nsUnowned }
func nsUnlabelled(e *env) string { return e.nsUnlabelled }

// ownedBy is the message of a refusal in namespace ns of shard to a write owned by owner.
func ownedBy(ns func(*env) string, shard, owner string) func(*env) []string {
	return func(e *env) []string {
		return []string{"shard " + shard, fmt.Sprintf("its partition %d is owned by %s", e.partitionOf(ns(e)), owner)}
	}
}

// TestFence checks who may write where under one record: a's partition owned by shard-a,
// b's by shard-b, the third labelled namespace's by nobody.
func TestFence(t *testing.T) {
	e := setup(t)
	cases := []writeCase{
		{name: "owner creates", as: "shard-a", op: "create", ns: nsA},
		{name: "owner updates", as: "shard-a", op: "update", ns: nsA},
		{name: "owner deletes", as: "shard-a", op: "delete", ns: nsA},
		{name: "second owner writes its own", as: "shard-b", op: "update", ns: nsB},
		{name: "other shard create refused", as: "shard-b", op: "create", ns: nsA, refused: true, message: ownedBy(nsA, "shard-b", "shard shard-a")},
		{name: "other shard update refused", as: "shard-b", op: "update", ns: nsA, refused: true, message: ownedBy(nsA, "shard-b", "shard shard-a")},
		{name: "other shard delete refused", as: "shard-b", op: "delete", ns: nsA, refused: true, message: ownedBy(nsA, "shard-b", "shard shard-a")},
		{name: "owner of a refused in b", as: "shard-a", op: "update", ns: nsB, refused: true, message: ownedBy(nsB, "shard-a", "shard shard-b")},
		{name: "partition without owner refused", as: "shard-a", op: "create", ns: nsUnowned, refused: true, message: ownedBy(nsUnowned, "shard-a", "no shard")},
		{name: "namespace without label refused", as: "shard-a", op: "create", ns: nsUnlabelled, refused: true,
			message: func(*env) []string { return []string{"shard shard-a", "no " + ownerrecord.PartitionLabel + " label"} }},
		{name: "shard token without pod name refused", as: "no-pod-name", op: "create", ns: nsA, refused: true,
			message: func(*env) []string { return []string{"<unknown: no " + ownerrecord.PodNameExtra + " extra>"} }},
		{name: "late event of a non-owner accepted", as: "shard-b", op: "event", ns: nsA},
		{name: "admin untouched", as: "admin", op: "update", ns: nsA},
		{name: "admin untouched in unlabelled namespace", as: "admin", op: "create", ns: nsUnlabelled},
		{name: "other ServiceAccount untouched", as: "other-sa", op: "update", ns: nsB},
		{name: "other ServiceAccount untouched in unlabelled namespace", as: "other-sa", op: "create", ns: nsUnlabelled},
	}
	refusals := 0
	for _, c := range cases {
		if c.refused {
			refusals++
		}
	}
	before := policyChecks(t, e)
	runWrites(t, e, cases)
	denied := policyChecks(t, e) - before
	t.Logf("apiserver_validating_admission_policy_check_total{policy=%q,enforcement_action=\"deny\"} rose by %.0f for %d refused writes",
		e.params.Name, denied, refusals)
	if denied != float64(refusals) {
		t.Errorf("the API server counted %.0f refusals of the fence, want %d", denied, refusals)
	}
}

// policyChecks reads the API server's count of the fence's refusals.
func policyChecks(t *testing.T, e *env) float64 {
	t.Helper()
	raw, err := e.f.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return framework.ParseMetrics(string(raw)).Value("apiserver_validating_admission_policy_check_total",
		`policy="`+e.params.Name+`"`, `enforcement_action="deny"`)
}

// TestMove moves the owner record and checks the old owner is refused and the new one
// accepted, that a batch of moves is one API write, and measures how long the API
// server takes to enforce a new record after the write returned.
func TestMove(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	pa, pb := e.partitionOf(e.nsA), e.partitionOf(e.nsB)

	t.Run("one batch, one write", func(t *testing.T) {
		before := e.writer.Writes()
		// Swap both partitions in one Set: a handoff round's moves go out together.
		if err := e.writer.Set(ctx, map[partition.ID]string{pa: "shard-b", pb: "shard-a"}); err != nil {
			t.Fatal(err)
		}
		if got := e.writer.Writes() - before; got != 1 {
			t.Errorf("moving 2 partitions took %d API writes, want 1", got)
		}
		d, n, err := e.prober.WaitAllowed(ctx, e.as["shard-b"], e.nsA)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("record rv %s enforced %s after the write returned (%d probes); API writes for this 2-partition move: 1 ConfigMap update",
			e.writer.ResourceVersion(), d.Round(time.Microsecond), n)
		before = e.writer.Writes()
		if err := e.writer.Set(ctx, map[partition.ID]string{pa: "shard-b", pb: "shard-a"}); err != nil {
			t.Fatal(err)
		}
		if got := e.writer.Writes() - before; got != 0 {
			t.Errorf("a Set that changes nothing wrote %d times, want 0", got)
		}
	})
	t.Run("after the move", func(t *testing.T) {
		runWrites(t, e, []writeCase{
			{name: "old owner of a refused", as: "shard-a", op: "update", ns: nsA, refused: true, message: ownedBy(nsA, "shard-a", "shard shard-b")},
			{name: "new owner of a accepted", as: "shard-b", op: "update", ns: nsA},
			{name: "old owner of b refused", as: "shard-b", op: "delete", ns: nsB, refused: true, message: ownedBy(nsB, "shard-b", "shard shard-a")},
			{name: "new owner of b accepted", as: "shard-a", op: "create", ns: nsB},
		})
	})
	t.Run("owner removed", func(t *testing.T) {
		if err := e.writer.Set(ctx, map[partition.ID]string{pa: ""}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.prober.WaitRefused(ctx, e.as["shard-b"], e.nsA); err != nil {
			t.Fatal(err)
		}
		runWrites(t, e, []writeCase{
			{name: "former owner refused", as: "shard-b", op: "create", ns: nsA, refused: true, message: ownedBy(nsA, "shard-b", "no shard")},
		})
	})

	t.Run("propagation", func(t *testing.T) {
		const moves = 30
		var write, enforce, total []time.Duration
		probes, firstProbe := 0, 0
		owner := "shard-a"
		for i := range moves {
			prev := owner
			owner = map[string]string{"shard-a": "shard-b", "shard-b": "shard-a"}[owner]
			if i == 0 {
				prev = ""
			}
			before := e.writer.Writes()
			start := time.Now()
			if err := e.writer.Set(ctx, map[partition.ID]string{pa: owner}); err != nil {
				t.Fatal(err)
			}
			wrote := time.Since(start)
			if e.writer.Writes()-before != 1 {
				t.Fatalf("move %d: %d writes, want 1", i, e.writer.Writes()-before)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			d, n, err := e.prober.WaitAllowed(wctx, e.as[owner], e.nsA)
			cancel()
			if err != nil {
				t.Fatalf("move %d to %s: %v", i, owner, err)
			}
			// Once the new owner passes, that API server has the new record: the old
			// owner must be refused by the very next request.
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
		t.Logf("owner record moved %d times (1 ConfigMap update each, %d probes in all, %d moves enforced at the first probe):", moves, probes, firstProbe)
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
		const moves = 30
		rec, err := e.writer.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		owner := rec[pa]
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
			if err := e.writer.Set(ctx, map[partition.ID]string{pa: next}); err != nil {
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

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Round(10 * time.Microsecond)
}

// TestMissingRecord deletes the owner ConfigMap: the API server resolves params before
// matchConditions, so the fence must fail open (parameterNotFoundAction Allow) rather
// than refuse every namespaced write in the cluster; writing the record again restores
// the fence.
func TestMissingRecord(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if err := e.f.Client.CoreV1().ConfigMaps(e.params.Namespace).Delete(ctx, e.params.ConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d, n, err := e.prober.WaitAllowed(wctx, e.as["shard-b"], e.nsA); err != nil {
		t.Fatalf("with the record deleted the non-owner is still refused: %v", err)
	} else {
		t.Logf("record deleted: the fence lets shards through after %s (%d probes)", d.Round(time.Microsecond), n)
	}
	t.Run("without the record", func(t *testing.T) {
		runWrites(t, e, []writeCase{
			{name: "admin writes", as: "admin", op: "create", ns: nsA},
			{name: "other ServiceAccount writes", as: "other-sa", op: "create", ns: nsB},
			{name: "shard unfenced", as: "shard-b", op: "create", ns: nsA},
		})
	})
	// The coordinator writes the whole record again (as a new leader would).
	if err := e.writer.Replace(ctx, map[partition.ID]string{e.partitionOf(e.nsA): "shard-a"}); err != nil {
		t.Fatalf("re-creating the record: %v", err)
	}
	if _, _, err := e.prober.WaitRefused(wctx, e.as["shard-b"], e.nsA); err != nil {
		t.Fatalf("record re-created but the non-owner is not refused: %v", err)
	}
	t.Run("record written again", func(t *testing.T) {
		runWrites(t, e, []writeCase{
			{name: "non-owner refused", as: "shard-b", op: "create", ns: nsA, refused: true, message: ownedBy(nsA, "shard-b", "shard shard-a")},
			{name: "owner writes", as: "shard-a", op: "create", ns: nsA},
			{name: "dropped partition refused", as: "shard-b", op: "create", ns: nsB, refused: true, message: ownedBy(nsB, "shard-b", "no shard")},
		})
	})
}

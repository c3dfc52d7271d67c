package ownerrecord

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
)

// outcome is what the API server must answer to a request.
type outcome int

const (
	allowed  outcome = iota
	byRecord         // refused by the record guard
	byLimits         // refused by the shard limits
	byFence          // refused by the fence
	byRBAC           // refused by RBAC, before any policy
	// byRecordOrLimits: refused by both the record guard and the shard limits. The API
	// server reports the first denying policy it evaluated, and its policy list has no
	// fixed order, so either refusal is the answer.
	byRecordOrLimits
)

// guardCase is one request and the answer it must get.
type guardCase struct {
	name string
	as   string
	do   func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error
	want outcome
}

func runGuardCases(t *testing.T, e *env, cases []guardCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(context.Background(), t, e, e.as[tc.as])
			policy, prefix := "", ""
			switch tc.want {
			case allowed:
				if err != nil {
					t.Fatalf("as %s: %v; want it allowed", tc.as, err)
				}
				return
			case byRBAC:
				if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
					t.Fatalf("as %s: %v; want RBAC's Forbidden", tc.as, err)
				}
				t.Logf("refused by RBAC as expected: %v", err)
				return
			case byRecord:
				policy, prefix = e.params.RecordPolicyName(), ownerrecord.RecordMessagePrefix
			case byLimits:
				policy, prefix = e.params.LimitsPolicyName(), ownerrecord.LimitsMessagePrefix
			case byFence:
				policy, prefix = e.params.Name, ownerrecord.MessagePrefix
			case byRecordOrLimits:
				policy, prefix = e.params.RecordPolicyName(), ownerrecord.RecordMessagePrefix
				if ownerrecord.IsRefusal(err, e.params.LimitsPolicyName()) {
					policy, prefix = e.params.LimitsPolicyName(), ownerrecord.LimitsMessagePrefix
				}
			}
			if err == nil {
				t.Fatalf("as %s: accepted; want a refusal of policy %s", tc.as, policy)
			}
			if !apierrors.IsForbidden(err) || !ownerrecord.IsRefusal(err, policy) || !strings.Contains(err.Error(), prefix) {
				t.Fatalf("as %s: %v; want a Forbidden refusal of policy %s (%q)", tc.as, err, policy, prefix)
			}
			t.Logf("refused as expected: %v", err)
		})
	}
}

// withPartition returns namespace ns (read as admin) with its partition label set to v.
func withPartition(ctx context.Context, t *testing.T, e *env, ns, v string) *corev1.Namespace {
	t.Helper()
	n, err := e.f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[e.params.PartitionLabel] = v
	return n
}

// namespaceWrite sends, as c, namespace nsA's update through path ("status" or
// "finalize"), as a dry run, with the stored Namespace unchanged.
func namespaceWrite(path string) func(context.Context, *testing.T, *env, kubernetes.Interface) error {
	return func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
		n, err := e.f.Client.CoreV1().Namespaces().Get(ctx, e.nsA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		opts := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
		if path == "finalize" {
			_, err = c.CoreV1().Namespaces().Finalize(ctx, n, opts)
		} else {
			_, err = c.CoreV1().Namespaces().UpdateStatus(ctx, n, opts)
		}
		return err
	}
}

// dropNamespaceOwners removes, as c, namespace nsB's owner references (a dry run): the
// garbage collector's write to a Namespace, which is cluster-scoped work.
func dropNamespaceOwners(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
	_, err := c.CoreV1().Namespaces().Patch(ctx, e.nsB, types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

func mergePatch(ctx context.Context, c kubernetes.Interface, ns, patch string) error {
	_, err := c.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// dryRun is the create option of the RBAC cases: admission runs, nothing is stored.
var dryRun = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// ownerRole is an owner Role of shard in namespace ns granting rules.
func ownerRole(ns, shard string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ownerrecord.OwnerRoleName(shard), Namespace: ns}, Rules: rules}
}

// ownRule grants partitions.
func ownRule(partitions ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{ownerrecord.PartitionsGroup}, Resources: []string{ownerrecord.PartitionsResource},
		Verbs: []string{ownerrecord.OwnVerb}, ResourceNames: partitions}
}

// ownerBinding binds role (kind Role or ClusterRole) to the owner subject of shard in
// namespace subjectNS, named name.
func ownerBinding(ns, name, kind, role, subjectNS, shard string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ownerrecord.OwnerRoleName(shard), Namespace: subjectNS}},
	}
}

// updateBinding sends a dry-run update of RoleBinding ns/name as c, changed by change.
func updateBinding(ctx context.Context, c kubernetes.Interface, ns, name string, change func(*rbacv1.RoleBinding)) error {
	b, err := c.RbacV1().RoleBindings(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	change(b)
	_, err = c.RbacV1().RoleBindings(ns).Update(ctx, b, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// TestRecordGuard checks that nobody but the coordinator's ServiceAccount may change the
// owner record — a Namespace's partition label (through any path, the namespace
// controller's status and finalize subresources included), the owner Roles and
// RoleBindings and the term beacon, or any binding of an owner subject — and that the
// coordinator may change nothing else on a Namespace, and write only record objects of
// the record's shape in its namespace.
func TestRecordGuard(t *testing.T) {
	e := setup(t)
	label := e.params.PartitionLabel
	home := e.params.Namespace
	other := strconv.FormatUint(uint64(e.partitionOf(e.nsB)), 10) // a partition shard-b owns
	setPartition := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, other)
	rbac := func(c kubernetes.Interface) (func(*rbacv1.Role) error, func(*rbacv1.RoleBinding) error) {
		return func(r *rbacv1.Role) error {
				_, err := c.RbacV1().Roles(r.Namespace).Create(context.Background(), r, dryRun)
				return err
			}, func(b *rbacv1.RoleBinding) error {
				_, err := c.RbacV1().RoleBindings(b.Namespace).Create(context.Background(), b, dryRun)
				return err
			}
	}
	cases := []guardCase{
		// As the namespace's owner: the fence lets it through (it owns the namespace's
		// partition), so the refusal is the record guard's alone.
		{name: "shard status update moving its namespace into another partition", as: "shard-a", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().UpdateStatus(ctx, withPartition(ctx, t, e, e.nsA, other), metav1.UpdateOptions{})
				return err
			}},
		{name: "shard finalize moving its namespace into another partition", as: "shard-a", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().Finalize(ctx, withPartition(ctx, t, e, e.nsA, other), metav1.UpdateOptions{})
				return err
			}},
		{name: "shard update moving its namespace into another partition", as: "shard-a", want: byRecordOrLimits,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().Update(ctx, withPartition(ctx, t, e, e.nsA, other), metav1.UpdateOptions{})
				return err
			}},
		{name: "shard status update leaving the record alone", as: "shard-a", want: allowed, do: namespaceWrite("status")},
		{name: "another user's patch of the partition label", as: "other-sa", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, setPartition)
			}},
		{name: "the administrator's removal of the partition label", as: "admin", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label))
			}},
		{name: "another user's namespace created with a partition label", as: "other-sa", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "record-guard-", Labels: map[string]string{label: other}}}
				_, err := c.CoreV1().Namespaces().Create(ctx, ns, dryRun)
				return err
			}},
		{name: "another user's other labels untouched", as: "other-sa", want: allowed,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"labels":{"team":"blue"}}}`)
			}},
		{name: "the coordinator writes the partition label", as: "coordinator", want: allowed,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				want := strconv.FormatUint(uint64(e.partitionOf(e.nsUnowned)), 10)
				if err := mergePatch(ctx, c, e.nsUnowned, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label)); err != nil {
					return err
				}
				return mergePatch(ctx, c, e.nsUnowned, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label, want))
			}},
		{name: "the coordinator changes a Pod Security label", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`)
			}},
		{name: "the coordinator changes the partition and a Pod Security label at once", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, fmt.Sprintf(`{"metadata":{"labels":{%q:%q,"pod-security.kubernetes.io/enforce":"privileged"}}}`, label, other))
			}},
		{name: "the coordinator changes an annotation", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"annotations":{"note":"x"}}}`)
			}},
		{name: "the coordinator adds a finalizer", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				// A dry run: were it accepted, a real finalizer would keep the namespace
				// Terminating after the test and fail every later package's wait for it.
				_, err := c.CoreV1().Namespaces().Patch(ctx, e.nsA, types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`),
					metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}},
		{name: "the coordinator updates namespaces/status", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				n, err := e.f.Client.CoreV1().Namespaces().Get(ctx, e.nsA, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.CoreV1().Namespaces().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			}},
		{name: "the coordinator creates a namespace", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, _ *env, c kubernetes.Interface) error {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "record-guard-"}}
				_, err := c.CoreV1().Namespaces().Create(ctx, ns, dryRun)
				return err
			}},

		// The owner Roles and their bindings.
		{name: "the administrator grants a shard a partition", as: "admin", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["admin"])
				return role(ownerRole(home, "shard-b", ownRule("1")))
			}},
		{name: "the administrator edits an owner Role", as: "admin", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				r, err := c.RbacV1().Roles(home).Get(ctx, ownerrecord.OwnerRoleName("shard-b"), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				r.Rules[0].ResourceNames = append(r.Rules[0].ResourceNames, "1")
				_, err = c.RbacV1().Roles(home).Update(ctx, r, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}},
		{name: "the administrator deletes an owner Role", as: "admin", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return c.RbacV1().Roles(home).Delete(ctx, ownerrecord.OwnerRoleName("shard-a"), metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			}},
		{name: "the administrator forges the term beacon", as: "admin", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["admin"])
				r := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: ownerrecord.TermRoleName, Namespace: home,
					Annotations: map[string]string{ownerrecord.TermAnnotation: "4294967295"}}}
				return role(r)
			}},
		{name: "the administrator binds an owner subject under another name", as: "admin", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				_, binding := rbac(e.as["admin"])
				return binding(ownerBinding(home, "innocent", "ClusterRole", "admin", home, "shard-b"))
			}},
		{name: "the administrator binds an owner subject cluster-wide", as: "admin", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, _ *env, c kubernetes.Interface) error {
				b := ownerBinding("", "kshard-e2e-guard-"+e.f.RunID, "ClusterRole", "admin", home, "shard-b")
				_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: b.ObjectMeta, RoleRef: b.RoleRef, Subjects: b.Subjects}, dryRun)
				return err
			}},
		{name: "another release's owner subjects are its own", as: "admin", want: allowed,
			do: func(ctx context.Context, _ *testing.T, _ *env, c kubernetes.Interface) error {
				b := ownerBinding("", "kshard-e2e-guard-other-"+e.f.RunID, "ClusterRole", "view", "elsewhere", "shard-b")
				_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: b.ObjectMeta, RoleRef: b.RoleRef, Subjects: b.Subjects}, dryRun)
				return err
			}},
		{name: "the administrator's other Roles untouched", as: "admin", want: allowed,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["admin"])
				return role(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: home},
					Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}})
			}},
		{name: "the coordinator writes an owner Role", as: "coordinator", want: allowed,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["coordinator"])
				return role(ownerRole(home, "shard-c", ownRule("1", "2")))
			}},
		{name: "the coordinator writes an owner RoleBinding", as: "coordinator", want: allowed,
			do: func(ctx context.Context, _ *testing.T, _ *env, c kubernetes.Interface) error {
				return updateBinding(ctx, c, home, ownerrecord.OwnerRoleName("shard-a"), func(*rbacv1.RoleBinding) {})
			}},
		{name: "the coordinator grants every partition (a rule without resourceNames)", as: "coordinator", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["coordinator"])
				return role(ownerRole(home, "shard-c", ownRule()))
			}},
		{name: "the coordinator adds another rule to an owner Role", as: "coordinator", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["coordinator"])
				return role(ownerRole(home, "shard-c", ownRule("1"),
					rbacv1.PolicyRule{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}, Verbs: []string{"get"}}))
			}},
		{name: "the coordinator writes a Role that is not the record's", as: "coordinator", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				role, _ := rbac(e.as["coordinator"])
				return role(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: home}, Rules: []rbacv1.PolicyRule{ownRule("1")}})
			}},
		{name: "the coordinator binds an owner Role to another subject", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, _ *env, c kubernetes.Interface) error {
				return updateBinding(ctx, c, home, ownerrecord.OwnerRoleName("shard-a"), func(b *rbacv1.RoleBinding) {
					b.Subjects[0].Name = ownerrecord.OwnerRoleName("shard-d")
				})
			}},
		{name: "the coordinator binds another Role to an owner subject", as: "coordinator", want: byRecord,
			do: func(context.Context, *testing.T, *env, kubernetes.Interface) error {
				_, binding := rbac(e.as["coordinator"])
				// A Role the coordinator holds, so that RBAC's escalation check lets the
				// request reach admission.
				return binding(ownerBinding(home, ownerrecord.OwnerRoleName("shard-c"), "Role", e.params.RecordRoleName(), home, "shard-c"))
			}},
	}
	runGuardCases(t, e, cases)
	got, err := e.f.Client.CoreV1().Namespaces().Get(context.Background(), e.nsA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[label] != strconv.FormatUint(uint64(e.partitionOf(e.nsA)), 10) || got.Labels["pod-security.kubernetes.io/enforce"] != "" {
		t.Errorf("namespace %s after the refused writes: labels %v", e.nsA, got.Labels)
	}
}

// TestShardLimits checks that the shard ServiceAccount may not delete cluster-scoped
// objects (RBAC lets it, as the namespace controller's */* does) unless they have owner
// references (the garbage collector's dependents), that other users may,
// and that the probe user the coordinator impersonates may only send dry-run Events,
// which the fence judges as the shard it names.
func TestShardLimits(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	scratchRole := func(t *testing.T) string {
		t.Helper()
		r, err := e.f.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "kshard-limits-e2e-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.f.Client.RbacV1().ClusterRoles().Delete(ctx, r.Name, metav1.DeleteOptions{}) })
		return r.Name
	}
	event := func(dryRun bool, ns func(*env) string) func(context.Context, *testing.T, *env, kubernetes.Interface) error {
		return func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
			opts := metav1.CreateOptions{}
			if dryRun {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := c.CoreV1().Events(ns(e)).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns(e)},
				InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns(e), Name: "x"},
				Reason:         "Probe", Message: "an event of the probe user", Type: corev1.EventTypeNormal,
			}, opts)
			return err
		}
	}
	cases := []guardCase{
		{name: "shard deletes a ClusterRole", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return c.RbacV1().ClusterRoles().Delete(ctx, scratchRole(t), metav1.DeleteOptions{})
			}},
		{name: "shard deletes a ClusterRole that has an owner (the garbage collector)", as: "shard-a", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				r, err := e.f.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
					GenerateName:    "kshard-limits-e2e-",
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "gone", UID: "5b1c2f7e-0000-4000-8000-000000000001"}},
				}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.f.Client.RbacV1().ClusterRoles().Delete(ctx, r.Name, metav1.DeleteOptions{}) })
				return c.RbacV1().ClusterRoles().Delete(ctx, r.Name, metav1.DeleteOptions{})
			}},
		{name: "shard removes a ClusterRole's owner reference and finalizer (the garbage collector)", as: "shard-a", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				name := ownedRole(t, e, []string{"kshard.io/e2e-hold"})
				return patchRole(ctx, c, name, `{"metadata":{"ownerReferences":null,"finalizers":null}}`)
			}},
		{name: "shard turns an owner reference's blockOwnerDeletion off", as: "shard-a", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				name := ownedRole(t, e, nil)
				return patchRole(ctx, c, name, `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"gone","uid":"5b1c2f7e-0000-4000-8000-000000000002","blockOwnerDeletion":false}]}}`)
			}},
		{name: "shard changes a ClusterRole's rules", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return patchRole(ctx, c, scratchRole(t), `{"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`)
			}},
		{name: "shard labels a ClusterRole", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return patchRole(ctx, c, scratchRole(t), `{"metadata":{"labels":{"rbac.authorization.k8s.io/aggregate-to-admin":"true"}}}`)
			}},
		{name: "shard adds an owner reference to a ClusterRole", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return patchRole(ctx, c, scratchRole(t), `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"n","uid":"5b1c2f7e-0000-4000-8000-000000000003"}]}}`)
			}},
		{name: "shard removes a finalizer and changes the rules at once", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				name := ownedRole(t, e, []string{"kshard.io/e2e-hold"})
				return patchRole(ctx, c, name, `{"metadata":{"finalizers":null},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`)
			}},
		{name: "shard labels a Namespace", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().Patch(ctx, e.nsA, types.MergePatchType,
					[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}},
		{name: "shard deletes a Namespace", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return c.CoreV1().Namespaces().Delete(ctx, e.nsA, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			}},
		{name: "shard deletes in a namespace it owns", as: "shard-a", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return write(ctx, t, e, c, "delete", e.nsA)
			}},
		// The fence: cluster-scoped objects are the cluster partition's (shard-a's), a
		// Namespace's own requests its partition's.
		{name: "a shard without the cluster partition deletes a ClusterRole that has an owner", as: "shard-b", want: byFence,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return c.RbacV1().ClusterRoles().Delete(ctx, ownedRole(t, e, nil), metav1.DeleteOptions{})
			}},
		{name: "a shard without the cluster partition removes an owner reference", as: "shard-b", want: byFence,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return patchRole(ctx, c, ownedRole(t, e, nil), `{"metadata":{"ownerReferences":null}}`)
			}},
		{name: "the cluster partition's owner removes a Namespace's owner references (the garbage collector)", as: "shard-a", want: allowed, do: dropNamespaceOwners},
		{name: "a namespace's owner without the cluster partition removes its owner references", as: "shard-b", want: byFence, do: dropNamespaceOwners},
		{name: "shard updates the status of a namespace it does not own", as: "shard-b", want: byFence, do: namespaceWrite("status")},
		{name: "shard finalizes a namespace it does not own", as: "shard-b", want: byFence, do: namespaceWrite("finalize")},
		{name: "shard finalizes a namespace it owns", as: "shard-a", want: allowed, do: namespaceWrite("finalize")},
		{name: "another user deletes a ClusterRole", as: "other-sa", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return c.RbacV1().ClusterRoles().Delete(ctx, scratchRole(t), metav1.DeleteOptions{})
			}},
		{name: "probe as the owner", as: "probe-a", want: allowed, do: event(true, nsA)},
		{name: "probe as a non-owner refused by the fence", as: "probe-a", want: byFence, do: event(true, nsB)},
		{name: "probe user stores an Event", as: "probe-a", want: byLimits, do: event(false, nsA)},
		{name: "probe user creates a ConfigMap", as: "probe-a", want: byRBAC,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return write(ctx, t, e, c, "create", e.nsA)
			}},
		{name: "probe user reads Secrets", as: "probe-a", want: byRBAC,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Secrets(e.nsA).List(ctx, metav1.ListOptions{})
				return err
			}},
	}
	runGuardCases(t, e, cases)
}

// ownedRole creates a ClusterRole with a (blocking) owner reference and finalizers, whose
// cleanup removes them.
func ownedRole(t *testing.T, e *env, finalizers []string) string {
	t.Helper()
	ctx := context.Background()
	r, err := e.f.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "kshard-limits-e2e-", Finalizers: finalizers,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "gone",
			UID: "5b1c2f7e-0000-4000-8000-000000000002", BlockOwnerDeletion: ptr.To(true)}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.f.Client.RbacV1().ClusterRoles().Patch(ctx, r.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = e.f.Client.RbacV1().ClusterRoles().Delete(ctx, r.Name, metav1.DeleteOptions{})
	})
	return r.Name
}

// patchRole merge-patches ClusterRole name as c.
func patchRole(ctx context.Context, c kubernetes.Interface, name, patch string) error {
	_, err := c.RbacV1().ClusterRoles().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

package ownerrecord

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

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

// withOwner returns namespace ns (read as admin) with its owner label set to owner.
func withOwner(ctx context.Context, t *testing.T, e *env, ns, owner string) *corev1.Namespace {
	t.Helper()
	n, err := e.f.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[e.params.OwnerLabel] = owner
	return n
}

func mergePatch(ctx context.Context, c kubernetes.Interface, ns, patch string) error {
	_, err := c.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// TestRecordGuard checks that nobody but the coordinator's ServiceAccount may change a
// Namespace's owner label or term annotation, through any path (the namespace
// controller's status and finalize subresources included), and that the coordinator may
// change nothing else on a Namespace.
func TestRecordGuard(t *testing.T) {
	e := setup(t)
	label, term := e.params.OwnerLabel, e.params.TermAnnotation()
	setOwner := fmt.Sprintf(`{"metadata":{"labels":{%q:"shard-b"}}}`, label)
	cases := []guardCase{
		{name: "shard status update naming itself owner", as: "shard-b", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().UpdateStatus(ctx, withOwner(ctx, t, e, e.nsA, "shard-b"), metav1.UpdateOptions{})
				return err
			}},
		{name: "shard finalize naming itself owner", as: "shard-b", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().Finalize(ctx, withOwner(ctx, t, e, e.nsA, "shard-b"), metav1.UpdateOptions{})
				return err
			}},
		{name: "shard update naming itself owner", as: "shard-b", want: byRecord,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				_, err := c.CoreV1().Namespaces().Update(ctx, withOwner(ctx, t, e, e.nsA, "shard-b"), metav1.UpdateOptions{})
				return err
			}},
		{name: "shard patch forging a term", as: "shard-a", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, fmt.Sprintf(`{"metadata":{"annotations":{%q:"4294967295"}}}`, term))
			}},
		{name: "shard status update leaving the record alone", as: "shard-a", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				n, err := e.f.Client.CoreV1().Namespaces().Get(ctx, e.nsA, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = c.CoreV1().Namespaces().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			}},
		{name: "another user's patch of the owner label", as: "other-sa", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, setOwner)
			}},
		{name: "another user's removal of the term", as: "other-sa", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, term))
			}},
		{name: "the administrator's removal of the owner label", as: "admin", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, label))
			}},
		{name: "another user's namespace created with an owner label", as: "other-sa", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "record-guard-", Labels: map[string]string{label: "shard-b"}}}
				_, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}},
		{name: "another user's other labels untouched", as: "other-sa", want: allowed,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"labels":{"team":"blue"}}}`)
			}},
		{name: "the coordinator names an owner", as: "coordinator", want: allowed,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				// In the namespace no record names: the Labeler leaves it alone.
				if err := mergePatch(ctx, c, e.nsUnlabelled, fmt.Sprintf(`{"metadata":{"labels":{%q:"shard-b"},"annotations":{%q:"1"}}}`, label, term)); err != nil {
					return err
				}
				return mergePatch(ctx, c, e.nsUnlabelled, fmt.Sprintf(`{"metadata":{"labels":{%q:null},"annotations":{%q:null}}}`, label, term))
			}},
		{name: "the coordinator changes a Pod Security label", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`)
			}},
		{name: "the coordinator changes the owner and a Pod Security label at once", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, fmt.Sprintf(`{"metadata":{"labels":{%q:"shard-a","pod-security.kubernetes.io/enforce":"privileged"}}}`, label))
			}},
		{name: "the coordinator changes another annotation", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"annotations":{"note":"x"}}}`)
			}},
		{name: "the coordinator adds a finalizer", as: "coordinator", want: byRecord,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return mergePatch(ctx, c, e.nsA, `{"metadata":{"finalizers":["example.com/hold"]}}`)
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
				_, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}},
	}
	runGuardCases(t, e, cases)
	got, err := e.f.Client.CoreV1().Namespaces().Get(context.Background(), e.nsA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[label] != "shard-a" || got.Labels["pod-security.kubernetes.io/enforce"] != "" {
		t.Errorf("namespace %s after the refused writes: labels %v", e.nsA, got.Labels)
	}
}

// TestShardLimits checks that the shard ServiceAccount may not delete cluster-scoped
// objects (RBAC lets it, as the namespace controller's */* does), that other users may,
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
		{name: "shard deletes a Namespace", as: "shard-a", want: byLimits,
			do: func(ctx context.Context, _ *testing.T, e *env, c kubernetes.Interface) error {
				return c.CoreV1().Namespaces().Delete(ctx, e.nsA, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
			}},
		{name: "shard deletes in a namespace it owns", as: "shard-a", want: allowed,
			do: func(ctx context.Context, t *testing.T, e *env, c kubernetes.Interface) error {
				return write(ctx, t, e, c, "delete", e.nsA)
			}},
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

package chart

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kshard/kshard/pkg/sharding/ownerrecord"
	"github.com/kshard/kshard/pkg/sharding/partition"
	"github.com/kshard/kshard/test/framework"
)

// TestShardFencePolicyMatchesCode renders the chart's server-side fence and compares it
// with what pkg/sharding/ownerrecord builds for the same names, so the chart and the code
// (the local control plane's and the integration tests' policy) cannot drift. CEL is
// compared with runs of whitespace collapsed: the chart folds long expressions over lines.
func TestShardFencePolicyMatchesCode(t *testing.T) {
	tests := []struct {
		name      string
		release   string
		namespace string
		set       []string
		enabled   bool
		params    ownerrecord.PolicyParams
	}{
		{name: "defaults", release: "kshard", namespace: "kshard-system", enabled: true,
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "kshard-shard"}},
		{name: "other release and namespace", release: "blue", namespace: "tenants", enabled: true,
			set:    []string{"shardFence.ownerLabel=blue.kshard.io/owner"},
			params: ownerrecord.PolicyParams{Name: "blue-kshard-shard-fence-tenants", Namespace: "tenants", ServiceAccount: "blue-kshard-shard", OwnerLabel: "blue.kshard.io/owner"}},
		{name: "named shard ServiceAccount", release: "kshard", namespace: "kshard-system", enabled: true,
			set:    []string{"serviceAccount.shard.create=false", "serviceAccount.shard.name=my-shards"},
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "my-shards"}},
		{name: "disabled", release: "kshard", namespace: "kshard-system", set: []string{"shardFence.enabled=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, _ := Render(t, tc.release, tc.namespace, []string{filepath.Join(ChartDir(), "ci", "default-values.yaml")}, tc.set...)
			policies, bindings := objs.Kind("ValidatingAdmissionPolicy"), objs.Kind("ValidatingAdmissionPolicyBinding")
			coordinator := tc.release + "-coordinator"
			if !strings.Contains(tc.release, "kshard") {
				coordinator = tc.release + "-kshard-coordinator"
			}
			if !tc.enabled {
				if len(policies)+len(bindings) != 0 {
					t.Fatalf("shardFence.enabled=false still renders %d policies and %d bindings", len(policies), len(bindings))
				}
				for _, u := range objs.Kind("ClusterRole") {
					if strings.HasPrefix(u.GetName(), coordinator) {
						t.Errorf("shardFence.enabled=false still renders the coordinator ClusterRole %s", u.GetName())
					}
				}
				var role rbacv1.Role
				Into(t, objs.Get(t, "Role", coordinator), &role)
				if hasRule(role.Rules, "", "serviceaccounts", "impersonate") || hasNamedRule(role.Rules, "", "serviceaccounts", "impersonate", "kshard-shard") {
					t.Errorf("shardFence.enabled=false still lets the coordinator impersonate the shards")
				}
				return
			}
			if len(policies) != 1 || len(bindings) != 1 {
				t.Fatalf("%d policies and %d bindings rendered, want 1 and 1", len(policies), len(bindings))
			}
			var policy admissionregistrationv1.ValidatingAdmissionPolicy
			var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
			Into(t, policies[0], &policy)
			Into(t, bindings[0], &binding)
			wantPolicy, wantBinding := ownerrecord.Policy(tc.params), ownerrecord.Binding(tc.params)
			if policy.Name != wantPolicy.Name || binding.Name != wantBinding.Name {
				t.Errorf("names: policy %q binding %q, want %q", policy.Name, binding.Name, wantPolicy.Name)
			}
			gotSpec, wantSpec := normalizeCEL(policy.Spec), normalizeCEL(wantPolicy.Spec)
			if !apiequality.Semantic.DeepEqual(gotSpec, wantSpec) {
				t.Errorf("the chart's policy differs from ownerrecord.Policy(%+v):\nchart:\n%s\ncode:\n%s", tc.params, toYAML(t, gotSpec), toYAML(t, wantSpec))
			}
			if !apiequality.Semantic.DeepEqual(binding.Spec, wantBinding.Spec) {
				t.Errorf("the chart's binding differs from ownerrecord.Binding(%+v):\nchart:\n%s\ncode:\n%s", tc.params, toYAML(t, binding.Spec), toYAML(t, wantBinding.Spec))
			}

			// The coordinator may keep the record and probe it: namespaces list/watch/patch
			// cluster-wide, impersonation of the shard ServiceAccount and its pod-name extra,
			// nothing more.
			var cr rbacv1.ClusterRole
			Into(t, objs.Get(t, "ClusterRole", coordinator+"-"+tc.namespace), &cr)
			for _, v := range []string{"get", "list", "watch", "patch"} {
				if !hasRule(cr.Rules, "", "namespaces", v) {
					t.Errorf("coordinator ClusterRole %s lacks namespaces %s: %+v", cr.Name, v, cr.Rules)
				}
			}
			if !hasRule(cr.Rules, "authentication.k8s.io", "userextras/"+ownerrecord.PodNameExtra, "impersonate") {
				t.Errorf("coordinator ClusterRole %s lacks impersonation of the pod-name extra: %+v", cr.Name, cr.Rules)
			}
			var role rbacv1.Role
			Into(t, objs.Get(t, "Role", coordinator), &role)
			if !hasNamedRule(role.Rules, "", "serviceaccounts", "impersonate", tc.params.ServiceAccount) {
				t.Errorf("coordinator Role lacks impersonation of ServiceAccount %s: %+v", tc.params.ServiceAccount, role.Rules)
			}
			if hasRule(role.Rules, "", "configmaps", "create") {
				t.Errorf("coordinator Role may create ConfigMaps: the record is on the namespaces now")
			}
		})
	}
}

// TestShardFenceCoordinatorRBAC is the RBAC proof of the fence's record keeping: with only
// the chart's RBAC, the coordinator's ServiceAccount can claim the owner record, write a
// namespace's owner label, and probe admission as a shard (impersonating the shard
// ServiceAccount with its pod-name extra).
func TestShardFenceCoordinatorRBAC(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	r := installRBAC(t, f, "fence", ns, nil)
	coordSA, shardSA := r.coordinator.Spec.Template.Spec.ServiceAccountName, r.shard.Spec.Template.Spec.ServiceAccountName
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFor(t, f, ns, coordSA))
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.NewForConfigOrDie(cfg)
	pm := partition.Map{Count: partition.DefaultCount}
	// An owner label of this test's own, so that nothing else in the shared cluster reads it.
	params := ownerrecord.PolicyParams{Name: "fence-rbac-" + f.RunID, Namespace: ns, ServiceAccount: shardSA, OwnerLabel: "rbac-" + f.RunID + ".kshard.io/owner"}
	target := f.Namespace(t, nil).Name
	framework.Eventually(t, 30*time.Second, "the coordinator's RBAC is in force", func(ctx context.Context) (bool, error) {
		_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, err
	})
	labeler, err := ownerrecord.NewLabeler(meta, pm, params, ownerrecord.LabelerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- labeler.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	framework.Eventually(t, 30*time.Second, "the labeler's informer synced", func(context.Context) (bool, error) {
		return labeler.HasSynced(), nil
	})
	framework.Eventually(t, 10*time.Second, "namespace "+target+" seen", func(context.Context) (bool, error) {
		return slices.Contains(labeler.NamespacesOf(pm.For(target)), target), nil
	})
	if _, err := labeler.Activate(1, framework.CertainTenure{}); err != nil {
		t.Fatal(err)
	}
	res, err := labeler.Set(context.Background(), map[partition.ID]string{pm.For(target): "shard-a"})
	if err != nil {
		t.Fatalf("writing the owner label as %s: %v", coordSA, err)
	}
	if res.Writes == 0 {
		t.Fatalf("Set wrote nothing: %+v", res)
	}
	got, err := f.Client.CoreV1().Namespaces().Get(context.Background(), target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[params.OwnerLabel] != "shard-a" || got.Annotations[params.TermAnnotation()] != "1" {
		t.Errorf("namespace %s: labels %v annotations %v", target, got.Labels, got.Annotations)
	}
	// The probe: a dry-run Event as shard-a. Without this test's policy installed it is let
	// through; what matters is that the impersonation is allowed.
	shard, err := ownerrecord.ShardClient(cfg, params, "shard-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (ownerrecord.Prober{PolicyName: params.Name}).Allowed(context.Background(), shard, target); err != nil {
		t.Errorf("probing as shard-a with the coordinator's RBAC: %v", err)
	}
}

func hasRule(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if len(r.ResourceNames) == 0 && slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func hasNamedRule(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.ResourceNames, name) && slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}

// normalizeCEL collapses the whitespace of every CEL expression of a policy spec.
func normalizeCEL(s admissionregistrationv1.ValidatingAdmissionPolicySpec) admissionregistrationv1.ValidatingAdmissionPolicySpec {
	s = *s.DeepCopy()
	n := func(e string) string { return strings.Join(strings.Fields(e), " ") }
	for i := range s.MatchConditions {
		s.MatchConditions[i].Expression = n(s.MatchConditions[i].Expression)
	}
	for i := range s.Variables {
		s.Variables[i].Expression = n(s.Variables[i].Expression)
	}
	for i := range s.Validations {
		s.Validations[i].Expression = n(s.Validations[i].Expression)
		s.Validations[i].MessageExpression = n(s.Validations[i].MessageExpression)
	}
	for i := range s.AuditAnnotations {
		s.AuditAnnotations[i].ValueExpression = n(s.AuditAnnotations[i].ValueExpression)
	}
	return s
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

package chart

import (
	"context"
	"fmt"
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
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "kshard-shard", ConfigMap: "kshard-owners"}},
		{name: "other release and namespace", release: "blue", namespace: "tenants", enabled: true,
			params: ownerrecord.PolicyParams{Name: "blue-kshard-shard-fence-tenants", Namespace: "tenants", ServiceAccount: "blue-kshard-shard", ConfigMap: "blue-kshard-owners"}},
		{name: "named shard ServiceAccount", release: "kshard", namespace: "kshard-system", enabled: true,
			set:    []string{"serviceAccount.shard.create=false", "serviceAccount.shard.name=my-shards"},
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "my-shards", ConfigMap: "kshard-owners"}},
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
				if hasRule(role.Rules, "", "configmaps", "create") {
					t.Errorf("shardFence.enabled=false still lets the coordinator create ConfigMaps")
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

			// The coordinator may keep the record: namespaces list/watch/patch cluster-wide,
			// the owner ConfigMap created and then read and updated by name, nothing more.
			var cr rbacv1.ClusterRole
			Into(t, objs.Get(t, "ClusterRole", coordinator+"-"+tc.namespace), &cr)
			for _, v := range []string{"list", "watch", "patch"} {
				if !hasRule(cr.Rules, "", "namespaces", v) {
					t.Errorf("coordinator ClusterRole %s lacks namespaces %s: %+v", cr.Name, v, cr.Rules)
				}
			}
			var role rbacv1.Role
			Into(t, objs.Get(t, "Role", coordinator), &role)
			if !hasRule(role.Rules, "", "configmaps", "create") {
				t.Errorf("coordinator Role lacks configmaps create: %+v", role.Rules)
			}
			for _, v := range []string{"get", "update"} {
				if !hasNamedRule(role.Rules, "", "configmaps", v, tc.params.ConfigMap) {
					t.Errorf("coordinator Role lacks configmaps %s on %s: %+v", v, tc.params.ConfigMap, role.Rules)
				}
			}
		})
	}
}

// TestShardFenceCoordinatorRBAC is the RBAC proof of the fence's record keeping: with only
// the chart's RBAC, the coordinator's ServiceAccount can run the partition Labeler and
// write the owner ConfigMap (create, then update) the rendered binding points at.
func TestShardFenceCoordinatorRBAC(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	r := installRBAC(t, f, "fence", ns, nil)
	coordSA := r.coordinator.Spec.Template.Spec.ServiceAccountName
	bindings := r.objs.Kind("ValidatingAdmissionPolicyBinding")
	if len(bindings) != 1 {
		t.Fatalf("%d ValidatingAdmissionPolicyBindings rendered, want 1", len(bindings))
	}
	var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
	Into(t, bindings[0], &binding)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFor(t, f, ns, coordSA))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	meta := metadata.NewForConfigOrDie(cfg)
	pm := partition.Map{Count: partition.DefaultCount}

	// A namespace to label, picked out by a label of this test so the Labeler leaves
	// the rest of the shared cluster alone.
	mark := "kshard.io/fence-rbac-" + f.RunID
	target := f.Namespace(t, map[string]string{mark: "1"}).Name
	framework.Eventually(t, 30*time.Second, "the coordinator's RBAC is in force", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, err
	})
	labeler, err := ownerrecord.NewLabeler(meta, pm, ownerrecord.LabelerOptions{Selector: mark + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- labeler.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	want := ownerrecord.Key(pm.For(target))
	framework.Eventually(t, 30*time.Second, "namespace "+target+" labelled by the coordinator's ServiceAccount", func(ctx context.Context) (bool, error) {
		got, err := f.Client.CoreV1().Namespaces().Get(ctx, target, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if got.Labels[ownerrecord.PartitionLabel] != want {
			return false, fmt.Errorf("label %q, want %q", got.Labels[ownerrecord.PartitionLabel], want)
		}
		return true, nil
	})

	w, err := ownerrecord.NewWriter(client, binding.Spec.ParamRef.Namespace, binding.Spec.ParamRef.Name, pm)
	if err != nil {
		t.Fatal(err)
	}
	for i, owner := range []string{"shard-a", "shard-b"} { // create, then update
		if err := w.Set(context.Background(), map[partition.ID]string{pm.For(target): owner}); err != nil {
			t.Fatalf("write %d of the owner record as %s: %v", i+1, coordSA, err)
		}
	}
	if w.Writes() != 2 || w.ResourceVersion() == "" {
		t.Errorf("writes %d, resourceVersion %q; want 2 and a version", w.Writes(), w.ResourceVersion())
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

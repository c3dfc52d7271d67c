package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "kshard-shard",
				CoordinatorUser: "system:serviceaccount:kshard-system:kshard-coordinator"}},
		{name: "other release and namespace", release: "blue", namespace: "tenants", enabled: true,
			set: []string{"shardFence.ownerLabel=blue.kshard.io/owner"},
			params: ownerrecord.PolicyParams{Name: "blue-kshard-shard-fence-tenants", Namespace: "tenants", ServiceAccount: "blue-kshard-shard", OwnerLabel: "blue.kshard.io/owner",
				CoordinatorUser: "system:serviceaccount:tenants:blue-kshard-coordinator"}},
		{name: "named ServiceAccounts", release: "kshard", namespace: "kshard-system", enabled: true,
			set: []string{"serviceAccount.shard.create=false", "serviceAccount.shard.name=my-shards",
				"serviceAccount.coordinator.create=false", "serviceAccount.coordinator.name=my-coordinators"},
			params: ownerrecord.PolicyParams{Name: "kshard-shard-fence-kshard-system", Namespace: "kshard-system", ServiceAccount: "my-shards",
				CoordinatorUser: "system:serviceaccount:kshard-system:my-coordinators"}},
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
			wantPolicies, wantBindings := ownerrecord.Policies(tc.params), ownerrecord.Bindings(tc.params)
			if len(policies) != len(wantPolicies) || len(bindings) != len(wantBindings) {
				t.Fatalf("%d policies and %d bindings rendered, want %d and %d", len(policies), len(bindings), len(wantPolicies), len(wantBindings))
			}
			for i, wantPolicy := range wantPolicies {
				var policy admissionregistrationv1.ValidatingAdmissionPolicy
				var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
				Into(t, objs.Get(t, "ValidatingAdmissionPolicy", wantPolicy.Name), &policy)
				Into(t, objs.Get(t, "ValidatingAdmissionPolicyBinding", wantBindings[i].Name), &binding)
				gotSpec, wantSpec := normalizeCEL(policy.Spec), normalizeCEL(wantPolicy.Spec)
				if !apiequality.Semantic.DeepEqual(gotSpec, wantSpec) {
					t.Errorf("the chart's policy %s differs from ownerrecord's (%+v):\nchart:\n%s\ncode:\n%s", policy.Name, tc.params, toYAML(t, gotSpec), toYAML(t, wantSpec))
				}
				if !apiequality.Semantic.DeepEqual(binding.Spec, wantBindings[i].Spec) {
					t.Errorf("the chart's binding %s differs from ownerrecord's (%+v):\nchart:\n%s\ncode:\n%s", binding.Name, tc.params, toYAML(t, binding.Spec), toYAML(t, wantBindings[i].Spec))
				}
				// What the coordinator's Checker compares: the chart's objects are "ok".
				if d := ownerrecord.PolicySpecDiff(policy.Spec, wantPolicy.Spec); d != "" {
					t.Errorf("the Checker would find the chart's policy %s modified at %s", policy.Name, d)
				}
			}
			var probeRole rbacv1.ClusterRole
			var probeBinding rbacv1.ClusterRoleBinding
			wantRole, wantRB := ownerrecord.ProbeClusterRole(tc.params), ownerrecord.ProbeClusterRoleBinding(tc.params)
			Into(t, objs.Get(t, "ClusterRole", wantRole.Name), &probeRole)
			Into(t, objs.Get(t, "ClusterRoleBinding", wantRB.Name), &probeBinding)
			if !apiequality.Semantic.DeepEqual(probeRole.Rules, wantRole.Rules) {
				t.Errorf("the chart's probe ClusterRole rules %+v, want %+v", probeRole.Rules, wantRole.Rules)
			}
			if !apiequality.Semantic.DeepEqual(probeBinding.RoleRef, wantRB.RoleRef) || !apiequality.Semantic.DeepEqual(probeBinding.Subjects, wantRB.Subjects) {
				t.Errorf("the chart's probe ClusterRoleBinding %+v %+v, want %+v %+v", probeBinding.RoleRef, probeBinding.Subjects, wantRB.RoleRef, wantRB.Subjects)
			}

			// The coordinator may keep the record, probe it as the probe user, and read the
			// fence's objects by name; it may not impersonate the shards.
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
			if !hasNamedRule(cr.Rules, "", "users", "impersonate", tc.params.ProbeUser()) {
				t.Errorf("coordinator ClusterRole %s lacks impersonation of the probe user %s: %+v", cr.Name, tc.params.ProbeUser(), cr.Rules)
			}
			for _, p := range wantPolicies {
				for _, res := range []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"} {
					for _, v := range []string{"get", "list", "watch"} {
						if !hasNamedRule(cr.Rules, "admissionregistration.k8s.io", res, v, p.Name) {
							t.Errorf("coordinator ClusterRole %s lacks %s of %s %s", cr.Name, v, res, p.Name)
						}
					}
				}
			}
			var role rbacv1.Role
			Into(t, objs.Get(t, "Role", coordinator), &role)
			for _, rules := range [][]rbacv1.PolicyRule{role.Rules, cr.Rules} {
				for _, r := range rules {
					if slices.Contains(r.Resources, "serviceaccounts") && slices.Contains(r.Verbs, "impersonate") {
						t.Errorf("the coordinator may impersonate ServiceAccounts %v: it must probe as the probe user only", r.ResourceNames)
					}
				}
			}
			if !hasRule(role.Rules, "", "events", "create") {
				t.Errorf("coordinator Role lacks creating Events (the fence check's): %+v", role.Rules)
			}
			if hasRule(role.Rules, "", "configmaps", "create") {
				t.Errorf("coordinator Role may create ConfigMaps: the record is on the namespaces now")
			}
		})
	}
}

// TestShardFenceCoordinatorRBAC is the RBAC proof of the fence's record keeping: with the
// chart's RBAC and its fence installed, the coordinator's ServiceAccount can claim the
// owner record, write a namespace's owner label, probe admission as the probe user, and
// check the fence (its Checker finds every policy and binding as built); it cannot act
// as a shard.
func TestShardFenceCoordinatorRBAC(t *testing.T) {
	f := framework.Get(t)
	ns := f.Namespace(t, nil).Name
	// An owner label of this test's own, so that nothing else in the shared cluster reads
	// it (the record guard refuses everyone but this release's coordinator on it).
	label := "rbac-" + f.RunID + ".kshard.io/owner"
	r := installRBAC(t, f, "fence", ns, nil, "shardFence.ownerLabel="+label)
	coordSA, shardSA := r.coordinator.Spec.Template.Spec.ServiceAccountName, r.shard.Spec.Template.Spec.ServiceAccountName
	params := ownerrecord.PolicyParams{Namespace: ns, ServiceAccount: shardSA, OwnerLabel: label}
	for _, u := range r.objs.Kind("ValidatingAdmissionPolicy") {
		if n := u.GetName(); !strings.HasSuffix(n, ownerrecord.RecordPolicySuffix) && !strings.HasSuffix(n, ownerrecord.LimitsPolicySuffix) {
			params.Name = n
		}
	}
	applyFence(t, f, r)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigFor(t, f, ns, coordSA))
	if err != nil {
		t.Fatal(err)
	}
	meta := metadata.NewForConfigOrDie(cfg)
	pm := partition.Map{Count: partition.DefaultCount}
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
	// The probe: a dry-run Event as the probe user for shard-a, let through once the
	// API server enforces the new label; and refused for another shard.
	probe, err := ownerrecord.ProbeClient(cfg, params, "shard-a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := ownerrecord.ProbeClient(cfg, params, "shard-b")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if _, _, err := (ownerrecord.Prober{PolicyName: params.Name}).WaitEnforced(wctx, probe, other, target); err != nil {
		t.Errorf("probing as shard-a (let through) and shard-b (refused) with the coordinator's RBAC: %v", err)
	}
	// The coordinator may not act as a shard (it did before issue 25: impersonate on the
	// shard ServiceAccount, whose rights read every Secret of the cluster).
	asShard, err := ownerrecord.ShardClient(cfg, params, "shard-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asShard.CoreV1().Secrets(target).List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the coordinator listing Secrets as the shard ServiceAccount: %v; want Forbidden", err)
	} else {
		t.Logf("impersonating the shard refused as expected: %v", err)
	}
	// The fence check with the coordinator's RBAC: it learns its own user name and finds
	// the chart's objects as built.
	checker, err := ownerrecord.NewChecker(ownerrecord.CheckerOptions{Params: params, Client: kubernetes.NewForConfigOrDie(cfg)}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = checker.Run(ctx) }()
	framework.Eventually(t, 30*time.Second, "the fence check with the coordinator's RBAC finds the chart's fence enforced", func(context.Context) (bool, error) {
		if !checker.Enforced() {
			return false, fmt.Errorf("%v", checker.Status())
		}
		return true, nil
	})
}

// applyFence applies the release's rendered fence policies and bindings, and deletes them
// when the test ends.
func applyFence(t *testing.T, f *framework.Framework, r *release) {
	t.Helper()
	var docs []string
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		for _, u := range r.objs.Kind(kind) {
			b, err := yaml.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
			k, n := strings.ToLower(kind), u.GetName()
			t.Cleanup(func() {
				if out, err := runKubectl(t, f, "delete", k, n, "--ignore-not-found"); err != nil {
					t.Errorf("deleting %s %s: %v\n%s", k, n, err, out)
				}
			})
		}
	}
	path := filepath.Join(t.TempDir(), r.name+"-fence.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply (release %s fence):\n%s", r.name, kubectl(t, f, "apply", "-f", path))
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

// TestFencePrometheusRule renders the optional PrometheusRule: off by default and without
// the fence; on, it alerts per fence object that is not as built (kshard_fence_check) and
// when no coordinator reports the check, both scoped to the release's namespace.
func TestFencePrometheusRule(t *testing.T) {
	tests := []struct {
		name string
		set  []string
		want bool
	}{
		{name: "default off"},
		{name: "on", set: []string{"metrics.prometheusRule.enabled=true", "metrics.prometheusRule.fenceFor=2m"}, want: true},
		{name: "on without the fence", set: []string{"metrics.prometheusRule.enabled=true", "shardFence.enabled=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, _ := Render(t, "kshard", "kshard-system", nil, tc.set...)
			rules := objs.Kind("PrometheusRule")
			if (len(rules) == 1) != tc.want || len(rules) > 1 {
				t.Fatalf("%d PrometheusRules rendered, want it: %t", len(rules), tc.want)
			}
			if !tc.want {
				return
			}
			var rule struct {
				metav1.TypeMeta   `json:",inline"`
				metav1.ObjectMeta `json:"metadata"`
				Spec              struct {
					Groups []struct {
						Name  string `json:"name"`
						Rules []struct {
							Alert       string            `json:"alert"`
							Expr        string            `json:"expr"`
							For         string            `json:"for"`
							Labels      map[string]string `json:"labels"`
							Annotations map[string]string `json:"annotations"`
						} `json:"rules"`
					} `json:"groups"`
				} `json:"spec"`
			}
			Into(t, rules[0], &rule)
			alerts := map[string]string{}
			for _, g := range rule.Spec.Groups {
				for _, r := range g.Rules {
					alerts[r.Alert] = r.Expr
					if r.Alert == "KShardFenceNotEnforced" && r.For != "2m" {
						t.Errorf("KShardFenceNotEnforced for %q, want metrics.prometheusRule.fenceFor 2m", r.For)
					}
					if r.Labels["severity"] == "" || !strings.Contains(r.Annotations["summary"], "kshard") {
						t.Errorf("alert %s: labels %v annotations %v", r.Alert, r.Labels, r.Annotations)
					}
				}
			}
			for alert, want := range map[string][]string{
				"KShardFenceNotEnforced": {"kshard_fence_check", `namespace="kshard-system"`, `state!="ok"`},
				"KShardFenceCheckAbsent": {"absent(kshard_fence_enforced", `namespace="kshard-system"`},
			} {
				for _, w := range want {
					if !strings.Contains(alerts[alert], w) {
						t.Errorf("alert %s expr %q lacks %q", alert, alerts[alert], w)
					}
				}
			}
		})
	}
}

package ownerrecord

import (
	"errors"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// variable returns the expression of the policy variable name ("" when none).
func variable(p *admissionregistrationv1.ValidatingAdmissionPolicy, name string) string {
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

func TestPolicyParams(t *testing.T) {
	tests := []struct {
		name    string
		params  PolicyParams
		wantErr bool
	}{
		{name: "defaults", params: PolicyParams{Namespace: "kshard-system", ServiceAccount: "kshard-shard", ClusterPartition: "2457"}},
		{name: "all named", params: PolicyParams{Name: "x-fence", Namespace: "ns", ServiceAccount: "sa", PartitionLabel: "blue.kshard.io/partition", ClusterPartition: "0"}},
		{name: "quote in the partition label", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", PartitionLabel: "x'y", ClusterPartition: "1"}, wantErr: true},
		{name: "partition label not a label key", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", PartitionLabel: "a/b/c", ClusterPartition: "1"}, wantErr: true},
		{name: "quote in the coordinator user", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", CoordinatorUser: "x'", ClusterPartition: "1"}, wantErr: true},
		{name: "no namespace", params: PolicyParams{ServiceAccount: "sa"}, wantErr: true},
		{name: "no ServiceAccount", params: PolicyParams{Namespace: "ns"}, wantErr: true},
		{name: "no cluster partition", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa"}, wantErr: true},
		{name: "cluster partition not a number", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", ClusterPartition: "1' || true"}, wantErr: true},
		{name: "cluster partition with a leading zero", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", ClusterPartition: "07"}, wantErr: true},
		{name: "cluster partition out of range", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", ClusterPartition: "65536"}, wantErr: true},
		{name: "quote in a name", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa'", ClusterPartition: "1"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.params.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate error = %v, wantErr %t", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			p := tt.params.withDefaults()
			policy, binding := Policy(tt.params), Binding(tt.params)
			if policy.Name != p.Name || binding.Spec.PolicyName != p.Name {
				t.Errorf("policy %q, binding's policyName %q, want %q", policy.Name, binding.Spec.PolicyName, p.Name)
			}
			if got := policy.Spec.MatchConditions[0].Expression; !strings.Contains(got, "'system:serviceaccount:"+p.Namespace+":"+p.ServiceAccount+"'") {
				t.Errorf("match condition %q does not name the shard ServiceAccount", got)
			}
			if policy.Spec.ParamKind != nil || binding.Spec.ParamRef != nil {
				t.Errorf("the policy has params (%+v, %+v): it must ask the authorizer", policy.Spec.ParamKind, binding.Spec.ParamRef)
			}
			if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
				t.Errorf("failurePolicy %v, want Fail", fp)
			}
			if got := variable(policy, "partition"); !strings.Contains(got, "'"+p.PartitionLabel+"'") {
				t.Errorf("partition variable %q does not read label %s", got, p.PartitionLabel)
			}
			// The owner record: the shard's owner subject, asked of the authorizer in
			// kshard's namespace, the verb own on the namespace's partition.
			owns := variable(policy, "owns")
			for _, want := range []string{
				"authorizer.serviceAccount('" + p.Namespace + "', '" + OwnerRolePrefix + "' + variables.shard)",
				".group('" + PartitionsGroup + "')", ".resource('" + PartitionsResource + "')", ".namespace('" + p.Namespace + "')",
				".name(variables.partition)", ".check('" + OwnVerb + "')", "variables.partition != ''", "variables.shard != ''",
			} {
				if !strings.Contains(owns, want) {
					t.Errorf("owns variable %q lacks %s", owns, want)
				}
			}
			if len(policy.Spec.Validations) != 1 || policy.Spec.Validations[0].Expression != "variables.owns" {
				t.Errorf("validations %+v, want variables.owns alone", policy.Spec.Validations)
			}
		})
	}
}

func TestIsRefusal(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil},
		{name: "fence denial", err: apierrors.NewForbidden(gr, "x", errors.New("ValidatingAdmissionPolicy 'kshard-shard-fence' with binding 'kshard-shard-fence' denied request: "+MessagePrefix+" shard b ...")), want: true},
		{name: "missing params", err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", nil), want: false},
		{name: "rbac", err: apierrors.NewForbidden(gr, "x", errors.New("User cannot create resource")), want: false},
		{name: "other policy", err: apierrors.NewForbidden(gr, "x", errors.New("ValidatingAdmissionPolicy 'other' denied request: no")), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsRefusal(tt.err, ""); got != tt.want {
				t.Errorf("IsRefusal(%v) = %t, want %t", tt.err, got, tt.want)
			}
		})
	}
}

// TestGuards checks the record guard and the shard limits name the identities, label
// and record objects they guard, and that every policy has its binding.
func TestGuards(t *testing.T) {
	tests := []struct {
		name   string
		params PolicyParams
	}{
		{name: "defaults", params: PolicyParams{Namespace: "kshard-system", ServiceAccount: "kshard-shard", ClusterPartition: "2457",
			CoordinatorUser: ServiceAccountUser("kshard-system", "kshard-coordinator")}},
		{name: "own label", params: PolicyParams{Name: "blue-fence", Namespace: "tenants", ServiceAccount: "blue-shard",
			PartitionLabel: "blue.kshard.io/partition", ClusterPartition: "0", CoordinatorUser: "system:serviceaccount:tenants:blue-coordinator"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.params.withDefaults()
			policies, bindings := Policies(tt.params), Bindings(tt.params)
			if len(policies) != 3 || len(bindings) != 3 {
				t.Fatalf("%d policies and %d bindings, want 3 and 3", len(policies), len(bindings))
			}
			wantNames := []string{p.Name, p.Name + RecordPolicySuffix, p.Name + LimitsPolicySuffix}
			for i := range policies {
				if policies[i].Name != wantNames[i] || bindings[i].Name != wantNames[i] || bindings[i].Spec.PolicyName != wantNames[i] {
					t.Errorf("policy %d: %q, binding %q for %q; want all %q", i, policies[i].Name, bindings[i].Name, bindings[i].Spec.PolicyName, wantNames[i])
				}
				if fp := policies[i].Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
					t.Errorf("policy %s: failurePolicy %v, want Fail", policies[i].Name, fp)
				}
				if got := bindings[i].Spec.ValidationActions; len(got) != 1 || got[0] != admissionregistrationv1.Deny {
					t.Errorf("binding %s: validationActions %v, want [Deny]", bindings[i].Name, got)
				}
			}
			fence := policies[0].Spec.MatchConditions[0].Expression
			if !strings.Contains(fence, "'"+p.ProbeUser()+"'") || !strings.Contains(fence, "'"+p.Username()+"'") {
				t.Errorf("the fence's match condition %q does not name both the shard and the probe user", fence)
			}

			record := policies[1]
			rules := record.Spec.MatchConstraints.ResourceRules
			if len(rules) != 2 {
				t.Fatalf("record guard rules %+v: want one for namespaces and one for RBAC", rules)
			}
			if !slices.Equal(rules[0].Resources, []string{"namespaces", "namespaces/*"}) || *rules[0].Scope != admissionregistrationv1.ClusterScope ||
				slices.Contains(rules[0].Operations, admissionregistrationv1.Delete) {
				t.Errorf("record guard rule %+v: want CREATE and UPDATE of namespaces and their subresources", rules[0])
			}
			if !slices.Equal(rules[1].APIGroups, []string{"rbac.authorization.k8s.io"}) ||
				!slices.Equal(rules[1].Resources, []string{"roles", "rolebindings", "clusterrolebindings"}) ||
				!slices.Contains(rules[1].Operations, admissionregistrationv1.Delete) || !slices.Contains(rules[1].Operations, admissionregistrationv1.Update) {
				t.Errorf("record guard rule %+v: want CREATE, UPDATE and DELETE of Roles, RoleBindings and ClusterRoleBindings", rules[1])
			}
			match := record.Spec.MatchConditions[0].Expression
			for _, want := range []string{"'" + p.CoordinatorUser + "'", "'" + p.PartitionLabel + "'", "'" + OwnerRolePrefix + "'",
				"'" + TermRoleName + "'", "'" + p.Namespace + "'", "oldObject != null"} {
				if !strings.Contains(match, want) {
					t.Errorf("record guard match condition lacks %s: %s", want, match)
				}
			}
			// The coordinator may write owner Roles only with resourceNames.
			var shape string
			for _, v := range record.Spec.Validations {
				if !strings.Contains(v.MessageExpression, RecordMessagePrefix) {
					t.Errorf("record guard message %q lacks %q", v.MessageExpression, RecordMessagePrefix)
				}
				if strings.Contains(v.Expression, "resourceNames") {
					shape = v.Expression
				}
			}
			if !strings.Contains(shape, "size(r.resourceNames) > 0") {
				t.Errorf("no record guard validation refuses an owner rule without resourceNames: %q", shape)
			}

			limits := policies[2]
			match = limits.Spec.MatchConditions[0].Expression
			for _, want := range []string{"'" + p.Username() + "'", "'" + p.ProbeUser() + "'", "request.operation == 'DELETE'"} {
				if !strings.Contains(match, want) {
					t.Errorf("limits match condition lacks %s: %s", want, match)
				}
			}

			role, rb := ProbeClusterRole(tt.params), ProbeClusterRoleBinding(tt.params)
			if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Verbs, []string{"create"}) || !slices.Equal(role.Rules[0].Resources, []string{"events"}) {
				t.Errorf("probe ClusterRole rules %+v: want create events only", role.Rules)
			}
			if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != p.ProbeUser() || rb.Subjects[0].Kind != "User" {
				t.Errorf("probe ClusterRoleBinding %+v does not bind %s to user %s", rb, role.Name, p.ProbeUser())
			}
		})
	}
}

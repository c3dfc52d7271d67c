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

func TestPolicyParams(t *testing.T) {
	tests := []struct {
		name    string
		params  PolicyParams
		wantErr bool
	}{
		{name: "defaults", params: PolicyParams{Namespace: "kshard-system", ServiceAccount: "kshard-shard"}},
		{name: "all named", params: PolicyParams{Name: "x-fence", Namespace: "ns", ServiceAccount: "sa", OwnerLabel: "blue.kshard.io/owner"}},
		{name: "quote in the owner label", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa", OwnerLabel: "x'y"}, wantErr: true},
		{name: "no namespace", params: PolicyParams{ServiceAccount: "sa"}, wantErr: true},
		{name: "no ServiceAccount", params: PolicyParams{Namespace: "ns"}, wantErr: true},
		{name: "quote in a name", params: PolicyParams{Namespace: "ns", ServiceAccount: "sa'"}, wantErr: true},
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
				t.Errorf("the policy has params (%+v, %+v): it must read the owner from the namespace", policy.Spec.ParamKind, binding.Spec.ParamRef)
			}
			if fp := policy.Spec.FailurePolicy; fp == nil || *fp != admissionregistrationv1.Fail {
				t.Errorf("failurePolicy %v, want Fail", fp)
			}
			if got := policy.Spec.Variables[1].Expression; !strings.Contains(got, "'"+p.OwnerLabel+"'") {
				t.Errorf("owner variable %q does not read label %s", got, p.OwnerLabel)
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

// TestGuards checks the record guard and the shard limits name the identities and keys
// they guard, and that every policy has its binding.
func TestGuards(t *testing.T) {
	tests := []struct {
		name   string
		params PolicyParams
	}{
		{name: "defaults", params: PolicyParams{Namespace: "kshard-system", ServiceAccount: "kshard-shard",
			CoordinatorUser: ServiceAccountUser("kshard-system", "kshard-coordinator")}},
		{name: "own label", params: PolicyParams{Name: "blue-fence", Namespace: "tenants", ServiceAccount: "blue-shard",
			OwnerLabel: "blue.kshard.io/owner", CoordinatorUser: "system:serviceaccount:tenants:blue-coordinator"}},
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
			if len(rules) != 1 || !slices.Equal(rules[0].Resources, []string{"namespaces", "namespaces/*"}) ||
				*rules[0].Scope != admissionregistrationv1.ClusterScope || slices.Contains(rules[0].Operations, admissionregistrationv1.Delete) {
				t.Errorf("record guard rules %+v: want CREATE and UPDATE of namespaces and their subresources", rules)
			}
			match := record.Spec.MatchConditions[0].Expression
			for _, want := range []string{"'" + p.CoordinatorUser + "'", "'" + p.OwnerLabel + "'", "'" + p.TermAnnotation() + "'", "oldObject != null"} {
				if !strings.Contains(match, want) {
					t.Errorf("record guard match condition lacks %s: %s", want, match)
				}
			}
			if !strings.Contains(record.Spec.Validations[0].MessageExpression, RecordMessagePrefix) {
				t.Errorf("record guard message %q lacks %q", record.Spec.Validations[0].MessageExpression, RecordMessagePrefix)
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

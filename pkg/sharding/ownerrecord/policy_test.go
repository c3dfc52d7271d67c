package ownerrecord

import (
	"errors"
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

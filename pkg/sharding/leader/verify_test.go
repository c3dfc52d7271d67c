package leader

import (
	"context"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func electionLease(holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
}

func TestVerifierDeposed(t *testing.T) {
	const me = "coordinator-a@10.0.0.1:9090#abcd1234"
	tests := []struct {
		name         string
		objects      []runtime.Object
		failReads    bool
		term         uint64
		wantEvidence string // "" means none
		wantErr      bool
	}{
		{name: "still the holder, still the highest term: a claim alone is no evidence",
			objects: []runtime.Object{electionLease(me), termLease("5")}, term: 5},
		{name: "another holder", objects: []runtime.Object{electionLease("coordinator-b@10.0.0.2:9090#ffff0000"), termLease("5")}, term: 5,
			wantEvidence: `held by "coordinator-b@10.0.0.2:9090#ffff0000"`},
		{name: "released", objects: []runtime.Object{electionLease(""), termLease("5")}, term: 5, wantEvidence: `held by ""`},
		{name: "a higher term recorded", objects: []runtime.Object{electionLease(me), termLease("6")}, term: 5,
			wantEvidence: "term 6 is recorded"},
		{name: "both", objects: []runtime.Object{electionLease("other"), termLease("9")}, term: 5,
			wantEvidence: `not by this coordinator; term 9 is recorded`},
		{name: "election Lease deleted: our next renewal creates it again", objects: []runtime.Object{termLease("5")}, term: 5},
		{name: "no term record (an older version led): not evidence", objects: []runtime.Object{electionLease(me)}, term: 5},
		{name: "API unreachable: no evidence, and an error", objects: []runtime.Object{electionLease("other")}, failReads: true, term: 5, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientset(tt.objects...)
			if tt.failReads {
				c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				})
			}
			v := NewVerifier(&Options{ResourceName: testLease, ResourceNamespace: testNamespace}, c, me)
			got, err := v.Deposed(context.Background(), tt.term)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Deposed error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantEvidence == "" && got != "" {
				t.Fatalf("Deposed = %q, want no evidence", got)
			}
			if tt.wantEvidence != "" && !strings.Contains(got, tt.wantEvidence) {
				t.Fatalf("Deposed = %q, want evidence containing %q", got, tt.wantEvidence)
			}
		})
	}
}

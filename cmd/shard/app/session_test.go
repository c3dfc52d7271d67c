package app

import (
	"context"
	"math"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/kshard/kshard/pkg/sharding/leader"
)

// TestLeaseHolderAddress: --coordinator-lease's reader returns the address in the holder
// identity the coordinators write (leader.Identity), nothing while nobody holds the Lease,
// and an error for a missing Lease or an identity without an address.
func TestLeaseHolderAddress(t *testing.T) {
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		want    string
		wantErr bool
	}{
		{name: "held", lease: lease(ptr.To(leader.Identity("kshard-coordinator-0", "10.1.2.3:9443"))), want: "10.1.2.3:9443"},
		{name: "IPv6 holder", lease: lease(ptr.To(leader.Identity("c", "[fd00::7]:9443"))), want: "[fd00::7]:9443"},
		{name: "released", lease: lease(ptr.To(""))},
		{name: "never held", lease: lease(nil)},
		{name: "no Lease", wantErr: true},
		{name: "an identity of another kind", lease: lease(ptr.To("somebody-else")), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.lease != nil {
				client = fake.NewClientset(tc.lease)
			}
			got, err := leaseHolderAddress(client, "kshard", "kshard-coordinator")(context.Background())
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("address %q, err %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func lease(holder *string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kshard", Name: "kshard-coordinator"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: holder}}
}

// TestMilli: a rate in the load report's thousandths, rounded, within uint32.
func TestMilli(t *testing.T) {
	tests := []struct {
		name string
		in   float64
		want uint32
	}{
		{name: "zero", in: 0, want: 0},
		{name: "rounded", in: 1.2345, want: 1235},
		{name: "negative is 0", in: -1, want: 0},
		{name: "NaN is 0", in: math.NaN(), want: 0},
		{name: "huge saturates", in: 1e12, want: math.MaxUint32},
		{name: "+Inf saturates", in: math.Inf(1), want: math.MaxUint32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := milli(tc.in); got != tc.want {
				t.Errorf("milli(%v) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

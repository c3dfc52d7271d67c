package leader

import (
	"strings"
	"testing"
	"time"
)

func TestAddressOf(t *testing.T) {
	tests := []struct {
		name     string
		identity string
		want     string
	}{
		{name: "made by Identity", identity: Identity("coordinator-7d9f", "10.0.0.5:9090"), want: "10.0.0.5:9090"},
		{name: "ipv6", identity: Identity("c-0", "[fd00::1]:9090"), want: "[fd00::1]:9090"},
		{name: "name with at sign", identity: "a@b@127.0.0.1:1#abcd1234", want: "127.0.0.1:1"},
		{name: "foreign identity", identity: "kube-controller-manager_1234", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AddressOf(tc.identity); got != tc.want {
				t.Errorf("AddressOf(%q) = %q, want %q", tc.identity, got, tc.want)
			}
		})
	}
}

func TestIdentityIsUniquePerCall(t *testing.T) {
	first, second := Identity("c", "a:1"), Identity("c", "a:1")
	if first == second {
		t.Fatal("two identities for the same name must differ, so a restart bumps the Lease transitions")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Options) {}},
		{name: "lease not above renew", mutate: func(o *Options) { o.LeaseDuration = o.RenewDeadline }, wantErr: "lease-duration"},
		{name: "renew not above retry", mutate: func(o *Options) { o.RetryPeriod = 20 * time.Second }, wantErr: "renew-deadline"},
		{name: "disabled skips checks", mutate: func(o *Options) { o.Enabled = false; o.RetryPeriod = 0 }},
		{name: "renew within client-go's jitter of retry", mutate: func(o *Options) { o.RenewDeadline, o.RetryPeriod = 10*time.Second, 9*time.Second },
			wantErr: "1.2 × --leader-elect-retry-period (9s) = 10.8s"},
		{name: "renew just above the jitter", mutate: func(o *Options) { o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second }},
		{name: "sub-second lease", mutate: func(o *Options) {
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 900*time.Millisecond, 600*time.Millisecond, 100*time.Millisecond
		}, wantErr: "at least 1s"},
		{name: "negative retry", mutate: func(o *Options) { o.RetryPeriod = -time.Second }, wantErr: "retry-period must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			err := o.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

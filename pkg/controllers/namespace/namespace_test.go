package namespace

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kshard/kshard/pkg/controllers"
)

// TestEnqueue: a namespace being deleted is queued after the deletion grace period,
// another is not queued.
func TestEnqueue(t *testing.T) {
	tests := []struct {
		name     string
		ns       *corev1.Namespace
		wantWait time.Duration
	}{
		{name: "active", ns: newNamespace(false, corev1.FinalizerKubernetes)},
		{name: "being deleted", ns: newNamespace(true, corev1.FinalizerKubernetes), wantWait: 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, newNamespace(false))
			f.ctrl.enqueue(tc.ns)
			got, ok := f.Queue.After(tenant)
			if ok != (tc.wantWait != 0) || got != tc.wantWait {
				t.Errorf("queued after %v (%v), want %v", got, ok, tc.wantWait)
			}
		})
	}
}

// TestResync: every terminating namespace of the cache is queued again each sync period.
func TestResync(t *testing.T) {
	f := newFixture(t, newNamespace(true, corev1.FinalizerKubernetes))
	f.ctrl.resync()
	if _, ok := f.Queue.After(tenant); !ok {
		t.Error("terminating namespace not queued by the resync")
	}
}

// TestRateLimiter: upstream's namespace queue backoff, 5 ms doubling to 60 s at most.
func TestRateLimiter(t *testing.T) {
	rl := RateLimiter()
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	for i, w := range want {
		if got := rl.When("ns"); got != w {
			t.Errorf("failure %d: %v, want %v", i+1, got, w)
		}
	}
	for range 30 {
		rl.When("ns")
	}
	if got := rl.When("ns"); got != time.Minute {
		t.Errorf("after many failures: %v, want the 60 s cap", got)
	}
	rl.Forget("ns")
	if got := rl.When("ns"); got != 5*time.Millisecond {
		t.Errorf("after Forget: %v, want 5ms", got)
	}
}

// TestDescriptor: kube-controller-manager's flag, default, client budget and role.
func TestDescriptor(t *testing.T) {
	d := Descriptor()
	if d.WorkersFlag != "concurrent-namespace-syncs" || d.DefaultWorkers != 10 {
		t.Errorf("workers %s=%d, want concurrent-namespace-syncs=10", d.WorkersFlag, d.DefaultWorkers)
	}
	if d.ClientQPSScale != 20 || d.ClientBurstScale != 100 {
		t.Errorf("client scales ×%v QPS ×%d burst, want ×20 and ×100", d.ClientQPSScale, d.ClientBurstScale)
	}
	if _, err := controllers.NewRegistry(d); err != nil {
		t.Errorf("descriptor: %v", err)
	}
}

// TestNegativeSyncPeriod is refused with the flag's name.
func TestNegativeSyncPeriod(t *testing.T) {
	f := newFixture(t, newNamespace(false))
	c := controllers.Context{Client: f.Client, Metadata: f.md}
	if _, err := newController(c, Options{SyncPeriod: -time.Second}, f.discover); err == nil {
		t.Error("negative --namespace-sync-period accepted")
	}
}

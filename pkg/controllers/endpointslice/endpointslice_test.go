package endpointslice

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestDescriptor checks the names and defaults that must be upstream's: tools, dashboards
// and users find the controller's queue, events and flags by them.
func TestDescriptor(t *testing.T) {
	d := Descriptor()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	d.AddFlags(fs)
	tests := []struct {
		name, got, want string
	}{
		{name: "name", got: d.Name, want: "endpointslice"},
		{name: "queue", got: d.QueueNameOrName(), want: "endpoint_slice"},
		{name: "event source", got: d.EventComponent(), want: "endpoint-slice-controller"},
		{name: "workers flag", got: d.WorkersFlag, want: "concurrent-service-endpoint-syncs"},
		{name: "max endpoints default", got: fs.Lookup(MaxEndpointsPerSliceFlag).DefValue, want: "100"},
		{name: "batch period default", got: fs.Lookup(BatchPeriodFlag).DefValue, want: "0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
			}
		})
	}
	if !d.OnByDefault || d.DefaultWorkers != 5 {
		t.Errorf("on by default %v with %d workers, want on with 5", d.OnByDefault, d.DefaultWorkers)
	}
}

// TestRateLimiter checks upstream's backoff: 1 s doubling per failure up to 1000 s.
func TestRateLimiter(t *testing.T) {
	rl := RateLimiter()
	tests := []struct {
		name string
		want time.Duration
	}{
		{name: "first failure", want: time.Second},
		{name: "second", want: 2 * time.Second},
		{name: "third", want: 4 * time.Second},
	}
	for _, tc := range tests {
		if got := rl.When("ns/web"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for range 20 {
		rl.When("ns/web")
	}
	if got := rl.When("ns/web"); got != 1000*time.Second {
		t.Errorf("after many failures: %v, want 1000s", got)
	}
	rl.Forget("ns/web")
	if got := rl.When("ns/web"); got != time.Second {
		t.Errorf("after Forget: %v, want 1s", got)
	}
}

package horizontalpodautoscaling

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestFlags checks the flags' names and defaults (kube-controller-manager 1.37's) and
// that the descriptor's queue reads the parsed sync period.
func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		wantErr     bool
		wantOpts    Options
		wantQueueIn time.Duration
	}{
		{name: "defaults", wantOpts: DefaultOptions(), wantQueueIn: 15 * time.Second},
		{name: "every flag", args: []string{"--horizontal-pod-autoscaler-sync-period=5s", "--horizontal-pod-autoscaler-downscale-stabilization=1m",
			"--horizontal-pod-autoscaler-tolerance=0.2", "--horizontal-pod-autoscaler-cpu-initialization-period=10s",
			"--horizontal-pod-autoscaler-initial-readiness-delay=20s"},
			wantOpts: Options{SyncPeriod: 5 * time.Second, DownscaleStabilization: time.Minute, Tolerance: 0.2,
				CPUInitializationPeriod: 10 * time.Second, InitialReadinessDelay: 20 * time.Second}, wantQueueIn: 5 * time.Second},
		{name: "a sync period of zero", args: []string{"--horizontal-pod-autoscaler-sync-period=0s"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Descriptor()
			if d.QueueName != "horizontalpodautoscaler" || d.EventSource != "horizontal-pod-autoscaler" ||
				d.WorkersFlag != "concurrent-horizontal-pod-autoscaler-syncs" || d.DefaultWorkers != 5 || !d.OnByDefault {
				t.Fatalf("descriptor %+v", d)
			}
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			d.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := d.Validate(d.DefaultWorkers)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate: %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got := d.RateLimiter().When("ns/a"); got != tc.wantQueueIn {
				t.Errorf("queue interval %s, want %s", got, tc.wantQueueIn)
			}
			for name, want := range map[string]string{
				SyncPeriodFlag: tc.wantOpts.SyncPeriod.String(), DownscaleStabilizationFlag: tc.wantOpts.DownscaleStabilization.String(),
				CPUInitializationPeriodFlag: tc.wantOpts.CPUInitializationPeriod.String(), InitialReadinessDelayFlag: tc.wantOpts.InitialReadinessDelay.String(),
			} {
				if got := fs.Lookup(name).Value.String(); got != want {
					t.Errorf("--%s = %s, want %s", name, got, want)
				}
			}
			if got, _ := fs.GetFloat64(ToleranceFlag); got != tc.wantOpts.Tolerance {
				t.Errorf("tolerance %v, want %v", got, tc.wantOpts.Tolerance)
			}
		})
	}
}

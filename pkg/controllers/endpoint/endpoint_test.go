package endpoint

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/controllers/testing/controllertest"
)

func TestDescriptor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantBatch time.Duration
	}{
		{name: "defaults: no batching"},
		{name: "the batch period flag", args: []string{"--endpoint-updates-batch-period=2s"}, wantBatch: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Descriptor()
			if d.Name != "endpoint" || d.EventComponent() != "endpoint-controller" || !d.OnByDefault ||
				d.WorkersFlag != "concurrent-endpoint-syncs" || d.DefaultWorkers != 5 || d.QueueName != "" {
				t.Fatalf("descriptor %s events %s on %v workers %s=%d queue %q: want upstream's endpoint, endpoint-controller, on, concurrent-endpoint-syncs=5, queue named endpoint",
					d.Name, d.EventComponent(), d.OnByDefault, d.WorkersFlag, d.DefaultWorkers, d.QueueName)
			}
			fs := pflag.NewFlagSet("shard", pflag.ContinueOnError)
			d.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			f := controllertest.NewFixture(t, d)
			ctrl, err := d.New(f.ControllerContext())
			if err != nil {
				t.Fatal(err)
			}
			if got := ctrl.(*Controller).batchPeriod; got != tc.wantBatch {
				t.Errorf("batch period %s, want %s", got, tc.wantBatch)
			}
		})
	}
}

package app

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/componentopts/optionstest"
)

// TestFenceOptions: the server-side fence is on by default and needs the shard
// ServiceAccount (whose requests it fences, and as whom it probes); a seizure must wait
// longer than a live shard's reconnect, and is meaningless without the fence.
func TestFenceOptions(t *testing.T) {
	base := []string{"--id=coordinator-0", "--advertise-address=10.0.0.1:9090", "--grpc-insecure"}
	tests := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{name: "defaults with the ServiceAccount", args: []string{"--shard-service-account=kshard/kshard-shard"}},
		{name: "on without the ServiceAccount", args: []string{"--shard-auth=none"}, wantErr: []string{"--shard-fence: --shard-service-account"}},
		{name: "off", args: []string{"--shard-auth=none", "--shard-fence=false"}},
		{name: "seize after without the fence", args: []string{"--shard-auth=none", "--shard-fence=false", "--seize-after=5s"},
			wantErr: []string{"--seize-after=5s needs --shard-fence"}},
		{name: "seize after shorter than a reconnect", args: []string{"--shard-service-account=kshard/kshard-shard", "--seize-after=1s"},
			wantErr: []string{"--seize-after=1s must exceed --shard-reconnect-backoff=1s"}},
		{name: "seizure off", args: []string{"--shard-service-account=kshard/kshard-shard", "--seize-after=0"}},
		{name: "negative seize after", args: []string{"--shard-service-account=kshard/kshard-shard", "--seize-after=-1s"},
			wantErr: []string{"--seize-after=-1s must not be negative"}},
		{name: "bad partition label", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=a'b"},
			wantErr: []string{"--shard-fence-partition-label"}},
		{name: "partition label of a second release", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=blue.kshard.io/partition"}},
		{name: "zero probe timeout", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-probe-timeout=0"},
			wantErr: []string{"--shard-fence-probe-timeout=0s must be at least 1s"}},
		{name: "probe timeout of a nanosecond", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-probe-timeout=1ns"},
			wantErr: []string{"--shard-fence-probe-timeout=1ns must be at least 1s"}},
		{name: "write timeout of a nanosecond", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-write-timeout=1ns"},
			wantErr: []string{"--shard-fence-write-timeout=1ns must be at least 1s"}},
		{name: "write timeout of a minute", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-write-timeout=1m"}},
		{name: "probe timeout of a second", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-probe-timeout=1s"}},
		{name: "partition label in kubernetes.io", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=kubernetes.io/partition"},
			wantErr: []string{`--shard-fence-partition-label="kubernetes.io/partition": the prefix "kubernetes.io" is reserved`}},
		{name: "partition label in k8s.io", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=k8s.io/partition"},
			wantErr: []string{`--shard-fence-partition-label="k8s.io/partition": the prefix "k8s.io" is reserved`}},
		{name: "partition label in Pod Security's prefix", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=pod-security.kubernetes.io/enforce"},
			wantErr: []string{`--shard-fence-partition-label="pod-security.kubernetes.io/enforce": the prefix "pod-security.kubernetes.io" is reserved`}},
		{name: "partition label in another subdomain of k8s.io", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=shard.x-k8s.io/partition"}},
		{name: "partition label in a subdomain of k8s.io", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=cluster.k8s.io/partition"},
			wantErr: []string{`--shard-fence-partition-label="cluster.k8s.io/partition"`}},
		{name: "partition label in a domain that only ends like kubernetes.io", args: []string{"--shard-service-account=kshard/kshard-shard", "--shard-fence-partition-label=notkubernetes.io/partition"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(append(append([]string(nil), base...), tt.args...)); err != nil {
				t.Fatalf("parsing %v: %v", tt.args, err)
			}
			optionstest.CheckErrors(t, o.Validate(), tt.wantErr...)
		})
	}
}

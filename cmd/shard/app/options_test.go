package app

import (
	"testing"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/componentopts/optionstest"
	"github.com/kshard/kshard/pkg/controllers"
)

// TestOptionsValidate parses real command lines, so a flag whose bad value the parser
// takes (NaN, Inf) is caught by Validate and reported together with the other bad flags.
func TestOptionsValidate(t *testing.T) {
	base := []string{"--shard-id=shard-0", "--coordinator-address=coordinator:9090", "--grpc-insecure"}
	tests := []struct {
		name    string
		args    []string
		wantErr []string // each must appear; none means valid
	}{
		{name: "defaults"},
		{name: "NaN QPS turns client-go's rate limit off", args: []string{"--kube-api-qps=NaN"}, wantErr: []string{"--kube-api-qps=NaN"}},
		{name: "+Inf QPS", args: []string{"--kube-api-qps=+Inf"}, wantErr: []string{"--kube-api-qps=+Inf"}},
		{name: "-Inf QPS", args: []string{"--kube-api-qps=-Inf"}, wantErr: []string{"--kube-api-qps=-Inf"}},
		{name: "negative QPS", args: []string{"--kube-api-qps=-1"}, wantErr: []string{"--kube-api-qps=-1"}},
		{name: "zero burst", args: []string{"--kube-api-burst=0"}, wantErr: []string{"--kube-api-burst=0"}},
		{name: "negative burst", args: []string{"--kube-api-burst=-3"}, wantErr: []string{"--kube-api-burst=-3"}},
		{name: "coordinator Lease", args: []string{"--coordinator-lease=kshard/kshard-coordinator"}},
		{name: "shard group", args: []string{"--shard-group=hot"}},
		{name: "the default shard group", args: []string{"--shard-group="}},
		{name: "shard group in upper case", args: []string{"--shard-group=Hot"}, wantErr: []string{`--shard-group: malformed message: shard group "Hot"`}},
		{name: "shard group with a dot", args: []string{"--shard-group=hot.pool"}, wantErr: []string{`--shard-group: malformed message: shard group "hot.pool"`}},
		{name: "coordinator Lease without a namespace", args: []string{"--coordinator-lease=kshard-coordinator"}, wantErr: []string{"--coordinator-lease: \"kshard-coordinator\" is not <namespace>/<name>"}},
		{name: "coordinator Lease with a bad name", args: []string{"--coordinator-lease=kshard/Bad_Name"}, wantErr: []string{"--coordinator-lease: name \"Bad_Name\""}},
		{name: "zero partitions", args: []string{"--partitions=0"}, wantErr: []string{"--partitions: partition count 0 out of range"}},
		{name: "negative partitions", args: []string{"--partitions=-1"}, wantErr: []string{"--partitions: partition count -1"}},
		{name: "partitions above the maximum", args: []string{"--partitions=65537"}, wantErr: []string{"--partitions: partition count 65537"}},
		{name: "most partitions", args: []string{"--partitions=65536"}},
		{name: "negative leave timeout", args: []string{"--leave-timeout=-1s"}, wantErr: []string{"--leave-timeout"}},
		{name: "zero warm-up concurrency", args: []string{"--warmup-concurrency=0"}, wantErr: []string{"--warmup-concurrency=0 must be from 1 to 1000"}},
		{name: "warm-up concurrency beyond the bound", args: []string{"--warmup-concurrency=1001"}, wantErr: []string{"--warmup-concurrency=1001 must be from 1 to 1000"}},
		{name: "discovery every 5s", args: []string{"--served-discovery-period=5s"}},
		{name: "discovery period below a second", args: []string{"--served-discovery-period=100ms"}, wantErr: []string{"--served-discovery-period=100ms must be at least 1s"}},
		{name: "coordinator address of colons", args: []string{"--coordinator-address=::::"}, wantErr: []string{`--coordinator-address="::::": want host:port`}},
		{name: "one bad coordinator address of two", args: []string{"--coordinator-address=coordinator-0:9090,a b:99999"},
			wantErr: []string{`--coordinator-address="a b:99999"`, `the port "99999"`}},
		{name: "coordinator address without a port", args: []string{"--coordinator-address=coordinator"}, wantErr: []string{`--coordinator-address="coordinator": want host:port`}},
		{name: "coordinator addresses of every replica", args: []string{"--coordinator-address=10.0.0.1:9090,[fd00::2]:9090,kshard-coordinator-headless.kshard-system:9090"}},
		{name: "workers with a slipped digit", args: []string{"--concurrent-deployment-syncs=100000"}, wantErr: []string{"--concurrent-deployment-syncs=100000 must be from 1 to 1000"}},
		{name: "no workers", args: []string{"--concurrent-replicaset-syncs=0"}, wantErr: []string{"--concurrent-replicaset-syncs=0 must be from 1 to 1000"}},
		{name: "the most workers", args: []string{"--concurrent-replicaset-syncs=1000"}},
		{name: "every bad worker count at once", args: []string{"--concurrent-deployment-syncs=0", "--concurrent-job-syncs=5000"},
			wantErr: []string{"--concurrent-deployment-syncs=0", "--concurrent-job-syncs=5000"}},
		{name: "negative cluster-list threshold", args: []string{"--warmup-cluster-list-threshold=-1"}, wantErr: []string{"--warmup-cluster-list-threshold=-1 must not be negative"}},
		{name: "cluster-wide warm-up lists off", args: []string{"--warmup-cluster-list-threshold=0"}},
		{name: "server-side filtering", args: []string{"--server-side-filtering", "--server-side-filtering-max-ranges=1000"}},
		{name: "too many selector ranges", args: []string{"--server-side-filtering-max-ranges=1001"}, wantErr: []string{"--server-side-filtering-max-ranges=1001 must be between 1 and 1000"}},
		{name: "no selector range", args: []string{"--server-side-filtering-max-ranges=0"}, wantErr: []string{"--server-side-filtering-max-ranges=0"}},
		{name: "selector watches", args: []string{"--server-side-filtering", "--server-side-filtering-max-watches=64"}},
		{name: "selector watches not a power of two", args: []string{"--server-side-filtering-max-watches=6"}, wantErr: []string{"--server-side-filtering-max-watches=6 must be a power of two between 1 and 64"}},
		{name: "too many selector watches", args: []string{"--server-side-filtering-max-watches=128"}, wantErr: []string{"--server-side-filtering-max-watches=128"}},
		{name: "no selector watch", args: []string{"--server-side-filtering-max-watches=0"}, wantErr: []string{"--server-side-filtering-max-watches=0"}},
		{name: "JSON content type", args: []string{"--kube-api-content-type=application/json"}},
		{name: "protobuf content type with a parameter", args: []string{"--kube-api-content-type=application/vnd.kubernetes.protobuf;stream=watch"}},
		{name: "content type client-go cannot speak", args: []string{"--kube-api-content-type=application/yaml"}, wantErr: []string{`--kube-api-content-type="application/yaml"`}},
		{name: "empty content type", args: []string{"--kube-api-content-type="}, wantErr: []string{`--kube-api-content-type=""`}},
		{name: "controllers by canonical name", args: []string{"--controllers=*,-replicaset-controller,root-ca-certificate-publisher-controller"}},
		{name: "controllers by alias", args: []string{"--controllers=*,-replicaset,root-ca-cert-publisher"}},
		{name: "a controller kshard does not implement", args: []string{"--controllers=*,-ttl-controller"},
			wantErr: []string{`"-ttl-controller" is kube-controller-manager's ttl-controller (alias ttl), which kshard does not implement`}},
		{name: "every bad flag reported at once", args: []string{"--kube-api-qps=NaN", "--kube-api-burst=0", "--partitions=0"},
			wantErr: []string{"--kube-api-qps=NaN", "--kube-api-burst=0", "--partitions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, err := controllers.NewRegistry(Descriptors()...)
			if err != nil {
				t.Fatal(err)
			}
			o := NewOptions()
			fs := pflag.NewFlagSet("shard", pflag.ContinueOnError)
			o.AddFlags(fs, reg)
			if err := fs.Parse(append(append([]string(nil), base...), tt.args...)); err != nil {
				t.Fatalf("parsing %v: %v", tt.args, err)
			}
			err = o.Validate(reg)
			optionstest.CheckErrors(t, err, tt.wantErr...)
		})
	}
}

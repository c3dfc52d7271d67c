package app

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kshard/kshard/pkg/componentopts/optionstest"
	"github.com/kshard/kshard/pkg/sharding/balance"
	"github.com/kshard/kshard/pkg/sharding/handoff"
)

// TestPlacementOptionsValidate parses real command lines of the placement and pin flags:
// each bad value is named by its flag.
func TestPlacementOptionsValidate(t *testing.T) {
	base := []string{"--id=coordinator-0", "--advertise-address=10.0.0.1:9090", "--grpc-insecure", "--shard-auth=none", "--shard-fence=false"}
	load := "--placement=load"
	tests := []struct {
		name    string
		args    []string
		wantErr []string // each must appear; none means valid
	}{
		{name: "defaults (count)"},
		{name: "load with defaults", args: []string{load}},
		{name: "load without balancing", args: []string{load, "--balance=false"}},
		{name: "unknown placement", args: []string{"--placement=hash"}, wantErr: []string{`--placement="hash": want "count" or "load"`}},
		{name: "zero interval", args: []string{load, "--balance-interval=0"}, wantErr: []string{"--balance-interval=0s must be positive"}},
		{name: "interval below two reports", args: []string{load, "--balance-interval=19s"},
			wantErr: []string{"--balance-interval=19s must be at least 2 × --load-report-interval (20s)"}},
		{name: "interval of two reports", args: []string{load, "--balance-interval=20s"}},
		{name: "interval below two reports at the heartbeat's cadence", args: []string{load, "--session-ttl=40s", "--heartbeat-interval=2s", "--load-report-interval=1s", "--load-half-life=1m", "--balance-interval=3s"},
			wantErr: []string{"--balance-interval=3s must be at least 2 × --load-report-interval (4s)"}},
		{name: "short interval without balancing", args: []string{load, "--balance=false", "--balance-interval=1s"}},
		{name: "short interval with placement by count", args: []string{"--balance-interval=1s"}},
		{name: "balancing without load reports", args: []string{load, "--load-report-interval=0"},
			wantErr: []string{"--placement=load with --balance needs load reports (--load-report-interval above 0), or --balance=false"}},
		{name: "placement by load without load reports nor balancing", args: []string{load, "--load-report-interval=0", "--balance=false", "--balance-interval=1s"}},
		{name: "negative warmup and cooldown", args: []string{load, "--balance-warmup=-1s", "--balance-cooldown=-1m"},
			wantErr: []string{"--balance-warmup=-1s must not be negative", "--balance-cooldown=-1m0s must not be negative"}},
		{name: "no warmup, no cooldown", args: []string{load, "--balance-warmup=0", "--balance-cooldown=0"}},
		{name: "margin zero", args: []string{load, "--balance-margin=0"}, wantErr: []string{"--balance-margin=0 must be above 0 and below 1"}},
		{name: "margin one", args: []string{load, "--balance-margin=1"}, wantErr: []string{"--balance-margin=1 must be above 0 and below 1"}},
		{name: "margin NaN", args: []string{load, "--balance-margin=NaN"}, wantErr: []string{"--balance-margin=NaN"}},
		{name: "zero moves", args: []string{load, "--balance-max-moves=0"}, wantErr: []string{"--balance-max-moves=0 must be at least 1"}},
		{name: "cost fraction zero and above one", args: []string{load, "--balance-max-cost-fraction=0"}, wantErr: []string{"--balance-max-cost-fraction=0 must be above 0"}},
		{name: "cost fraction above one", args: []string{load, "--balance-max-cost-fraction=1.5"}, wantErr: []string{"--balance-max-cost-fraction=1.5"}},
		{name: "cost fraction one", args: []string{load, "--balance-max-cost-fraction=1"}},
		{name: "zero objects", args: []string{load, "--balance-max-objects=0"}, wantErr: []string{"--balance-max-objects=0 must be at least 1"}},
		{name: "namespace share below one", args: []string{load, "--balance-max-namespace-share=0.5"}, wantErr: []string{"--balance-max-namespace-share=0.5 must be at least 1"}},
		{name: "namespace share NaN", args: []string{load, "--balance-max-namespace-share=NaN"}, wantErr: []string{"--balance-max-namespace-share=NaN"}},
		{name: "no namespace cap", args: []string{load, "--balance-max-namespace-share=+Inf"}},
		{name: "zero min load", args: []string{load, "--balance-min-load=0"}, wantErr: []string{"--balance-min-load=0 must be a finite number above 0"}},
		{name: "infinite min load", args: []string{load, "--balance-min-load=+Inf"}, wantErr: []string{"--balance-min-load=+Inf"}},
		{name: "absurd-report bounds zero", args: []string{load, "--balance-max-partition-load=0", "--balance-max-shard-load=-1"},
			wantErr: []string{"--balance-max-partition-load=0 must be a finite number above 0", "--balance-max-shard-load=-1 must be a finite number above 0"}},
		{name: "saturation bounds", args: []string{load, "--balance-saturation-wait=0", "--balance-saturation-factor=0.9"},
			wantErr: []string{"--balance-saturation-wait=0 must be a finite number above 0", "--balance-saturation-factor=0.9 must be from 1 to 10"}},
		{name: "shard bound below the partition bound", args: []string{load, "--balance-max-partition-load=500", "--balance-max-shard-load=400"},
			wantErr: []string{"--balance-max-shard-load=400 must not be below --balance-max-partition-load=500"}},
		{name: "pins", args: []string{load, "--pin=team-a=hot", "--pin=team-b=hot", "--pin-partition=0=hot", "--pin-annotation-groups=hot,warm"}},
		{name: "pins need placement by load", args: []string{"--pin=team-a=hot"}, wantErr: []string{"--pin, --pin-partition and --pin-annotation-groups need --placement=load"}},
		{name: "annotation groups need placement by load", args: []string{"--pin-annotation-groups=hot"}, wantErr: []string{"need --placement=load"}},
		{name: "malformed pins", args: []string{load, "--pin=team-a", "--pin-partition=4096=hot", "--pin-annotation-groups=Hot"},
			wantErr: []string{`--pin="team-a": want namespace=group`, `--pin-partition="4096=hot": partition "4096" is not a number from 0 to 4095`,
				`--pin-annotation-groups: group "Hot"`}},
		// One partition: every namespace is in it.
		{name: "flags pinning one partition to two groups", args: []string{load, "--partitions=1", "--pin=team-a=hot", "--pin=team-b=warm"},
			wantErr: []string{"--pin/--pin-partition pin partition 0 to different groups: flag: team-a (hot), flag: team-b (warm)"}},
		{name: "shared groups", args: []string{load, "--shard-group-shared=hot,batch-1"}},
		{name: "shared groups need placement by load", args: []string{"--shard-group-shared=hot"}, wantErr: []string{"--shard-group-shared needs --placement=load"}},
		{name: "shared group not a DNS-1123 label", args: []string{load, "--shard-group-shared=hot,Warm"}, wantErr: []string{`--shard-group-shared: group "Warm"`}},
		{name: "flags pinning one partition to one group", args: []string{load, "--partitions=1", "--pin=team-a=hot", "--pin=team-b=hot", "--pin-partition=0=hot"}},
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

// TestBalanceConfigFromFlags: every balancer flag reaches the state machine's
// configuration, where it was given and where the default stands.
func TestBalanceConfigFromFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want handoff.BalanceConfig
	}{
		{name: "defaults", want: handoff.BalanceConfig{Placement: handoff.PlacementCount, Enabled: true, Interval: time.Minute, Warmup: 2 * time.Minute,
			Cooldown: 30 * time.Minute, MaxPartitionLoad: 1000, MaxShardLoad: 2000, SaturationWait: 2,
			Params: balance.Params{Margin: 0.10, MaxMoves: 64, MaxCostFraction: 0.10, MaxObjects: 50000, MaxNamespaceShare: 2, MinLoad: 1, SaturationFactor: 1.5}}},
		{name: "every flag", args: []string{"--placement=load", "--balance=false", "--balance-interval=90s", "--balance-warmup=1m", "--balance-cooldown=10m",
			"--balance-margin=0.2", "--balance-max-moves=8", "--balance-max-cost-fraction=0.5", "--balance-max-objects=1000",
			"--balance-max-namespace-share=3", "--balance-min-load=5", "--balance-max-partition-load=100", "--balance-max-shard-load=300",
			"--balance-saturation-wait=3.5", "--balance-saturation-factor=1.2", "--shard-group-shared=hot,warm"},
			want: handoff.BalanceConfig{Placement: handoff.PlacementLoad, Enabled: false, Interval: 90 * time.Second, Warmup: time.Minute,
				Cooldown: 10 * time.Minute, MaxPartitionLoad: 100, MaxShardLoad: 300, SaturationWait: 3.5,
				Params: balance.Params{Margin: 0.2, MaxMoves: 8, MaxCostFraction: 0.5, MaxObjects: 1000, MaxNamespaceShare: 3, MinLoad: 5, SaturationFactor: 1.2,
					SharedGroups: []string{"hot", "warm"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if got := o.handoffConfig().Balance; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Balance = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

package app

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/kshard/kshard/pkg/componentopts/optionstest"
	"github.com/kshard/kshard/pkg/sharding/handoff"
)

// TestOptionsValidate parses real command lines: the bad values here are ones the flag
// parser takes (0, NaN, Inf, negative durations) and that used to run silently, either
// replaced by a default (a zero) or as given.
func TestOptionsValidate(t *testing.T) {
	base := []string{"--id=coordinator-0", "--advertise-address=10.0.0.1:9090", "--grpc-insecure"}
	// The test framework's timings (test/framework): 4s/3s/500ms leases, 9s TTL.
	fastLeases := []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"}
	tests := []struct {
		name    string
		args    []string
		wantErr []string // each must appear; none means valid
	}{
		{name: "defaults"},
		{name: "the chart's timings", args: []string{"--session-ttl=28s", "--leader-elect-lease-duration=15s",
			"--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s", "--partitions=4096"}},
		{name: "the test framework's timings", args: append([]string{"--session-ttl=9s", "--fencing-margin=1s",
			"--membership-debounce=1s", "--membership-max-debounce=5s"}, fastLeases...)},
		{name: "zero partitions", args: []string{"--partitions=0"}, wantErr: []string{"--partitions: partition count 0 out of range [1, 65536]"}},
		{name: "negative partitions", args: []string{"--partitions=-4"}, wantErr: []string{"--partitions: partition count -4"}},
		{name: "partitions above the maximum", args: []string{"--partitions=65537"}, wantErr: []string{"--partitions: partition count 65537"}},
		{name: "one partition", args: []string{"--partitions=1"}},
		{name: "NaN ring load", args: []string{"--ring-load=NaN"}, wantErr: []string{"--ring-load=NaN"}},
		{name: "infinite ring load", args: []string{"--ring-load=+Inf"}, wantErr: []string{"--ring-load=+Inf"}},
		{name: "zero ring load", args: []string{"--ring-load=0"}, wantErr: []string{"--ring-load=0"}},
		{name: "negative ring load", args: []string{"--ring-load=-1.5"}, wantErr: []string{"--ring-load=-1.5"}},
		{name: "zero ring replication factor", args: []string{"--ring-replication-factor=0"}, wantErr: []string{"--ring-replication-factor=0"}},
		{name: "zero session TTL", args: []string{"--session-ttl=0"}, wantErr: []string{"--session-ttl=0s must be positive"}},
		{name: "negative session TTL", args: []string{"--session-ttl=-20s"}, wantErr: []string{"--session-ttl=-20s must be positive"}},
		{name: "zero heartbeat interval", args: []string{"--heartbeat-interval=0"}, wantErr: []string{"--heartbeat-interval=0s must be positive"}},
		{name: "heartbeat of a nanosecond", args: []string{"--heartbeat-interval=1ns"}, wantErr: []string{"--heartbeat-interval=1ns must be at least 100ms"}},
		{name: "heartbeat just below the least", args: []string{"--heartbeat-interval=99ms"}, wantErr: []string{"--heartbeat-interval=99ms must be at least 100ms"}},
		{name: "the least heartbeat", args: []string{"--heartbeat-interval=100ms"}},
		{name: "advertise address with a space and a port out of range", args: []string{"--advertise-address=a b:99999"},
			wantErr: []string{`--advertise-address="a b:99999"`, `the host "a b" is neither an IP address nor a DNS name`, `the port "99999" is not a number from 1 to 65535`}},
		{name: "advertise address without a port", args: []string{"--advertise-address=10.0.0.1"}, wantErr: []string{`--advertise-address="10.0.0.1": want host:port`}},
		{name: "advertise address without a host", args: []string{"--advertise-address=:9090"}, wantErr: []string{`--advertise-address=":9090": the host is empty`}},
		{name: "advertise address with a named port", args: []string{"--advertise-address=coordinator:grpc"}, wantErr: []string{`--advertise-address="coordinator:grpc": the port "grpc"`}},
		{name: "advertise address of port zero", args: []string{"--advertise-address=10.0.0.1:0"}, wantErr: []string{`the port "0"`}},
		{name: "advertise address of colons", args: []string{"--advertise-address=::::"}, wantErr: []string{`--advertise-address="::::": want host:port`}},
		{name: "advertise address IPv6", args: []string{"--advertise-address=[fd00::1]:9090"}},
		{name: "advertise address a DNS name", args: []string{"--advertise-address=kshard-coordinator-0.kshard-coordinator.kshard-system.svc:9090"}},
		{name: "heartbeat above half the TTL", args: []string{"--session-ttl=40s", "--heartbeat-interval=21s"}, wantErr: []string{"--heartbeat-interval=21s must be at most --session-ttl/2 (20s)"}},
		{name: "zero fencing margin", args: []string{"--fencing-margin=0"}, wantErr: []string{"--fencing-margin=0s must be positive"}},
		{name: "zero debounce", args: []string{"--membership-debounce=0"}, wantErr: []string{"--membership-debounce=0s must be positive"}},
		{name: "max debounce below debounce", args: []string{"--membership-debounce=10s", "--membership-max-debounce=5s"}, wantErr: []string{"--membership-max-debounce=5s must not be below"}},
		{name: "zero prepare timeout", args: []string{"--prepare-timeout=0"}, wantErr: []string{"--prepare-timeout=0s must be positive"}},
		{name: "negative release timeout", args: []string{"--release-timeout=-1m"}, wantErr: []string{"--release-timeout=-1m0s must be positive"}},
		{name: "zero concurrent moves", args: []string{"--max-concurrent-moves=0"}, wantErr: []string{"--max-concurrent-moves=0"}},
		{name: "negative expected shards", args: []string{"--expected-shards=-1"}, wantErr: []string{"--expected-shards=-1 must not be negative"}},
		{name: "more expected shards than served", args: []string{"--expected-shards=11", "--max-shards=10"}, wantErr: []string{"--expected-shards=11 must not exceed --max-shards=10"}},
		{name: "expected shards", args: []string{"--expected-shards=4"}},
		{name: "negative readiness", args: []string{"--leader-readiness-delay=-1s"}, wantErr: []string{"--leader-readiness-delay=-1s"}},
		{name: "negative reconnect backoff", args: []string{"--shard-reconnect-backoff=-1s"}, wantErr: []string{"--shard-reconnect-backoff=-1s"}},
		{name: "TTL below the failover alone", args: []string{"--session-ttl=16s"},
			wantErr: []string{"--session-ttl=16s does not cover a coordinator leader failover",
				"--heartbeat-interval (1s) + --leader-elect-lease-duration (15s) + 2 × --leader-elect-retry-period jittered (2 × 4.4s) + --leader-readiness-delay (0s) + --shard-reconnect-backoff (1s) = 25.8s"}},
		// The chart's old 20s: client-go's takeover took up to 21s there (test/failover).
		{name: "the chart's old TTL", args: []string{"--session-ttl=20s"}, wantErr: []string{"--session-ttl=20s does not cover", "= 25.8s"}},
		{name: "TTL covers the failover but not a third-of-TTL heartbeat", args: []string{"--session-ttl=28s", "--heartbeat-interval=6s"},
			wantErr: []string{"--session-ttl=28s does not cover", "--heartbeat-interval (6s)", "= 30.8s"}},
		{name: "a Service that routes only to the Ready leader", args: []string{"--leader-readiness-delay=2s", "--shard-reconnect-backoff=10s"},
			wantErr: []string{"--session-ttl=28s does not cover", "--leader-readiness-delay (2s)", "--shard-reconnect-backoff (10s)", "= 36.8s"}},
		{name: "the same topology with a TTL that covers it", args: []string{"--leader-readiness-delay=2s", "--shard-reconnect-backoff=10s", "--session-ttl=37s"}},
		{name: "TTL equal to the budget", args: append([]string{"--session-ttl=7.2s", "--shard-reconnect-backoff=0"}, fastLeases...),
			wantErr: []string{"--session-ttl=7.2s does not cover", "= 7.2s"}},
		// 20,000 shards × 1,000 virtual nodes exceed the ring's 10M: the state machine would
		// refuse the configuration at its start, and without MaxMembers from --max-shards it
		// turned shard 1001 away whatever --max-shards said.
		{name: "more shards than the ring can hold", args: []string{"--max-shards=20000", "--ring-replication-factor=1000"},
			wantErr: []string{"max members 20000 × ring replication factor 1000 exceeds"}},
		{name: "more than 1000 shards", args: []string{"--max-shards=2000"}},
		{name: "no failover without leader election", args: []string{"--leader-elect=false", "--session-ttl=2s"}},
		{name: "no load reports", args: []string{"--load-report-interval=0"}},
		{name: "load reports every heartbeat", args: []string{"--load-report-interval=1s", "--load-half-life=3s"}},
		{name: "negative load report interval", args: []string{"--load-report-interval=-10s"}, wantErr: []string{"--load-report-interval=-10s must not be negative"}},
		{name: "load report interval above the bound", args: []string{"--load-report-interval=2h", "--load-half-life=24h"}, wantErr: []string{"--load-report-interval=2h0m0s must be at most 1h0m0s"}},
		// Shards round the interval to whole heartbeats: a changed --heartbeat-interval
		// (6s above) needs no second flag.
		{name: "load report interval not a multiple of the heartbeat", args: []string{"--load-report-interval=1500ms", "--load-half-life=1m"}},
		{name: "load report interval below the heartbeat", args: []string{"--session-ttl=40s", "--heartbeat-interval=2s", "--load-report-interval=1s", "--load-half-life=1m"}},
		{name: "zero load half-life", args: []string{"--load-half-life=0"}, wantErr: []string{"--load-half-life=0s must be positive"}},
		{name: "load half-life above the bound", args: []string{"--load-half-life=25h"}, wantErr: []string{"--load-half-life=25h0m0s must be positive and at most 24h0m0s"}},
		{name: "load half-life below three reports", args: []string{"--load-report-interval=10s", "--load-half-life=29s"},
			wantErr: []string{"--load-half-life=29s must be at least 3 × --load-report-interval (30s)"}},
		{name: "load half-life of three reports", args: []string{"--load-report-interval=10s", "--load-half-life=30s"}},
		// Counted at the cadence shards report at: 1s rounds up to the 2s heartbeat.
		{name: "load half-life below three reports at the heartbeat's cadence", args: []string{"--session-ttl=40s", "--heartbeat-interval=2s", "--load-report-interval=1s", "--load-half-life=5s"},
			wantErr: []string{"--load-half-life=5s must be at least 3 × --load-report-interval (6s, as shards report every 2s at --heartbeat-interval=2s)"}},
		{name: "a short half-life without reports", args: []string{"--load-report-interval=0", "--load-half-life=1s"}},
		{name: "reconcile weight zero", args: []string{"--balance-reconcile-weight=0"}},
		{name: "negative reconcile weight", args: []string{"--balance-reconcile-weight=-0.1"}, wantErr: []string{"--balance-reconcile-weight=-0.1 must be a number from 0 to 1000"}},
		{name: "NaN reconcile weight", args: []string{"--balance-reconcile-weight=NaN"}, wantErr: []string{"--balance-reconcile-weight=NaN"}},
		{name: "infinite reconcile weight", args: []string{"--balance-reconcile-weight=+Inf"}, wantErr: []string{"--balance-reconcile-weight=+Inf"}},
		{name: "every bad flag reported at once", args: []string{"--partitions=0", "--ring-load=NaN", "--session-ttl=0", "--leader-readiness-delay=-1s"},
			wantErr: []string{"--partitions", "--ring-load=NaN", "--session-ttl=0s", "--leader-readiness-delay=-1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("coordinator", pflag.ContinueOnError)
			o.AddFlags(fs)
			args := append(append([]string(nil), base...), "--shard-auth=none", "--shard-fence=false") // not what this test is about
			if err := fs.Parse(append(args, tt.args...)); err != nil {
				t.Fatalf("parsing %v: %v", tt.args, err)
			}
			err := o.Validate()
			optionstest.CheckErrors(t, err, tt.wantErr...)
		})
	}
}

// TestLeaderElectionJitter keeps handoff's copy of client-go's jitter factor equal to it:
// the failover budget counts the jittered retry period (handoff.FailoverBudget).
func TestLeaderElectionJitter(t *testing.T) {
	if handoff.LeaderElectionJitter != leaderelection.JitterFactor {
		t.Fatalf("handoff.LeaderElectionJitter = %v, client-go's leaderelection.JitterFactor = %v", handoff.LeaderElectionJitter, leaderelection.JitterFactor)
	}
}

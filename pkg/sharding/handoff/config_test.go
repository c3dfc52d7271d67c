package handoff

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Config) {}},
		{name: "too many partitions", mutate: func(c *Config) { c.PartitionCount, c.Ring.PartitionCount = 70000, 70000 }, wantErr: "partition count"},
		{name: "ring count differs", mutate: func(c *Config) { c.Ring.PartitionCount = 7 }, wantErr: "differs"},
		{name: "heartbeat too slow", mutate: func(c *Config) { c.HeartbeatInterval = c.SessionTTL }, wantErr: "heartbeat interval"},
		{name: "margin below drift bound", mutate: func(c *Config) { c.MaxClockDrift, c.Margin = 0.2, time.Second }, wantErr: "margin"},
		{name: "zero margin", mutate: func(c *Config) { c.Margin = -1 }, wantErr: "margin"},
		{name: "drift too large", mutate: func(c *Config) { c.MaxClockDrift = 0.5 }, wantErr: "drift"},
		{name: "max debounce below debounce", mutate: func(c *Config) { c.MaxDebounce = c.Debounce - 1 }, wantErr: "debounce"},
		{name: "negative expected members", mutate: func(c *Config) { c.ExpectedMembers = -1 }, wantErr: "expected members"},
		{name: "more expected members than allowed", mutate: func(c *Config) { c.ExpectedMembers = c.MaxMembers + 1 }, wantErr: "expected members"},
		{name: "release timeout below retry", mutate: func(c *Config) { c.ReleaseTimeout = c.RetryInterval - 1 }, wantErr: "release timeout"},
		{name: "no moves", mutate: func(c *Config) { c.MaxConcurrentMoves = -1 }, wantErr: "concurrent moves"},
		{name: "load below one", mutate: func(c *Config) { c.Ring.Load = 0.5 }, wantErr: "load"},
		{name: "NaN load", mutate: func(c *Config) { c.Ring.Load = math.NaN() }, wantErr: "load"},
		{name: "infinite load", mutate: func(c *Config) { c.Ring.Load = math.Inf(1) }, wantErr: "load"},
		{name: "NaN drift", mutate: func(c *Config) { c.MaxClockDrift = math.NaN() }, wantErr: "drift"},
		{name: "infinite drift", mutate: func(c *Config) { c.MaxClockDrift = math.Inf(1) }, wantErr: "drift"},
		{name: "negative drift", mutate: func(c *Config) { c.MaxClockDrift = math.Inf(-1) }, wantErr: "drift"},
		{name: "negative TTL", mutate: func(c *Config) { c.SessionTTL = -time.Second }, wantErr: "session TTL"},
		{name: "negative prepare timeout", mutate: func(c *Config) { c.PrepareTimeout = -1 }, wantErr: "prepare timeout"},
		{name: "no load reports", mutate: func(c *Config) { c.Load = LoadSettings{} }},
		{name: "load reports", mutate: func(c *Config) {
			c.Load = LoadSettings{ReportInterval: 10 * time.Second, HalfLife: 5 * time.Minute, ReconcileWeight: 0.1}
		}},
		{name: "load reports without a half-life", mutate: func(c *Config) { c.Load = LoadSettings{ReportInterval: time.Second} }, wantErr: "load half-life"},
		{name: "negative load report interval", mutate: func(c *Config) { c.Load = LoadSettings{ReportInterval: -1, HalfLife: time.Minute} }, wantErr: "load report interval"},
		{name: "load report interval above the bound", mutate: func(c *Config) {
			c.Load = LoadSettings{ReportInterval: MaxLoadReportInterval + 1, HalfLife: time.Minute}
		}, wantErr: "load report interval"},
		{name: "load half-life above the bound", mutate: func(c *Config) { c.Load = LoadSettings{HalfLife: MaxLoadHalfLife + 1} }, wantErr: "load half-life"},
		{name: "NaN reconcile weight", mutate: func(c *Config) { c.Load.ReconcileWeight = math.NaN() }, wantErr: "reconcile weight"},
		{name: "reconcile weight above the bound", mutate: func(c *Config) { c.Load.ReconcileWeight = MaxReconcileWeight + 1 }, wantErr: "reconcile weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{}.WithDefaults()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMinMargin(t *testing.T) {
	tests := []struct {
		name  string
		ttl   time.Duration
		drift float64
		want  time.Duration
	}{
		{name: "no drift", ttl: 10 * time.Second, drift: 0, want: 0},
		{name: "1 percent", ttl: 10 * time.Second, drift: 0.01, want: 202020203},
		{name: "5 percent, 3s", ttl: 3 * time.Second, drift: 0.05, want: 315789474},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MinMargin(tt.ttl, tt.drift); got != tt.want {
				t.Fatalf("MinMargin = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEpochAndSession(t *testing.T) {
	tests := []struct {
		name          string
		term, counter uint32
	}{
		{name: "first", term: 1, counter: 1},
		{name: "max counter", term: 7, counter: ^uint32(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := MakeEpoch(tt.term, tt.counter)
			if e.Term() != tt.term || e.Counter() != tt.counter {
				t.Fatalf("%v: term %d counter %d", e, e.Term(), e.Counter())
			}
			if next := MakeEpoch(tt.term+1, 0); next <= e {
				t.Fatalf("a newer term's epoch %v is not above %v", next, e)
			}
		})
	}
	if !(Session{Incarnation: 1, Seq: 9}).Less(Session{Incarnation: 2, Seq: 1}) {
		t.Fatal("incarnation must dominate the session order")
	}
}

func TestFailoverBudget(t *testing.T) {
	tests := []struct {
		name    string
		budget  FailoverBudget
		ttl     time.Duration
		want    time.Duration
		covered bool
	}{
		// 1s + 15s + 2 × 2s × 2.2 + 1s.
		{name: "kube-controller-manager timings, 1s heartbeats, shards told the leader",
			budget: FailoverBudget{HeartbeatInterval: time.Second, LeaseDuration: 15 * time.Second, RetryPeriod: 2 * time.Second, ReconnectBackoff: time.Second},
			ttl:    28 * time.Second, want: 25800 * time.Millisecond, covered: true},
		// 9 of 40 chart failovers took over after 19.0-21.0s (test/failover).
		{name: "the chart's old 20s does not cover client-go's jittered takeover",
			budget: FailoverBudget{HeartbeatInterval: time.Second, LeaseDuration: 15 * time.Second, RetryPeriod: 2 * time.Second, ReconnectBackoff: time.Second},
			ttl:    20 * time.Second, want: 25800 * time.Millisecond, covered: false},
		{name: "TTL/3 heartbeats do not fit in 28s",
			budget: FailoverBudget{HeartbeatInterval: 28 * time.Second / 3, LeaseDuration: 15 * time.Second, RetryPeriod: 2 * time.Second},
			ttl:    28 * time.Second, want: 28*time.Second/3 + 23800*time.Millisecond, covered: false},
		{name: "a Service with no endpoint during failover: readiness and full backoff",
			budget: FailoverBudget{HeartbeatInterval: time.Second, LeaseDuration: 15 * time.Second, RetryPeriod: 2 * time.Second,
				Readiness: 2 * time.Second, ReconnectBackoff: 10 * time.Second},
			ttl: 28 * time.Second, want: 36800 * time.Millisecond, covered: false},
		{name: "equal is not enough: the lease would end as the Welcome arrives",
			budget: FailoverBudget{HeartbeatInterval: time.Second, LeaseDuration: 4 * time.Second, RetryPeriod: time.Second},
			ttl:    9400 * time.Millisecond, want: 9400 * time.Millisecond, covered: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.budget.Total(); got != tt.want {
				t.Errorf("Total() = %v, want %v", got, tt.want)
			}
			if got := tt.budget.CoveredBy(tt.ttl); got != tt.covered {
				t.Errorf("CoveredBy(%v) = %v, want %v", tt.ttl, got, tt.covered)
			}
		})
	}
}

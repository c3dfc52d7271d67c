package kubeclient

import (
	"math"
	"strings"
	"testing"
)

func TestValidateRateLimit(t *testing.T) {
	tests := []struct {
		name    string
		qps     float32
		burst   int
		wantErr []string // every substring must appear; none means valid
	}{
		{name: "defaults of the shard", qps: 50, burst: 100},
		{name: "tiny but positive", qps: 0.01, burst: 1},
		{name: "largest float32", qps: math.MaxFloat32, burst: 1},
		{name: "NaN qps", qps: float32(math.NaN()), burst: 100, wantErr: []string{"--kube-api-qps=NaN"}},
		{name: "+Inf qps", qps: float32(math.Inf(1)), burst: 100, wantErr: []string{"--kube-api-qps=+Inf"}},
		{name: "-Inf qps", qps: float32(math.Inf(-1)), burst: 100, wantErr: []string{"--kube-api-qps=-Inf"}},
		{name: "zero qps", qps: 0, burst: 100, wantErr: []string{"--kube-api-qps=0"}},
		{name: "negative qps", qps: -5, burst: 100, wantErr: []string{"--kube-api-qps=-5"}},
		{name: "zero burst", qps: 50, burst: 0, wantErr: []string{"--kube-api-burst=0"}},
		{name: "both bad, both reported", qps: float32(math.NaN()), burst: -1,
			wantErr: []string{"--kube-api-qps=NaN", "--kube-api-burst=-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateRateLimit("kube-api-qps", tt.qps, "kube-api-burst", tt.burst)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ValidateRateLimit = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateRateLimit = nil, want errors %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ValidateRateLimit = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

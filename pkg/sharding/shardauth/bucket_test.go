package shardauth

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name     string
		at       []time.Duration // offsets of attempts from start
		want     []bool
		fullAt   time.Duration
		wantFull bool
	}{
		{name: "burst then refused", at: []time.Duration{0, 0, 0, 0}, want: []bool{true, true, true, false}, fullAt: 0},
		{name: "one token a second after the burst", at: []time.Duration{0, 0, 0, 500 * time.Millisecond, time.Second},
			want: []bool{true, true, true, false, true}, fullAt: time.Second},
		{name: "full again after burst/rate", at: []time.Duration{0, 0, 0}, want: []bool{true, true, true}, fullAt: 3 * time.Second, wantFull: true},
		{name: "a clock going back takes nothing", at: []time.Duration{time.Second, 0, 0, 0}, want: []bool{true, true, true, false}, fullAt: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBucket(1, 3)
			for i, d := range tc.at {
				if got := b.Allow(start.Add(d)); got != tc.want[i] {
					t.Errorf("attempt %d at +%s: %t, want %t", i, d, got, tc.want[i])
				}
			}
			if got := b.Full(start.Add(tc.fullAt)); got != tc.wantFull {
				t.Errorf("Full at +%s = %t, want %t", tc.fullAt, got, tc.wantFull)
			}
		})
	}
}

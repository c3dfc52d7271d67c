package shardcache

import (
	"testing"
	"time"
)

func TestUntilQuiet(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	tests := []struct {
		name             string
		now, first, last time.Time
		want             time.Duration
	}{
		{name: "just arrived: wait the quiet period", now: t0, first: t0, last: t0, want: 100 * ms},
		{name: "a late arrival extends the wait", now: t0.Add(150 * ms), first: t0, last: t0.Add(120 * ms), want: 70 * ms},
		{name: "quiet since the last: act", now: t0.Add(300 * ms), first: t0, last: t0.Add(150 * ms), want: -50 * ms},
		{name: "arrivals never pause: the limit after the first wins", now: t0.Add(990 * ms), first: t0, last: t0.Add(980 * ms), want: 10 * ms},
		{name: "past the limit: act", now: t0.Add(1100 * ms), first: t0, last: t0.Add(1090 * ms), want: -100 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := untilQuiet(tt.now, tt.first, tt.last, 100*ms, time.Second); got != tt.want {
				t.Errorf("untilQuiet = %v, want %v", got, tt.want)
			}
		})
	}
}

package handoff

import (
	"testing"
	"time"
)

func TestLease(t *testing.T) {
	const ttl = 10 * time.Second
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name    string
		extends []int // heartbeat send times acknowledged, in arrival order
		revoke  bool
		now     int
		want    bool
	}{
		{name: "never extended", now: 0, want: false},
		{name: "within ttl of send", extends: []int{5}, now: 14, want: true},
		{name: "deadline is exclusive", extends: []int{5}, now: 15, want: false},
		{name: "late ack of older heartbeat does not shorten", extends: []int{8, 2}, now: 17, want: true},
		{name: "revoked", extends: []int{8}, revoke: true, now: 9, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLease(ttl)
			for _, s := range tt.extends {
				l.Extend(at(s))
			}
			if tt.revoke {
				l.Revoke()
			}
			if got := l.CanWork(at(tt.now)); got != tt.want {
				t.Fatalf("CanWork(%d) = %v, want %v (deadline %v)", tt.now, got, tt.want, l.Deadline())
			}
		})
	}
}

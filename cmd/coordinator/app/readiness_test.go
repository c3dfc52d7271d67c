package app

import (
	"strings"
	"testing"
	"time"
)

func TestLeaseReadiness(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		election bool
		seen     bool
		readAt   *time.Time
		now      time.Time
		want     string // "" for ready, else part of the error
	}{
		{name: "no leader observed", election: true, readAt: &t0, now: t0, want: "no leader observed"},
		{name: "observed and read just now", election: true, seen: true, readAt: &t0, now: t0.Add(time.Second)},
		{name: "read exactly a lease duration ago", election: true, seen: true, readAt: &t0, now: t0.Add(15 * time.Second)},
		{name: "not read for longer than a lease duration", election: true, seen: true, readAt: &t0, now: t0.Add(16 * time.Second), want: "renewed 16s ago"},
		{name: "observed but never read", election: true, seen: true, now: t0, want: "never read"},
		{name: "election disabled: observed is enough", seen: true, now: t0.Add(time.Hour)},
		{name: "election disabled: not leading yet", now: t0, want: "no leader observed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &leaseReadiness{election: tt.election, within: 15 * time.Second}
			r.seen.Store(tt.seen)
			if tt.readAt != nil {
				r.answered(*tt.readAt)
			}
			err := r.check(tt.now)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("not ready: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("check = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

package benchkit

import (
	"testing"
	"time"
)

func TestBound(t *testing.T) {
	tests := []struct {
		name     string
		requests float64
		busy     float64
		want     string
	}{
		{name: "at the client limit", requests: 19 * 100, busy: 1, want: "QPS"},
		{name: "cores busy", requests: 10 * 100, busy: 1.9, want: "CPU"},
		{name: "both", requests: 20 * 100, busy: 2, want: "QPS+CPU"},
		{name: "neither", requests: 5 * 100, busy: 0.5, want: "neither"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PhaseUsage{Busy: tt.busy,
				Clients: map[string]ClientUse{"shard-1": {Requests: tt.requests}, "shard-2": {Requests: tt.requests / 2}}}
			if got := p.Bound(100*time.Second, 20, 2); got != tt.want {
				t.Errorf("Bound = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTopClient(t *testing.T) {
	tests := []struct {
		name     string
		clients  map[string]ClientUse
		wantName string
	}{
		{name: "none", clients: nil, wantName: ""},
		{name: "the most requests", clients: map[string]ClientUse{"a": {Requests: 1}, "b": {Requests: 3}, "c": {Requests: 2}}, wantName: "b"},
		{name: "a tie goes to the first by name", clients: map[string]ClientUse{"b": {Requests: 2}, "a": {Requests: 2}}, wantName: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := (PhaseUsage{Clients: tt.clients}).TopClient(); got != tt.wantName {
				t.Errorf("TopClient = %q, want %q", got, tt.wantName)
			}
		})
	}
}

func TestRunUsage(t *testing.T) {
	r := RunUsage{Controllers: []Usage{{Name: "shard-1", PeakRSS: 10, CPU: 1.5}, {Name: "shard-2", PeakRSS: 30, CPU: 2}}}
	if got := r.ControllerCPU(); got != 3.5 {
		t.Errorf("ControllerCPU = %v, want 3.5", got)
	}
	if got := r.MaxControllerRSS(); got != 30 {
		t.Errorf("MaxControllerRSS = %v, want 30", got)
	}
}

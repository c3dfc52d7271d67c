package framework

import (
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	at := time.Unix(1000, 0)
	tests := []struct {
		name    string
		text    string
		want    MachineCPU
		wantErr bool
	}{
		{name: "guest fields left out", text: "cpu  100 10 50 800 40 5 5 0 70 3\ncpu0 1 2 3 4 5 6 7 8 9 10\n",
			want: MachineCPU{At: at, Busy: 170, Total: 1010}},
		{name: "no guest fields", text: "cpu 1 2 3 4 5 6 7 8", want: MachineCPU{At: at, Busy: 27, Total: 36}},
		{name: "per-cpu line first", text: "cpu0 1 2 3 4 5 6 7 8", wantErr: true},
		{name: "too few fields", text: "cpu 1 2 3", wantErr: true},
		{name: "not a number", text: "cpu 1 2 x 4 5 6 7 8", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat(tt.text, at)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseProcStat: err %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseProcStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBusyCores(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name        string
		since, then MachineCPU
		want        float64
	}{
		{name: "two cores busy for 10 s", since: MachineCPU{At: t0, Busy: 500}, then: MachineCPU{At: t0.Add(10 * time.Second), Busy: 2500}, want: 2},
		{name: "half a core", since: MachineCPU{At: t0}, then: MachineCPU{At: t0.Add(4 * time.Second), Busy: 200}, want: 0.5},
		{name: "empty interval", since: MachineCPU{At: t0, Busy: 1}, then: MachineCPU{At: t0, Busy: 9}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.then.BusyCores(tt.since); got != tt.want {
				t.Errorf("BusyCores = %v, want %v", got, tt.want)
			}
		})
	}
}

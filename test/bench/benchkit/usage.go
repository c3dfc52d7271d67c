package benchkit

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kshard/kshard/test/framework"
)

// Usage is one process's figures over a configuration's run.
type Usage struct {
	Name    string
	PeakRSS float64 // bytes
	CPU     float64 // seconds
}

// RunUsage is a configuration's metered processes by role.
type RunUsage struct {
	Controllers, Coordinator []Usage
	Plane                    map[string]Usage
}

// SplitUsage sorts a meter's figures by the roles Side.Metered and ControlPlane gave.
func SplitUsage(us []framework.Usage) RunUsage {
	out := RunUsage{Plane: map[string]Usage{}}
	for _, u := range us {
		pu := Usage{Name: u.Name, PeakRSS: u.PeakRSSBytes, CPU: u.CPUSeconds}
		switch u.Role {
		case "controller":
			out.Controllers = append(out.Controllers, pu)
		case "coordinator":
			out.Coordinator = append(out.Coordinator, pu)
		default:
			out.Plane[u.Name] = pu
		}
	}
	return out
}

// ClientUse is what a controller process's API clients did: requests sent and the time
// they waited, summed, in the client-side rate limiters.
type ClientUse struct {
	Requests, LimiterWait float64
}

// ScrapeClients reads every controller process's client-go request counter and summed
// rate-limiter wait.
func ScrapeClients(ctx context.Context, b *testing.B, ctrls []Controller) map[string]ClientUse {
	b.Helper()
	out := map[string]ClientUse{}
	for _, c := range ctrls {
		m, err := c.Metrics(ctx)
		if err != nil {
			b.Fatalf("%s: metrics: %v", c.Name, err)
		}
		out[c.Name] = ClientUse{Requests: m.Value(c.Prefix + "rest_client_requests_total"),
			LimiterWait: m.Value(c.Prefix + "rest_client_rate_limiter_duration_seconds_sum")}
	}
	return out
}

// PhaseUsage is what a phase cost: CPU-seconds of every metered process by role, the
// controllers' clients, and the machine's busy cores and load at the end.
type PhaseUsage struct {
	Plane, Controllers map[string]float64 // CPU-seconds
	Clients            map[string]ClientUse
	Busy, Load         float64
}

// Cores returns how many cores the control plane process proc used on average over took.
func (p PhaseUsage) Cores(proc string, took time.Duration) float64 {
	return p.Plane[proc] / took.Seconds()
}

// TopClient returns the controller process that sent the most requests (ties by name).
func (p PhaseUsage) TopClient() (string, ClientUse) {
	names := make([]string, 0, len(p.Clients))
	for n := range p.Clients {
		names = append(names, n)
	}
	sort.Strings(names)
	var name string
	var top ClientUse
	for _, n := range names {
		if u := p.Clients[n]; name == "" || u.Requests > top.Requests {
			name, top = n, u
		}
	}
	return name, top
}

// Bound names what limited a phase that took took: "QPS" when the busiest controller
// process sent at >= 85 % of qps over it, "CPU" when the machine's cores were >= 85 %
// busy, both, or "neither" (the controllers waited on the cluster or on the load).
func (p PhaseUsage) Bound(took time.Duration, qps float64, cores int) string {
	_, top := p.TopClient()
	q := top.Requests/took.Seconds() >= 0.85*qps
	c := p.Busy >= 0.85*float64(cores)
	switch {
	case q && c:
		return "QPS+CPU"
	case q:
		return "QPS"
	case c:
		return "CPU"
	}
	return "neither"
}

// PhaseMeter measures one phase: the CPU time (not the peaks: those are the run's) of the
// side's processes and the control plane, the machine's CPU, and the clients' counters.
type PhaseMeter struct {
	ctx      context.Context
	ctrls    []Controller
	clients0 map[string]ClientUse
	meter    *framework.Meter
	cpu0     framework.MachineCPU
}

// StartPhase starts a PhaseMeter over the side's controllers and the metered processes.
func StartPhase(ctx context.Context, b *testing.B, ctrls []Controller, metered ...framework.Metered) *PhaseMeter {
	b.Helper()
	procs := slices.Clone(metered)
	for i := range procs {
		procs[i].ResetPeak = false
	}
	m := &PhaseMeter{ctx: ctx, ctrls: ctrls, clients0: ScrapeClients(ctx, b, ctrls), meter: framework.StartMeter(b, procs...)}
	var err error
	if m.cpu0, err = framework.ReadMachineCPU(); err != nil {
		b.Fatal(err)
	}
	return m
}

// Stop ends the phase's measurement.
func (m *PhaseMeter) Stop(b *testing.B) PhaseUsage {
	b.Helper()
	cpu1, err := framework.ReadMachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	p := PhaseUsage{Plane: map[string]float64{}, Controllers: map[string]float64{}, Clients: map[string]ClientUse{}, Busy: cpu1.BusyCores(m.cpu0)}
	p.Load, _ = framework.LoadAverage()
	for _, u := range m.meter.Stop(b) {
		if u.Role == "plane" {
			p.Plane[u.Name] = u.CPUSeconds
		} else {
			p.Controllers[u.Name] = u.CPUSeconds
		}
	}
	for n, u1 := range ScrapeClients(m.ctx, b, m.ctrls) {
		u0 := m.clients0[n]
		p.Clients[n] = ClientUse{Requests: u1.Requests - u0.Requests, LimiterWait: u1.LimiterWait - u0.LimiterWait}
	}
	return p
}

// ControllerCPU is the CPU-seconds of every controller process summed.
func (r RunUsage) ControllerCPU() float64 {
	s := 0.0
	for _, u := range r.Controllers {
		s += u.CPU
	}
	return s
}

// MaxControllerRSS is the highest peak RSS of a controller process, in bytes.
func (r RunUsage) MaxControllerRSS() float64 {
	most := 0.0
	for _, u := range r.Controllers {
		most = max(most, u.PeakRSS)
	}
	return most
}

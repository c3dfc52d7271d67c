package endpointslice

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/kshard/kshard/test/bench/benchkit"
	"github.com/kshard/kshard/test/framework"
)

// phaseResult is one phase of flips.
type phaseResult struct {
	name              string
	rate              int           // flips per second asked
	sending           time.Duration // from the first flip to the last sent
	took              time.Duration // from the first flip until every flip was seen (or the drain gave up)
	flips, flipErrors int
	unseen            int     // flips never seen in the slices within the drain
	writes            int     // slice writes the watch saw
	requests          float64 // endpointslices write requests the API server counted
	p50, p99, max     float64 // seconds from a flip to its slice event
	use               benchkit.PhaseUsage
}

func (p phaseResult) writesPerSecond() float64 { return float64(p.writes) / p.took.Seconds() }

func (p phaseResult) writesPerFlip() float64 {
	if p.flips == 0 {
		return 0
	}
	return float64(p.writes) / float64(p.flips)
}

func (p phaseResult) cores(proc string) float64 { return p.use.Cores(proc, p.took) }

// result is one configuration's run.
type result struct {
	config
	rep            int
	takeover       time.Duration
	takeoverWrites int
	phases         []phaseResult
	usage          benchkit.RunUsage
	// share is the busiest shard's share of the namespaces (1 for upstream and one shard).
	share    float64
	perShard map[string]int
}

func (r result) phase(name string) (phaseResult, bool) {
	for _, p := range r.phases {
		if p.name == name {
			return p, true
		}
	}
	return phaseResult{}, false
}

func report(b *testing.B, r result) {
	for _, p := range r.phases {
		b.ReportMetric(p.writesPerSecond(), p.name+"-writes/s")
		b.ReportMetric(p.p99, p.name+"-p99-s")
		b.ReportMetric(p.writesPerFlip(), p.name+"-writes/flip")
	}
	b.ReportMetric(r.usage.ControllerCPU(), "controller-cpu-s")
	b.ReportMetric(r.usage.MaxControllerRSS()/mib, "max-process-peak-RSS-MiB")
}

// summary logs the tables (median [min–max] over the repetitions; ratios pair the runs of
// one repetition) and writes them to the artifacts folder as summary.txt.
func summary(b *testing.B, s sizes, configs []config, results []result) {
	if len(results) == 0 {
		return
	}
	byConfig := map[string][]result{}
	for _, r := range results {
		byConfig[r.Name] = append(byConfig[r.Name], r)
	}
	spread := func(rs []result, f func(result) (float64, bool)) framework.Spread {
		var xs []float64
		for _, r := range rs {
			if v, ok := f(r); ok {
				xs = append(xs, v)
			}
		}
		return framework.SpreadOf(xs)
	}
	// ratio pairs, per repetition, config num's value of a phase with config den's.
	ratio := func(num, den, phase string, f func(phaseResult) float64) framework.Spread {
		var xs []float64
		for _, n := range byConfig[num] {
			for _, d := range byConfig[den] {
				pn, ok1 := n.phase(phase)
				pd, ok2 := d.phase(phase)
				if n.rep == d.rep && ok1 && ok2 && f(pd) > 0 {
					xs = append(xs, f(pn)/f(pd))
				}
			}
		}
		return framework.SpreadOf(xs)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d nodes; %d namespaces x %d headless Services x %d pods; %d repetition(s); every controller process: %s\n\n",
		s.nodes, s.namespaces, s.services, s.pods, s.reps, strings.Join(controllerArgs(), " "))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "phase\trun\tflips/s asked (sent; seen)\tslice writes/s\twrites/s vs kshard-1 (ceiling)\twrites per flip\twrite requests\tflip→slice p50 / p99 / max s\tunseen\tbusiest process req/s (limiter wait s)\tapiserver cores\tetcd cores\tbusy cores (of %d)\tbound\n", cores)
	for _, phase := range []string{"saturation", "latency"} {
		for _, c := range configs {
			rs := byConfig[c.Name]
			of := func(f func(p phaseResult) float64) framework.Spread {
				return spread(rs, func(r result) (float64, bool) {
					p, ok := r.phase(phase)
					return f(p), ok
				})
			}
			rate := 0
			var bounds []string
			for _, r := range rs {
				if p, ok := r.phase(phase); ok {
					rate = p.rate
					bounds = append(bounds, p.use.Bound(p.took, qps, cores))
				}
			}
			vs := "-"
			if c.Shards > 1 {
				vs = fmt.Sprintf("%s (%s)", ratio(c.Name, "kshard-1", phase, phaseResult.writesPerSecond).Format("%.2f"),
					spread(rs, func(r result) (float64, bool) { return 1 / r.share, r.share > 0 }).Format("%.2f"))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d (%s; %s)\t%s\t%s\t%s\t%s\t%s / %s / %s\t%s\t%s (%s)\t%s\t%s\t%s\t%s\n", phase, c.Name, rate,
				of(func(p phaseResult) float64 { return float64(p.flips) / p.sending.Seconds() }).Format("%.1f"),
				of(func(p phaseResult) float64 { return float64(p.flips) / p.took.Seconds() }).Format("%.1f"),
				of(phaseResult.writesPerSecond).Format("%.1f"), vs, of(phaseResult.writesPerFlip).Format("%.2f"),
				of(func(p phaseResult) float64 { return p.requests }).Format("%.0f"),
				of(func(p phaseResult) float64 { return p.p50 }).Format("%.2f"), of(func(p phaseResult) float64 { return p.p99 }).Format("%.2f"),
				of(func(p phaseResult) float64 { return p.max }).Format("%.2f"), of(func(p phaseResult) float64 { return float64(p.unseen) }).Format("%.0f"),
				of(func(p phaseResult) float64 { _, u := p.use.TopClient(); return u.Requests / p.took.Seconds() }).Format("%.1f"),
				of(func(p phaseResult) float64 { _, u := p.use.TopClient(); return u.LimiterWait }).Format("%.0f"),
				of(func(p phaseResult) float64 { return p.cores("kube-apiserver") }).Format("%.2f"),
				of(func(p phaseResult) float64 { return p.cores("etcd") }).Format("%.2f"),
				of(func(p phaseResult) float64 { return p.use.Busy }).Format("%.2f"), strings.Join(bounds, "/"))
		}
	}
	_ = tw.Flush()
	sb.WriteString("\nper configuration, takeover and whole run:\n")
	tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\ttakeover s (slice writes)\tcontroller CPU-s (sum)\tper controller process: peak RSS MiB, CPU-s\tcoordinator: peak RSS MiB, CPU-s")
	for _, c := range configs {
		rs := byConfig[c.Name]
		if len(rs) == 0 {
			continue
		}
		var procs []string
		for _, r := range rs {
			for _, u := range append(slices.Clone(r.usage.Controllers), r.usage.Coordinator...) {
				procs = append(procs, fmt.Sprintf("%s %.0f MiB %.1f CPU-s", u.Name, u.PeakRSS/mib, u.CPU))
			}
		}
		fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\n", c.Name,
			spread(rs, func(r result) (float64, bool) { return r.takeover.Seconds(), true }).Format("%.1f"),
			spread(rs, func(r result) (float64, bool) { return float64(r.takeoverWrites), true }).Format("%.0f"),
			spread(rs, func(r result) (float64, bool) { return r.usage.ControllerCPU(), true }).Format("%.1f"), strings.Join(procs, "; "))
	}
	_ = tw.Flush()
	sb.WriteString("\nmedian [min–max] over the repetitions. Flips sent is per second of sending; seen is per second from the first flip until every flip showed in the slices (what the controller absorbed). Slice writes are those the benchmark's watch saw (creates, updates, deletes of managed slices) until every flip of the phase was seen; write requests are the API server's count (failed and no-op writes included). The client limit is " +
		fmt.Sprint(qps) + "/s per controller process; bound: QPS when the busiest process sent >= 85 % of it, CPU when the machine's cores were >= 85 % busy.\n")
	b.Logf("summary:\n%s", sb.String())
	path := filepath.Join(framework.ArtifactsDir(b), "summary.txt")
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		b.Error(err)
	}
	b.Logf("summary written to %s", path)
}
